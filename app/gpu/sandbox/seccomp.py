"""No new processes, programs, sockets or tracing while candidate code runs: a seccomp-bpf filter
built with libseccomp (through the `pyseccomp` package). Threads stay allowed (OpenMP, the
GPU driver): clone with CLONE_THREAD passes, clone3 answers ENOSYS so glibc falls back to
clone, whose flags a filter can see.

Once loaded the filter cannot be lifted, and it covers every thread (TSYNC). Other
architectures' system calls (int 0x80, x32) kill the process (libseccomp's default).
"""

from __future__ import annotations

import contextlib
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


# Calls that act on a process named by pid (or on a group or user of them). With a PID namespace
# a cell can name only its own processes; these rules also hold where there is none: only the
# caller itself (pid 0) may be named. 32-bit arguments are compared under a mask (a value with
# high bits set is truncated by the kernel, not by the filter).
LOW32 = 0xFFFFFFFF
F_SETOWN, F_SETSIG, F_SETOWN_EX = 8, 10, 15  # deliver SIGIO/any signal to a chosen pid
FIOSETOWN, SIOCSPGRP = 0x8901, 0x8902  # the same through ioctl (sockets)
PR_SET_PDEATHSIG = 1
SELF_ONLY = ("prlimit64", "migrate_pages", "move_pages")  # arg 0: pid, 0 = the caller
SCHED_SELF_ONLY = ("sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr")
SYSV_IPC = ("shmget", "shmat", "shmctl", "shmdt", "msgget", "msgsnd", "msgrcv", "msgctl",
            "semget", "semop", "semtimedop", "semctl", "mq_open", "mq_unlink", "ipc")
PROCESS_CALLS_LINE = ("on: seccomp; F_SETOWN/F_SETSIG, prlimit, setpriority, ioprio_set and "
                      "migrate_pages only on the caller itself, sched_set* on another thread "
                      "refused (EPERM), no setsid, setpgid or parent-death signal change")


def own_process_only(sc, f, deny: int, keep_sessions: bool = False) -> None:
    """Rules on `f`: the process-acting calls may name only the caller; `deny` for a breach
    (sched_set* always EPERM: OpenMP binds its threads by thread id). keep_sessions: the
    compile helper still starts its toolchain in a new session with a parent-death signal."""
    for cmd in (F_SETOWN, F_SETSIG, F_SETOWN_EX):
        f.add_rule(deny, "fcntl", sc.Arg(1, sc.MASKED_EQ, LOW32, cmd))
    for cmd in (FIOSETOWN, SIOCSPGRP):
        f.add_rule(deny, "ioctl", sc.Arg(1, sc.MASKED_EQ, LOW32, cmd))
    for name in SELF_ONLY:
        _add(f, deny, name, sc.Arg(0, sc.NE, 0))
    for name in SCHED_SELF_ONLY:
        _add(f, sc.ERRNO(errno.EPERM), name, sc.Arg(0, sc.NE, 0))
    for name in ("setpriority", "ioprio_set"):  # (which, who): only "this process" (who 0)
        _add(f, deny, name, sc.Arg(1, sc.NE, 0))
    _add(f, deny, "setpriority", sc.Arg(0, sc.NE, 0))  # PRIO_PROCESS, not a group or user
    _add(f, deny, "ioprio_set", sc.Arg(0, sc.NE, 1))  # IOPRIO_WHO_PROCESS
    if not keep_sessions:
        _deny_all(f, deny, ("setsid", "setpgid"))
        f.add_rule(deny, "prctl", sc.Arg(0, sc.MASKED_EQ, LOW32, PR_SET_PDEATHSIG))


def _add(f, action: int, name: str, *args) -> None:
    with contextlib.suppress(OSError, ValueError, RuntimeError):  # not a call on this arch
        f.add_rule(action, name, *args)


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
    own_process_only(sc, f, deny)
    if kill:  # CPU cells: nothing there uses SysV IPC (the IPC namespace is the other wall)
        _deny_all(f, deny, SYSV_IPC)
    # Signals only to itself: kill(-1), kill(parent) and friends are refused.
    for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
        f.add_rule(deny, name, sc.Arg(0, sc.NE, os.getpid()))
    # A goal's Python reference runs here: no watching names appear where Landlock hides them
    # (Python itself needs stat: the cell's file view, mounts.py, hides sizes and times)
    _deny_all(f, sc.ERRNO(errno.ENOENT), WATCH_CALLS)
    f.load()
    mode = "killed (SIGSYS)" if kill else "refused (EPERM)"
    return (f"on: seccomp; exec, fork, sockets{' (but unix)' if allow_unix_sockets else ''}, "
            f"tracing and signals to others are {mode}; inotify/fanotify refused")


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
# Landlock mediates opening a file, not looking one up: stat and inotify on a path it hides
# still answer (size, mtime, names created there). A candidate needs neither: ENOENT ("no such
# file") tells it nothing. The path of newfstatat/statx is a pointer seccomp cannot read, so
# they pass only with AT_EMPTY_PATH (glibc's fstat: newfstatat(fd, "", buf, AT_EMPTY_PATH)).
WATCH_CALLS = ("inotify_init", "inotify_init1", "inotify_add_watch", "fanotify_init",
               "fanotify_mark")
