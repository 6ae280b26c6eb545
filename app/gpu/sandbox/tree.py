"""Killing a cell's whole process tree from outside (the engine's side).

With a PID namespace (namespaces.py) the kernel does it: the cell's first process is the
namespace's init, and its death kills every process left in the namespace. Where there is no
PID namespace, the engine walks the tree through /proc (children of children, whatever their
session or process group: setsid does not hide a process from its parent's list), stops each
process it finds so none can start another, then kills them all. The cell is a child
subreaper (namespaces.child_subreaper), so an orphan such as cc1 whose driver died stays in
the tree until then.
"""

from __future__ import annotations

import contextlib
import os
import signal


def descendants(pid: int) -> list[int]:
    """The process tree below `pid` (children before grandchildren), read from /proc."""
    found: list[int] = []
    queue = [pid]
    while queue:
        parent = queue.pop(0)
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{parent}/task/{tid}/children", "rb") as f:
                    kids = [int(c) for c in f.read().split()]
            except (OSError, ValueError):
                continue
            for kid in kids:
                if kid not in found and kid != pid:
                    found.append(kid)
                    queue.append(kid)
    return found


def kill_tree(pid: int) -> int:
    """SIGKILL `pid` and every process below it; how many processes were signalled."""
    seen: set[int] = set()
    for _round in range(3):  # a process may have forked while we walked: walk again
        tree = [p for p in descendants(pid) if p not in seen]
        if not tree:
            break
        for p in tree:  # frozen first: a stopped process starts nothing
            _signal(p, signal.SIGSTOP)
        seen.update(tree)
    for p in (pid, *seen):
        _signal(p, signal.SIGKILL)
    return 1 + len(seen)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
