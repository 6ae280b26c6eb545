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
    f = _threads_only(sc, deny, allow_unix_sockets)
    # Signals only to itself: kill(-1), kill(parent) and friends are refused.
    for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
        f.add_rule(deny, name, sc.Arg(0, sc.NE, os.getpid()))
    f.load()
    mode = "killed (SIGSYS)" if kill else "refused (EPERM)"
    return (f"on: seccomp; exec, fork, sockets{' (but unix)' if allow_unix_sockets else ''}, "
            f"tracing and signals to others are {mode}")


def _threads_only(sc, deny: int, allow_unix_sockets: bool):
    """A filter that refuses new programs, processes (threads pass), sockets and tracing."""
    f = sc.SyscallFilter(sc.ALLOW)
    f.set_attr(sc.Attr.CTL_TSYNC, 1)
    _deny_all(f, deny, PROGRAMS + FORBIDDEN)
    f.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    if allow_unix_sockets:
        f.add_rule(deny, "socket", sc.Arg(0, sc.NE, AF_UNIX))
    else:
        f.add_rule(deny, "socket")
    return f


PROT_EXEC = 0x4
SHM_EXEC = 0o100000
OPEN_CALLS = ("open", "openat", "openat2", "creat", "memfd_create")


def export_candidate_filters(load_path: str, run_path: str) -> str:
    """Write the two filters of the process a CPU candidate runs in (app/gpu/host/
    kernel_host.c) as BPF; a one-line description. The host loads `load_path` before it loads
    the candidate's library (a constructor then meets the cell's seal: no programs, processes,
    sockets, signals) and stacks `run_path` on it once the library is loaded: no file can be
    opened (EPERM) and no memory made executable, so no code but the candidate's and the
    libraries it linked can run."""
    problem = available()
    if problem:
        return f"off: libseccomp is not usable ({problem})"
    import pyseccomp as sc

    load = _threads_only(sc, sc.KILL_PROCESS, allow_unix_sockets=False)
    _deny_all(load, sc.KILL_PROCESS, ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
                                      "personality"))  # READ_IMPLIES_EXEC: readable = executable
    run = sc.SyscallFilter(sc.ALLOW)
    run.set_attr(sc.Attr.CTL_TSYNC, 1)
    _deny_all(run, sc.ERRNO(errno.EPERM), OPEN_CALLS)
    for name, arg, bit in (("mmap", 2, PROT_EXEC), ("mprotect", 2, PROT_EXEC),
                           ("pkey_mprotect", 2, PROT_EXEC), ("shmat", 2, SHM_EXEC)):
        try:
            run.add_rule(sc.KILL_PROCESS, name, sc.Arg(arg, sc.MASKED_EQ, bit, bit))
        except (OSError, ValueError, RuntimeError):
            pass
    for f, path in ((load, load_path), (run, run_path)):
        with open(path, "wb") as out:
            f.export_bpf(out)
    return ("on: seccomp in the candidate's own process; exec, fork, sockets, signals and "
            "executable memory kill it, files cannot be opened once it is loaded")


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
