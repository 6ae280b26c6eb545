"""Namespaces of a cell: its own user namespace (so an unprivileged user may create the rest),
network namespace, PID namespace and IPC namespace.

- network: no interface but a loopback that is down; connect() to any address, the machine's
  own loopback included, fails; abstract unix sockets are per namespace too.
- PID: the cell names only its own processes (kill, prlimit, setpriority, sched_*, ioprio_set
  and F_SETOWN take pids of this namespace). Its first process (the worker: pid 1) is the init
  of the namespace, so when it dies the kernel kills everything left in it: the compile
  helper, cc1, the kernel host and whatever a candidate started.
- IPC: SysV shared memory, message queues and semaphores (and POSIX message queues) are
  private to the cell and destroyed with it.

A new PID namespace takes effect for children only, so the process forks once: the child is
the cell (pid 1 inside) and the parent stays outside as a shim that waits and then ends the
way the cell ended (same exit code or signal), so the engine watching the shim sees what it
saw before. Must run while the process has one thread (the kernel refuses CLONE_NEWUSER
otherwise). Python 3.11 has no os.unshare, so the libc call goes through ctypes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import select
import signal

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
CLONE_NEWIPC = 0x08000000
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


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
    "ipc namespace". With a PID namespace this process forks: only the child returns (pid 1 of
    the namespace); the parent becomes the shim and never returns."""
    uid, gid = os.getuid(), os.getgid()
    extra = CLONE_NEWPID | CLONE_NEWIPC if pid_and_ipc else 0
    lines = {"pid namespace": "off: not requested", "ipc namespace": "off: not requested"}
    errors: list[str] = []
    # most walls first; a root process without user namespaces can still take the others
    attempts = [CLONE_NEWUSER | CLONE_NEWNET | extra]
    if extra:
        attempts.append(CLONE_NEWUSER | CLONE_NEWNET)
    if uid == 0:
        attempts += [CLONE_NEWNET | extra] if extra else []
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
                "ipc namespace": f"{off}; SysV IPC is shared with the host"}
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
    return {"network": net, **lines}


def _become_init() -> None:
    """Fork into the new PID namespace: the child returns as its pid 1; the parent waits for it
    and ends the same way (it never returns)."""
    alive_r, alive_w = os.pipe()  # the child sees EOF here once the shim is gone
    pid = os.fork()
    if pid == 0:
        os.close(alive_w)
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # the shim killed: the whole cell with it
        if select.select([alive_r], [], [], 0)[0]:  # the shim died before the line above
            os._exit(1)
        os.close(alive_r)
        return
    os.close(alive_r)
    _shim(pid, keep=alive_w)


def _shim(child: int, keep: int) -> None:
    """The parent outside the namespace: holds nothing of the cell's (its pipes are closed so
    the engine sees the cell's own end of them), waits, and mirrors the cell's end."""
    os.closerange(3, keep)
    os.closerange(keep + 1, 1 << 16)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)  # terminated: so is the cell (its death signal)
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except ChildProcessError:
            os._exit(1)
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
