"""No network: a new user namespace (so an unprivileged user may) with a new, empty network
namespace. Inside it there is no interface but a loopback that is down: connect() to any
address, the machine's own loopback included, fails; abstract unix sockets are per namespace
too. Must run while the process has one thread (the kernel refuses CLONE_NEWUSER otherwise).

Python 3.11 has no os.unshare, so the libc call goes through ctypes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000


def _unshare(flags: int) -> None:
    unshare = getattr(os, "unshare", None)
    if unshare is not None:  # Python >= 3.12
        unshare(flags)
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    if libc.unshare(ctypes.c_int(flags)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def isolate_network() -> str:
    """Move this process into its own user and network namespaces (same uid/gid as before)."""
    uid, gid = os.getuid(), os.getgid()
    try:
        _unshare(CLONE_NEWUSER | CLONE_NEWNET)
    except OSError as exc:
        # A root process without user namespaces can still take a network namespace alone.
        if uid != 0:
            return f"off: unshare(user+net) refused ({exc.strerror}); network stays reachable"
        try:
            _unshare(CLONE_NEWNET)
        except OSError as exc2:
            return f"off: unshare(net) refused ({exc2.strerror}); network stays reachable"
        return "on: network namespace (no interfaces)"
    try:  # keep our own ids inside the namespace: files in scratch stay ours
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    except OSError as exc:
        return f"on: user+network namespace (id map failed: {exc.strerror})"
    return "on: user+network namespace (no interfaces)"
