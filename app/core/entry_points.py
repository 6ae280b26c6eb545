"""Our own Python programs started as child processes (a sandbox cell, its compile helper, the
sandbox probe, a Kernel Tuner script's cell, the compile preview), from a source install and
from the frozen bundle alike.

A source install starts its interpreter with `-c` and a boot line. The bundle's executable
runs no `-c` (it is the app), so it is started with ENTRY_FLAG and the target instead; its
entry point (packaging/kernelswarm_entry.py) hands them to run() before it imports anything
else. Either way the target is "app.module:function", called with the remaining arguments as a
list of strings; what it returns is the exit code. The boot imports nothing but this module
before the target's own: a cell must still be single-threaded when it enters its sandbox.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections.abc import Sequence

ENTRY_FLAG = "--kernelswarm-entry"
_BOOT = ("import sys, json; sys.path[:0] = json.loads(sys.argv[1]); "
         "from app.core.entry_points import run; sys.exit(run(sys.argv[2], sys.argv[3:]))")


def frozen() -> bool:
    """True in the bundle PyInstaller builds (packaging/)."""
    return bool(getattr(sys, "frozen", False))


def command(target: str, *args: str, sys_path: Sequence[str] | None = None,
            isolated: bool = True) -> list[str]:
    """The argv that runs `target` ("app.module:function") with `args` in a fresh process.
    sys_path: where a source install's child imports from (default: this process's path);
    isolated: -I, the child ignores PYTHON* variables and the user's site directory."""
    if frozen():
        return [sys.executable, ENTRY_FLAG, target, *args]
    path = [p or os.getcwd() for p in (sys.path if sys_path is None else sys_path)]
    return [sys.executable, *(["-I"] if isolated else []), "-c", _BOOT, json.dumps(path),
            target, *args]


def run(target: str, args: Sequence[str]) -> int:
    """Call `target` with `args`; its return value (None: 0) is the exit code. Only our own
    modules: anything else is one line on stderr and exit code 2."""
    module, _, function = target.partition(":")
    if not (module == "app" or module.startswith("app.")) or not function.isidentifier():
        print(f"kernelswarm: {target!r} is not one of the app's entry points", file=sys.stderr)
        return 2
    result = getattr(importlib.import_module(module), function)(list(args))
    return int(result or 0)
