"""One SQLite connection per history file per process, and the opening of it.

Every `Store(path)` of a process on the same file (by inode, so a symlink or another spelling of
the path is the same file) shares one live connection, reference-counted: the window's store,
the usage and lesson readers, the engine's store all meet here. The file is looked at with plain
open() only when no connection of this process is on it: closing any descriptor of a file drops
every POSIX lock the process holds on it, which lets another process's last close delete
-wal/-shm under a live connection (the bug this module exists for).

SQLite's "How To Corrupt An SQLite Database File" (https://www.sqlite.org/howtocorrupt.html),
item by item, and what closes it here:
 1.1 writes through a closed, reused descriptor: nothing here writes the file but SQLite.
 1.2 copying the file mid-transaction: no code copies it; exports read through the connection.
 1.3 deleting a hot journal / 1.4 pairing a db with another's journal: nothing deletes or moves
     -wal/-shm; SQLite alone removes them, and only when it holds the last lock (see 2.2).
 2.1 broken locks (network filesystems): WAL needs shared memory on one host; a history on a
     network filesystem is logged as a warning at open (every writer is on this host: workers,
     Ray actors and the sandbox never open the history; the coordinator writes for them).
 2.2 POSIX locks cancelled by close() of another descriptor: one connection per process and
     file; the magic check opens the file only while this process has no connection on it.
 2.3 two SQLite copies in one process: only app/store imports sqlite3 (tests/test_layers.py).
 2.4 different locking protocols: every process uses the stdlib's default unix VFS.
 2.5 unlinking or renaming the file while in use: the registry is keyed by inode, so a new file
     at the old path gets its own connection; the app never renames the history.
 2.6 multiple links: the file is opened by its real path (symlinks resolved), and a file with
     more than one hard link is refused (each name would get its own -wal).
 2.7 a connection carried across fork(): a child never uses or closes its parent's connection;
     it opens its own (checked by pid; inherited ones are kept alive, never closed).
 3   failure to sync: WAL with synchronous=NORMAL, never OFF (a power cut may lose the last
     commits, never corrupt); 4 (disks), 5 (stray pointers), 6 (OS bugs): not ours to close.
 7   configuration: the stdlib's threadsafe build, default page size (nothing sets page_size,
     mmap_size or runs VACUUM); one lock serialises each shared connection.
 8   SQLite bugs: the WAL-reset race (3.7.0 to 3.51.2, fixed in 3.51.3) needs several
     processes checkpointing one WAL, which KernelSwarm has; SQLite rates it below hardware
     faults, and only a newer libsqlite3 closes it. tests/test_store_concurrency.py runs
     integrity_check after its crowd of writers.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import socket
import sqlite3
import sys
import threading
import weakref
from pathlib import Path

from app import __version__
from app.store import schema


def _import_sqlite_utils():
    """sqlite_utils, imported with pandas hidden: it loads pandas whenever it is installed
    (Kernel Tuner brings it) only to store pandas Timestamps as TEXT, which no row here holds,
    and that import is most of a second of every process's start."""
    if "pandas" in sys.modules:
        import sqlite_utils
        return sqlite_utils
    sys.modules["pandas"] = None  # type: ignore[assignment]  # `import pandas` fails at once
    try:
        import sqlite_utils
    finally:
        if sys.modules.get("pandas", 0) is None:
            del sys.modules["pandas"]
    return sqlite_utils


sqlite_utils = _import_sqlite_utils()

log = logging.getLogger(__name__)

SQLITE_MAGIC = b"SQLite format 3\x00"
TABLES = ("projects", "goals", "runs", "candidates", "evaluations", "lessons", "telemetry",
          "validation_cases", "llm_requests")
# Filesystems where SQLite's shared memory and POSIX locks do not reach other hosts.
_NETWORK_FS = {"nfs", "nfs4", "cifs", "smb3", "smbfs", "afs", "9p", "ceph", "glusterfs",
               "lustre", "gpfs", "beegfs", "fuse.sshfs", "fuse.s3fs", "fuse.gcsfuse", "davfs"}


