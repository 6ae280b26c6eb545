"""Files a later run trusts (the CPU roofs, the kernel host binary): kept where no cell may
write, and checked before every use.

Every sandbox cell may write the application's cache (app.paths.cache_dir: CuPy's and the
driver's caches, compiled candidates), so nothing a later run relies on lives there. Trusted
files live beside it, in `<cache>-trusted`, outside every cell's Landlock write set, and each
carries an HMAC-SHA256 (a per-user key in the same directory, which no cell may read) of its
name and bytes. A file whose MAC does not match is discarded with a warning and rebuilt or
measured again by its owner, never used. Where Landlock is off, the walls are gone and so is
the guarantee (the sandbox status says so).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
import secrets
import tempfile
from pathlib import Path

from app.paths import cache_dir

log = logging.getLogger("kernelswarm.trusted")
KEY_NAME = ".trusted-key"
MAC_SUFFIX = ".mac"


def trusted_dir() -> Path:
    """`<cache>-trusted`: beside the cache every cell may write, not beneath it."""
    cache = cache_dir()
    return cache.with_name(cache.name + "-trusted")


def _key() -> bytes:
    path = trusted_dir() / KEY_NAME
    with contextlib.suppress(OSError):
        key = path.read_bytes()
        if len(key) == 32:
            return key
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".key-")
    with os.fdopen(fd, "wb") as f:
        f.write(secrets.token_bytes(32))
    try:
        os.link(tmp, path)  # never replaces a key another process made first
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)
    return path.read_bytes()


def _mac(path: Path, data: bytes) -> str:
    return hmac.new(_key(), path.name.encode() + b"\0" + data, hashlib.sha256).hexdigest()


def store_trusted(path: Path, data: bytes, executable: bool = False) -> Path:
    """Write `data` to `path` atomically, with its MAC beside it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, 0o755 if executable else 0o644)
    mac_tmp = f"{tmp}{MAC_SUFFIX}"
    Path(mac_tmp).write_text(_mac(path, data))
    os.replace(tmp, path)
    os.replace(mac_tmp, f"{path}{MAC_SUFFIX}")
    return path


def load_trusted(path: Path) -> bytes | None:
    """The bytes of `path` when its MAC matches; None when it is missing, and None (the file
    and its MAC removed, a warning logged) when it was changed by anyone but store_trusted."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        mac = Path(f"{path}{MAC_SUFFIX}").read_text().strip()
    except OSError:
        mac = ""
    if hmac.compare_digest(mac, _mac(path, data)):
        return data
    log.warning("%s does not match its MAC (changed outside KernelSwarm, or by a sandbox "
                "cell where Landlock is off): discarded, it is rebuilt", path)
    discard(path)
    return None


def discard(path: Path) -> None:
    for p in (path, Path(f"{path}{MAC_SUFFIX}")):
        with contextlib.suppress(OSError):
            p.unlink()
