"""No new processes, programs, sockets or tracing while candidate code runs: a seccomp-bpf filter
built with libseccomp (through the `pyseccomp` package). Threads stay allowed (OpenMP, the
GPU driver): clone with CLONE_THREAD passes, clone3 answers ENOSYS so glibc falls back to
clone, whose flags a filter can see.

Once loaded the filter cannot be lifted, and it covers every thread (TSYNC). Other
architectures' system calls (int 0x80, x32) kill the process (libseccomp's default).
"""

from __future__ import annotations

import errno
import os

CLONE_THREAD = 0x00010000
AF_UNIX = 1

# Never needed by an honest kernel or by the worker after it is sealed.
PROGRAMS = ("execve", "execveat", "fork", "vfork")
FORBIDDEN = (
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_open", "pidfd_getfd",
    "pidfd_send_signal", "kcmp", "tkill",  # other processes
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_by_handle_at",
    "name_to_handle_at", "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key",
    "request_key", "io_uring_setup", "io_uring_enter", "io_uring_register",  # io_uring skips seccomp
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "socketcall",
)


def available() -> str:
    try:
        import pyseccomp
        pyseccomp.get_api()
        return ""
    except Exception as exc:  # noqa: BLE001 - the reason is reported as is
        return f"{type(exc).__name__}: {exc}"


def seal(kill: bool, allow_unix_sockets: bool) -> str:
    """Load the filter into this process (all threads); a one-line description.

    kill: a forbidden call kills the process with SIGSYS (CPU cells, where only candidate
    code could make one); otherwise it fails with EPERM (GPU cells, whose host code is ours).
    """
    problem = available()
    if problem:
        return f"off: libseccomp is not usable ({problem})"
    import pyseccomp as sc

    deny = sc.KILL_PROCESS if kill else sc.ERRNO(errno.EPERM)
    me = os.getpid()
    f = sc.SyscallFilter(sc.ALLOW)
    f.set_attr(sc.Attr.CTL_TSYNC, 1)
    _deny_all(f, deny, PROGRAMS + FORBIDDEN)
    f.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    if allow_unix_sockets:
        f.add_rule(deny, "socket", sc.Arg(0, sc.NE, AF_UNIX))
    else:
        f.add_rule(deny, "socket")
    # Signals only to itself: kill(-1), kill(parent) and friends are refused.
    for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
        f.add_rule(deny, name, sc.Arg(0, sc.NE, me))
    f.load()
    mode = "killed (SIGSYS)" if kill else "refused (EPERM)"
    return (f"on: seccomp; exec, fork, sockets{' (but unix)' if allow_unix_sockets else ''}, "
            f"tracing and signals to others are {mode}")


def _deny_all(f, action: int, names: tuple[str, ...]) -> None:
    for name in names:
        try:
            f.add_rule(action, name)
        except (OSError, ValueError, RuntimeError):
            pass  # not a system call on this architecture


def seal_compiler() -> str:
    """The compile helper's filter: it may start the toolchain, but no sockets, tracing,
    namespaces or io_uring (EPERM)."""
    problem = available()
    if problem:
        return f"off: libseccomp is not usable ({problem})"
    import pyseccomp as sc

    f = sc.SyscallFilter(sc.ALLOW)
    _deny_all(f, sc.ERRNO(errno.EPERM), FORBIDDEN + ("socket",))
    f.load()
    return "on: seccomp; no sockets, tracing or namespaces (EPERM); toolchain may run"
