"""Namespaces of a cell: its own user namespace (so an unprivileged user may create the rest),
network namespace, PID namespace and IPC namespace.

- network: no interface but a loopback that is down; connect() to any address, the machine's
  own loopback included, fails; abstract unix sockets are per namespace too.
- PID: the cell names only its own processes (kill, prlimit, setpriority, sched_*, ioprio_set
  and F_SETOWN take pids of this namespace). Its pid 1 (our own small init) ends with the
  cell, and the kernel then kills everything left in the namespace: the compile helper, cc1,
  the kernel host and whatever a candidate started.
- IPC: SysV shared memory, message queues and semaphores (and POSIX message queues) are
  private to the cell and destroyed with it.

A new PID namespace takes effect for children only, so the process forks twice: a small init
(pid 1 inside, it reaps orphans) and the cell (pid 2); the first process stays outside as a
shim that waits and then ends the way the cell ended (same exit code or signal), so the engine
watching the shim sees what it saw before. Must run while the process has one thread (the
kernel refuses CLONE_NEWUSER otherwise). Python 3.11 has no os.unshare: ctypes calls libc.
"""

from __future__ import annotations

import ctypes
import os
import resource
import select
import signal

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWNS = 0x00020000
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _libc() -> ctypes.CDLL:
    # the process's own symbols (libc among them): find_library would start ldconfig
    return ctypes.CDLL(None, use_errno=True)


def _unshare(flags: int) -> None:
    unshare = getattr(os, "unshare", None)
    if unshare is not None:  # Python >= 3.12
        unshare(flags)
        return
    if _libc().unshare(ctypes.c_int(flags)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _prctl(option: int, value: int) -> int:
    return _libc().prctl(option, value, 0, 0, 0)


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def isolate_network() -> str:
    """Move this process into its own user and network namespaces (same uid/gid as before)."""
    return isolate(pid_and_ipc=False)["network"]


def isolate(pid_and_ipc: bool = True) -> dict[str, str]:
    """Enter new user, network, IPC and PID namespaces; the lines "network", "pid namespace",
    "ipc namespace". With a PID namespace this process forks: only the cell returns (pid 2 of
    the namespace); the parent becomes the shim and the namespace's init, neither returns."""
    uid, gid = os.getuid(), os.getgid()
    extra = CLONE_NEWPID | CLONE_NEWIPC if pid_and_ipc else 0
    lines = {"pid namespace": "off: not requested", "ipc namespace": "off: not requested"}
    mounts = "off: not requested"
    errors: list[str] = []
    # most walls first; a root process without user namespaces can still take the others
    # a cell with PID and IPC namespaces also gets a mount namespace (its file view, mounts.py)
    own_mounts = CLONE_NEWNS if pid_and_ipc else 0
    attempts = [CLONE_NEWUSER | CLONE_NEWNET | extra | own_mounts]
    if extra:
        attempts.append(CLONE_NEWUSER | CLONE_NEWNET)
    if uid == 0:
        attempts += [CLONE_NEWNET | extra | own_mounts] if extra else []
        attempts.append(CLONE_NEWNET)
    for flags in attempts:
        try:
            _unshare(flags)
            break
        except OSError as exc:
            errors.append(exc.strerror or str(exc))
    else:
        why = errors[0] if errors else "refused"
        off = f"off: unshare refused ({why})"
        return {"network": f"{off}; network stays reachable",
                "pid namespace": f"{off}; the cell can name every process of the user",
                "ipc namespace": f"{off}; SysV IPC is shared with the host",
                "mount namespace": f"{off}; stat can still see hidden files"}
    net = "on: user+network namespace (no interfaces)"
    if flags & CLONE_NEWUSER:
        try:  # keep our own ids inside the namespace: files in scratch stay ours
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"{uid} {uid} 1")
            _write("/proc/self/gid_map", f"{gid} {gid} 1")
        except OSError as exc:
            net = f"on: user+network namespace (id map failed: {exc.strerror})"
    else:
        net = "on: network namespace (no interfaces)"
    if extra and not flags & CLONE_NEWPID:
        why = errors[0] if errors else "refused"
        lines = {"pid namespace": f"off: unshare(pid) refused ({why}); the cell can name "
                                  "every process of the user (seccomp still limits what to)",
                 "ipc namespace": f"off: unshare(ipc) refused ({why}); SysV IPC is shared "
                                  "with the host (seccomp refuses it to CPU cells)"}
    elif extra:
        lines = {"pid namespace": "on: own PID namespace (sees and names only its own "
                                  "processes; all die with its first)",
                 "ipc namespace": "on: own IPC namespace (SysV shared memory, queues and "
                                  "semaphores private, gone with the cell)"}
        _become_init()
    if own_mounts:
        mounts = ("on" if flags & CLONE_NEWNS else
                  "off: unshare(mount) refused; stat can still see hidden files")
    return {"network": net, **lines, "mount namespace": mounts}


def _become_init() -> None:
    """Fork into the new PID namespace: a small init (pid 1) that forks the cell (pid 2, the
    only caller that returns) and reaps; the parent outside waits and ends as the cell ended.
    The cell is not pid 1 itself: a namespace's init ignores signals it sends itself (a
    handler's os.kill(os.getpid(), SIGSEGV) must still end it)."""
    alive_r, alive_w = os.pipe()  # the init sees EOF here once the shim is gone
    status_r, status_w = os.pipe()  # the init passes on how the cell ended
    init = os.fork()
    if init:
        os.close(alive_r)
        os.close(status_w)
        _shim(init, keep=(alive_w, status_r))
    os.close(alive_w)
    os.close(status_r)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the shim killed: the whole namespace with it
    if select.select([alive_r], [], [], 0)[0]:  # the shim died before the line above
        os._exit(1)
    os.close(alive_r)
    cell = os.fork()
    if cell == 0:
        os.close(status_w)
        return
    _init(cell, status_w)


def _close_all_but(keep: tuple[int, ...]) -> None:
    """Close every descriptor from 3 up but `keep`: the cell's pipes to the engine stay the
    cell's alone, so the engine sees them close when the cell ends."""
    start = 3
    for fd in sorted(keep):
        os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, 1 << 16)


def _init(cell: int, status_w: int) -> None:
    """pid 1: reap every orphan; when the cell ends, report its status and exit (the kernel
    then kills whatever is left in the namespace)."""
    _close_all_but((status_w,))
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(1)
        if pid == cell:
            os.write(status_w, status.to_bytes(4, "little"))
            os._exit(0)


def _shim(init: int, keep: tuple[int, int]) -> None:
    """The parent outside the namespace: holds nothing of the cell's, waits for the init and
    ends the way the cell ended (its exit code, or the same signal), as the engine expects."""
    _close_all_but(keep)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)  # terminated: so is the cell (its death signal)
    try:
        _, status = os.waitpid(init, 0)
    except ChildProcessError:
        os._exit(1)
    reported = os.read(keep[1], 4)
    if len(reported) == 4:
        status = int.from_bytes(reported, "little")
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)


def child_subreaper() -> None:
    """Orphans of this process's descendants (cc1 whose driver died) stay its descendants
    instead of moving to the system's init: a tree kill from outside still finds them."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