class StoreError(RuntimeError):
    """The history database cannot be used; the message names the file and the problem."""


class Shared:
    """One process's live connection on one history file, shared by every Store on it."""

    def __init__(self, conn: sqlite3.Connection, path: Path, ident: tuple[int, int]) -> None:
        self.conn = conn
        self.db = sqlite_utils.Database(conn)
        self.lock = threading.RLock()  # serialises every use of the connection
        self.path = path
        self.ident = ident
        self.pid = os.getpid()
        self.users = 0
        self.goal_ids: dict[int, tuple[int, str]] = {}  # run id -> (goal id, goal key)

# (st_dev, st_ino) -> the live connection. Weak: a Store dropped without close() still lets its
# connection go (sqlite3 closes on collection), as before the registry.
_registry: weakref.WeakValueDictionary[tuple[int, int], Shared] = weakref.WeakValueDictionary()
_registry_lock = threading.Lock()
_inherited: list[Shared] = []  # a forked child's copies of its parent's connections


def _forget_after_fork() -> None:
    """In a forked child: the parent's connections are never used nor closed here (closing one
    could checkpoint and delete -wal under the parent); they stay referenced for good."""
    global _registry_lock
    _registry_lock = threading.Lock()  # another thread may have held it at fork time
    for shared in list(_registry.values()):
        _inherited.append(shared)
        with contextlib.suppress(Exception):  # never deallocated, so never closed, even at exit
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(shared.conn))
    _registry.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def _ident(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreError(f"cannot read history database {str(path)!r}: {exc}") from None
    return st.st_dev, st.st_ino


def acquire(path: Path) -> Shared:
    """The process's connection on `path`, opened (checked, migrated) on first use."""
    real = Path(os.path.realpath(path))
    with _registry_lock:
        ident = _ident(real)
        shared = _registry.get(ident) if ident is not None else None
        if shared is not None and shared.pid == os.getpid():
            shared.users += 1
            return shared
        _check_unopened(real)  # no connection of this process on it: reading drops no lock
        shared = _connect(real, path)
        _registry[shared.ident] = shared
        shared.users = 1
        return shared


def release(shared: Shared) -> None:
    """One Store is done with the connection; the last one closes it."""
    with _registry_lock:
        shared.users -= 1
        if shared.users > 0 or shared.pid != os.getpid():
            return
        if _registry.get(shared.ident) is shared:
            del _registry[shared.ident]
    with shared.lock:
        shared.conn.close()


def check_file(path: str | Path) -> None:
    """Refuse a file that is not a usable SQLite history before sqlite3 touches it (StoreError
    with one line). Never reads a file this process has a connection on: that one was checked
    when it was opened, and reading it again would drop the connection's locks."""
    path = Path(path)
    with _registry_lock:
        ident = _ident(Path(os.path.realpath(path)))
        shared = _registry.get(ident) if ident is not None else None
        if shared is None or shared.pid != os.getpid():
            _check_unopened(path)


def _check_unopened(path: Path) -> None:
    try:
        st = os.stat(path)
        with open(path, "rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        return
    except IsADirectoryError:
        raise StoreError(f"history database {str(path)!r} is a directory") from None
    except OSError as exc:
        raise StoreError(f"cannot read history database {str(path)!r}: {exc}") from None
    if head and head != SQLITE_MAGIC:
        raise StoreError(f"{str(path)!r} is not a SQLite database; refusing to use it "
                         "as KernelSwarm history")
    if st.st_nlink > 1:
        raise StoreError(f"history database {str(path)!r} has {st.st_nlink} hard links; SQLite "
                         "keeps one journal per name, so writes through two names corrupt it: "
                         "use a copy (or a symlink) instead")


def _connect(real: Path, given: Path) -> Shared:
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(real), check_same_thread=False, isolation_level=None,
                               timeout=30.0)
    except (OSError, sqlite3.Error) as exc:
        raise StoreError(f"cannot open history database {str(given)!r}: {exc}") from None
    try:
        _open(conn, given)
        ident = _ident(real)
        assert ident is not None  # sqlite3 created it
    except StoreError:
        conn.close()
        raise
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise StoreError(f"history database {str(given)!r} is corrupt or unreadable: "
                         f"{exc}") from None
    _warn_network_fs(real)
    return Shared(conn, given, ident)


def _open(conn: sqlite3.Connection, path: Path) -> None:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > schema.SCHEMA_VERSION:
        raise StoreError(
            f"history database {str(path)!r} has schema version {version}, newer than "
            f"this KernelSwarm {__version__} knows ({schema.SCHEMA_VERSION}); upgrade KernelSwarm "
            "or use another --db (the file was left untouched)")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")  # WAL + NORMAL survives process crashes
    conn.execute("PRAGMA foreign_keys=ON")
    _migrate(conn, path)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    missing = [t for t in TABLES if t not in names]
    if missing:
        raise StoreError(f"history database {str(path)!r} is damaged: tables "
                         f"{', '.join(missing)} are missing")
    _reap_dead_runs(conn)


def _migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Run the missing migrations, each in its own write transaction. The version is read again
    inside it: two processes opening an old file at once migrate it once."""
    target = 0
    try:
        while True:
            conn.execute("BEGIN IMMEDIATE")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version >= schema.SCHEMA_VERSION:
                conn.execute("COMMIT")
                return
            target = version + 1
            step = schema.MIGRATIONS[target - 1]
            if callable(step):
                step(conn)
            else:
                _run_script(conn, step)
            conn.execute(f"PRAGMA user_version = {target}")
            conn.execute("COMMIT")
    except (sqlite3.Error, StoreError) as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise StoreError(f"cannot upgrade history database {str(path)!r} to schema "
                         f"version {target}: {exc}") from None


def _run_script(conn: sqlite3.Connection, script: str) -> None:
    """A migration's SQL, statement by statement, inside the open transaction (executescript
    would commit it first)."""
    for statement in _statements(script):
        conn.execute(statement)


def _statements(script: str) -> list[str]:
    out, current = [], ""
    for line in script.splitlines(keepends=True):
        current += line
        if sqlite3.complete_statement(current):
            if current.strip():
                out.append(current)
            current = ""
    if current.strip():
        out.append(current)
    return out


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    except OSError:
        return False
    return True


def _reap_dead_runs(conn: sqlite3.Connection) -> None:
    """Runs left 'running' by a process of this host that no longer exists were killed."""
    host = socket.gethostname()
    rows = conn.execute(
        "SELECT id, pid FROM runs WHERE status = 'running' AND host = ?", (host,)).fetchall()
    dead = [rid for rid, pid in rows if not pid_alive(pid)]
    if dead:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany("UPDATE runs SET status = 'interrupted', reason = 'interrupted' "
                             "WHERE id = ? AND status = 'running'", [(r,) for r in dead])
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")


def _warn_network_fs(path: Path) -> None:
    fs = _filesystem_of(path)
    if fs in _NETWORK_FS:
        log.warning("history database %s is on a %s filesystem: SQLite's WAL is safe there only "
                    "while every process using it runs on this host; keep it on a local disk "
                    "(--db or KERNELSWARM_DB) if another machine opens it", path, fs)


def _filesystem_of(path: Path) -> str:
    """The type of the filesystem holding `path` (Linux /proc/self/mountinfo; '' elsewhere)."""
    best, fstype = "", ""
    with contextlib.suppress(OSError), open("/proc/self/mountinfo", encoding="utf-8",
                                            errors="replace") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            fields, rest = left.split(), right.split()
            if len(fields) < 5 or not rest:
                continue
            mount = fields[4].replace("\\040", " ")
            inside = str(path) == mount or str(path).startswith(mount.rstrip("/") + "/")
            if inside and len(mount) >= len(best):
                best, fstype = mount, rest[0]
    return fstype

