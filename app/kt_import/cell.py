"""A colleague's Kernel Tuner script runs in a sandbox cell (app.gpu.sandbox), not with the
user's rights: an allow-listed environment (no API keys, HOME in the cell's scratch), its own
user and network namespaces (no network, loopback included), Landlock (reads the system,
Python and the script's own directory; writes only its scratch, the one place the importer
reads back), resource limits, and the seccomp seal before the script's first line (refusing with EPERM) (no
programs, processes or sockets; the C compiler for run_kernel goes through the cell's compile
helper). Where this machine cannot build such a cell the import is refused unless the user
passes --trust-script, and then it runs with the user's rights, which the CLI says plainly.

The child's entry is `cell_main`: it enters the cell before importing numpy (namespaces and
Landlock need a process with one thread), then imports the runner and seals.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import subprocess
import sys
from pathlib import Path

from app.core import entry_points
from app.gpu import sandbox

# The walls without which a script could reach the key, the user's files or the network.
NEEDED = ("environment", "network", "files", "processes")


class CellUnavailable(RuntimeError):
    """This machine cannot run the script in a cell; the message names the missing walls."""


def missing_walls() -> list[str]:
    """The walls this machine does not give a cell ('name: why'), empty when all are on."""
    found = sandbox.status()
    return [f"{k} {found.get(k, 'unknown')}" for k in NEEDED
            if not str(found.get(k, "")).startswith("on")]


def plan_for(script: Path, work: Path) -> sandbox.CellPlan:
    """A CPU cell writing only `work`, reading the script's directory besides the system and
    Python (a directory holding the user's home stays list-only: then only the script file)."""
    plan = sandbox.plan_cell("cpu", str(work))
    folder = script.parent.resolve()
    home = os.path.realpath(os.path.expanduser("~"))
    if folder == Path("/") or home == str(folder) or home.startswith(str(folder) + os.sep):
        plan.rules.read.append(str(script))
        plan.rules.list_only.append(str(folder))
    else:
        plan.rules.read.append(str(folder))
    return plan


def run_in_cell(script: Path, work: Path, timeout_s: float) -> subprocess.CompletedProcess:
    problems = missing_walls()
    if problems:
        raise CellUnavailable("; ".join(problems))
    plan = plan_for(script, work)
    env = sandbox.cell_environment(str(work))
    return _run(entry_points.command("app.kt_import.cell:cell_main", str(script), str(work),
                                     sys_path=plan.sys_path),
                env, str(work), pickle.dumps(plan), timeout_s)


def run_trusted(script: Path, work: Path, timeout_s: float) -> subprocess.CompletedProcess:
    """The user said to trust the script: it runs with their rights and environment."""
    return _run(entry_points.command("app.kt_import.runner:main", str(script), str(work),
                                     isolated=False), None,
                str(Path(__file__).resolve().parents[2]), b"", timeout_s)


def _run(cmd: list[str], env: dict[str, str] | None, cwd: str, stdin: bytes,
         timeout_s: float) -> subprocess.CompletedProcess:
    # its own session: a timeout kills the script's whole process group, helper included
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(stdin, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        err += f"\nthe script ran longer than {timeout_s:g} s and was stopped".encode()
    return subprocess.CompletedProcess(cmd, proc.returncode, out.decode(errors="replace"),
                                       err.decode(errors="replace"))


def _seal(applied: dict[str, str]) -> None:
    """The sandbox's seccomp seal, refusing (EPERM) rather than killing: a script that imports
    CuPy or starts a program gets an error it reports, not a dead process. subprocess.run goes
    to the cell's compile helper from here on (run_kernel's C compiler)."""
    from app.gpu.sandbox import seccomp

    applied["processes"] = seccomp.seal(kill=False, allow_unix_sockets=False)
    if applied["processes"].startswith("on"):
        subprocess.run = sandbox.run_tool


def cell_main(argv: list[str]) -> int:
    """The child: enter the cell (one thread: before numpy), import the runner, seal, run."""
    plan = pickle.loads(sys.stdin.buffer.read())  # our own plan, written by the parent
    sys.stdin = open(os.devnull)  # noqa: SIM115 - the script gets no input, as before
    applied = sandbox.enter_cell(plan)
    from app.kt_import import runner  # numpy: threads from here on

    with contextlib.suppress(Exception):  # absent or broken: the runner installs a shim
        import kernel_tuner  # noqa: F401 - imported before the seal: it probes for backends
    _seal(applied)
    off = [f"{k} {applied.get(k, 'missing')}" for k in NEEDED
           if not applied.get(k, "").startswith("on")]
    if off:  # the probe said yes, this process got less: the script does not run
        runner.write_result(Path(argv[1]), {"error": "the script was not run: its sandbox cell "
                                            "could not be built (" + "; ".join(off) + ")"})
        return 0
    return runner.main(argv)