LOOKUP_CALLS = WATCH_CALLS + (
                "stat", "lstat", "access", "faccessat", "faccessat2", "readlink", "readlinkat",
                "getxattr", "lgetxattr", "listxattr", "llistxattr", "chdir",
                "statfs", "utime", "utimes", "futimesat", "utimensat", "mknod", "mknodat")
AT_EMPTY_PATH = 0x1000
# Changes to the file system by name need no open: a candidate could rename its own library
# to a reference's name in a cache, or delete one (EPERM; load-time code meets it too).
FS_CHANGES = ("unlink", "unlinkat", "rename", "renameat", "renameat2", "link", "linkat",
              "symlink", "symlinkat", "mkdir", "mkdirat", "rmdir", "truncate", "chmod",
              "fchmodat", "fchmodat2", "chown", "lchown", "fchownat", "setxattr", "lsetxattr",
              "removexattr", "lremovexattr")
# open flags that write or create (dlopen opens read-only: load-time code may not write),
# and O_PATH, which Landlock does not check (fstat on it would tell a hidden file's size)
OPEN_WRITE_BITS = (0o1, 0o2, 0o100, 0o1000, 0o2000, 0o20000000,  # WRONLY RDWR CREAT TRUNC APPEND TMPFILE
                   0o10000000)  # O_PATH
LOOKUP_LINE = ("stat, access, readlink and inotify refused (ENOENT), newfstatat/statx only on "
               "an open file")


def deny_lookups(sc, f) -> None:
    """Rules on `f`: no look-up of a path and no file-system change by name (see LOOKUP_CALLS)."""
    _deny_all(f, sc.ERRNO(errno.ENOENT), LOOKUP_CALLS)
    _deny_all(f, sc.ERRNO(errno.EPERM), FS_CHANGES)
    for name in ("newfstatat", "statx"):  # flags: argument 3 of newfstatat, 2 of statx
        _add(f, sc.ERRNO(errno.ENOENT), name,
             sc.Arg(3 if name == "newfstatat" else 2, sc.MASKED_EQ, AT_EMPTY_PATH, 0))


def deny_writing_opens(sc, f) -> None:
    """Rules on `f`: files open read-only (EPERM otherwise); openat2 hides its flags in a
    struct, so it answers ENOSYS (glibc's callers fall back to openat)."""
    for bit in OPEN_WRITE_BITS:
        _add(f, sc.ERRNO(errno.EPERM), "open", sc.Arg(1, sc.MASKED_EQ, bit, bit))
        _add(f, sc.ERRNO(errno.EPERM), "openat", sc.Arg(2, sc.MASKED_EQ, bit, bit))
    _deny_all(f, sc.ERRNO(errno.EPERM), ("creat",))
    _deny_all(f, sc.ERRNO(errno.ENOSYS), ("openat2",))


def export_candidate_filters(load_path: str, run_path: str) -> str:
    """Write the two filters of the process a CPU candidate runs in (app/gpu/cpu/host/
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
    own_process_only(sc, load, sc.KILL_PROCESS)  # stacked under `run`: holds while it runs
    _deny_all(load, sc.KILL_PROCESS, SYSV_IPC)
    deny_lookups(sc, load)  # from before dlopen on: load-time code sees and changes nothing
    deny_writing_opens(sc, load)
    run = sc.SyscallFilter(sc.ALLOW)
    run.set_attr(sc.Attr.CTL_TSYNC, 1)
    _deny_all(run, sc.ERRNO(errno.EPERM), OPEN_CALLS)
    for name, arg, bit in (("mmap", 2, PROT_EXEC), ("mprotect", 2, PROT_EXEC),
                           ("pkey_mprotect", 2, PROT_EXEC), ("shmat", 2, SHM_EXEC)):
        _add(run, sc.KILL_PROCESS, name, sc.Arg(arg, sc.MASKED_EQ, bit, bit))
    for f, path in ((load, load_path), (run, run_path)):
        with open(path, "wb") as out:
            f.export_bpf(out)
    return ("on: seccomp in the candidate's own process; exec, fork, sockets, signals, "
            "process-acting calls on others, setsid, SysV IPC and executable memory kill it, "
            f"files open read-only while it loads and not at all once loaded; {LOOKUP_LINE}")


def _deny_all(f, action: int, names: tuple[str, ...]) -> None:
    for name in names:
        _add(f, action, name)


def seal_compiler() -> str:
    """The compile helper's filter: it may start the toolchain, but no sockets, tracing,
    namespaces or io_uring (EPERM)."""
    problem = available()
    if problem:
        return f"off: libseccomp is not usable ({problem})"
    import pyseccomp as sc

    f = sc.SyscallFilter(sc.ALLOW)
    _deny_all(f, sc.ERRNO(errno.EPERM), FORBIDDEN + ("socket",))
    own_process_only(sc, f, sc.ERRNO(errno.EPERM), keep_sessions=True)
    f.load()
    return ("on: seccomp; no sockets, tracing, namespaces or process-acting calls on others "
            "(EPERM); toolchain may run")
