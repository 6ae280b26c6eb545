"""No file access outside the cell: Landlock (Linux >= 5.13, the `landlock` package on PyPI).

Reads are allowed beneath the system's library and toolchain directories, the Python
installation and the importable packages; writes only in the scratch directory and the
application's cache; execution only of the toolchain's own programs (the compiler, its cc1/as/
ld, nm, the dynamic loader) and nothing at all once `exec_files` is empty. Device ioctls are
not mediated (the GPU driver needs them); device files are reachable only where listed.

Landlock restricts the calling thread and what it starts later, so it must be entered before
the process starts any thread. It also keeps the cell from tracing or reading /proc/<pid>/
environ or mem of any process outside it.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

READ_FILE = 1 << 2
READ_DIR = 1 << 3
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
TRUNCATE = 1 << 14
REFER = 1 << 13
MAKE_ALL = sum(1 << b for b in (4, 5, 6, 7, 8, 9, 10, 11, 12))  # remove/make dir, file, ...
FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE


@dataclass
class FileRules:
    read: list[str] = field(default_factory=list)  # files and directories, read-only
    list_only: list[str] = field(default_factory=list)  # directories that may be listed
    write: list[str] = field(default_factory=list)  # read, write, create, remove beneath
    exec_files: list[str] = field(default_factory=list)  # programs (or dirs of them) to run
    devices: list[str] = field(default_factory=list)  # device files, read and write


def _clear_errno() -> None:
    """The landlock package judges a system call by ctypes' saved errno, not by its result: a
    stale errno from an earlier failed call (the namespace fallback leaves EINVAL) would turn
    a successful call into an error. Cleared before every use."""
    ctypes.set_errno(0)


def abi_version() -> int:
    """0 when the kernel has no Landlock (or it is disabled)."""
    try:
        import landlock as ll
        _clear_errno()
        return int(ll.landlock_abi_version())
    except Exception:  # noqa: BLE001 - any failure means: not available
        return 0


def _existing(paths: Iterable[str]) -> list[str]:
    """The paths that exist, each once, in their first order."""
    return list(dict.fromkeys(p for p in paths if p and os.path.exists(p)))


def restrict(rules: FileRules) -> str:
    """Enter a Landlock domain allowing only `rules`; a one-line description."""
    abi = abi_version()
    if abi < 1:
        return "off: Landlock is not available (Linux >= 5.13 with landlock in the LSM list)"
    import landlock as ll

    _clear_errno()
    write_rights = READ_FILE | READ_DIR | WRITE_FILE | MAKE_ALL
    if abi >= 2:
        write_rights |= REFER
    if abi >= 3:
        write_rights |= TRUNCATE
    handled = write_rights | EXECUTE  # IOCTL_DEV deliberately not handled (GPU driver)
    ruleset = ll.Ruleset(restrict_rules=ll.FSAccess(handled))

    def allow(paths: Iterable[str], rights: int) -> None:
        for path in _existing(paths):
            mask = rights if os.path.isdir(path) else rights & FILE_RIGHTS
            if mask:
                ruleset.allow(path, rules=ll.FSAccess(mask))

    allow(rules.read, READ_FILE | READ_DIR)
    allow(rules.list_only, READ_DIR)
    allow(rules.write, write_rights)
    allow(rules.exec_files, EXECUTE | READ_FILE | READ_DIR)
    allow(rules.devices, READ_FILE | WRITE_FILE | (TRUNCATE if abi >= 3 else 0))
    ruleset.apply()
    execs = "no programs" if not rules.exec_files else f"{len(rules.exec_files)} toolchain paths"
    return (f"on: Landlock ABI {abi}; writes only in {len(_existing(rules.write))} dirs, "
            f"runs {execs}")


SCOPE_SIGNAL = 1 << 1  # Landlock ABI 6 (Linux 6.12): no signal to a process outside the domain
_SYS_CREATE_RULESET, _SYS_RESTRICT_SELF = 444, 446  # the same number on every architecture
PR_SET_NO_NEW_PRIVS = 38


class _ScopedAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


def scope_signals() -> str:
    """A Landlock domain (stacked on the files one) with no access rights, only the signal
    scope: kill, tgkill and the SIGIO an F_SETOWN file delivers reach only processes in this
    domain or below it. The package does not know scopes (ABI 6), so the calls are raw."""
    abi = abi_version()
    if abi < 6:
        return f"off: Landlock ABI {abi} has no signal scope (needs ABI 6, Linux 6.12)"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    attr = _ScopedAttr(0, 0, SCOPE_SIGNAL)
    fd = libc.syscall(ctypes.c_long(_SYS_CREATE_RULESET), ctypes.byref(attr),
                      ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))
    if fd < 0:
        return f"off: landlock_create_ruleset refused ({os.strerror(ctypes.get_errno())})"
    try:
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        if libc.syscall(ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_int(fd), ctypes.c_uint32(0)):
            return f"off: landlock_restrict_self refused ({os.strerror(ctypes.get_errno())})"
    finally:
        os.close(fd)
    return "on: Landlock signal scope (no signal, SIGIO included, to a process outside the cell)"
