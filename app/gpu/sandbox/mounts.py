"""The cell's own view of the file system (a mount namespace): its root is an empty tmpfs that
holds only the paths the cell's rules name, bound at the same places. What Landlock would refuse
to open is then not there at all: stat, access, readlink, inotify and directory listings see
nothing of the home directory, other users' files or the rest of /tmp (Landlock governs opening
files, not looking them up, so without this view the size and mtime of a hidden file stay
visible to any code that may call stat, such as a colleague's Python reference).

- every named path is bound recursively at its own place (a bind shares inodes, so the
  Landlock rules, given by path after the switch, still apply); a symbolic link on the way
  (/lib -> usr/lib) is recreated as the same link, so paths resolve as before;
- a "list only" directory is an empty directory holding just what is bound beneath it;
- /proc is a fresh procfs of the cell's PID namespace where the kernel allows it (it lists
  only the cell's processes), else the host's; /dev holds only the listed devices, the
  /dev/fd links and the cell's own /dev/shm (a GPU cell's driver files, private to it);
- the old root is detached, not just covered: nothing in the cell can reach it again, and the
  sealed cell may not mount, unmount or pivot (seccomp).

Needs CLONE_NEWNS with the cell's own user namespace (namespaces.isolate). Built by the cell
itself, single-threaded, before the compile helper starts (the helper sees the same view).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import stat

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
_DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0", "stdout": "/proc/self/fd/1",
              "stderr": "/proc/self/fd/2"}
ON_LINE = ("on: own mount namespace; root is a tmpfs holding only the paths the cell may use "
           "(stat, listing and inotify see nothing else); own /proc and /dev/shm")


class _Libc:
    def __init__(self) -> None:
        self.lib = ctypes.CDLL(None, use_errno=True)

    def _check(self, result: int, what: str) -> None:
        if result != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")

    def mount(self, source: str | None, target: str, fstype: str | None, flags: int,
              data: str | None = None) -> None:
        enc = (lambda s: s.encode() if s is not None else None)
        self._check(self.lib.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags),
                                   enc(data)), f"mount {target}")

    def umount(self, target: str) -> None:
        self._check(self.lib.umount2(target.encode(), MNT_DETACH), f"umount {target}")

    def pivot_root(self, new: str, old: str) -> None:
        number = _PIVOT_ROOT.get(platform.machine())
        if number is None:
            raise OSError(0, f"pivot_root: unknown system call number on {platform.machine()}")
        self._check(self.lib.syscall(number, new.encode(), old.encode()), "pivot_root")


class _View:
    """The new root under construction at `root` (a tmpfs); paths are the cell's own."""

    def __init__(self, root: str, libc: _Libc) -> None:
        self.root, self.libc = root, libc
        self.bound: list[str] = []  # paths bound so far: everything beneath them is visible

    def inside(self, path: str) -> str:
        return self.root + path

    def covered(self, path: str) -> bool:
        return any(path == b or path.startswith(b.rstrip("/") + "/") for b in self.bound)

    def _dir(self, path: str) -> None:
        os.makedirs(self.inside(path), mode=0o755, exist_ok=True)

    def bind(self, path: str, flags: int = 0) -> None:
        """Bind `path` (no symbolic link in it) at its own place in the view."""
        if self.covered(path):
            return
        target = self.inside(path)
        if os.path.isdir(path):
            self._dir(path)
        else:
            self._dir(os.path.dirname(path))
            if not os.path.lexists(target):
                open(target, "w").close()
        self.libc.mount(path, target, None, MS_BIND | MS_REC | flags)
        self.bound.append(path)

    def link(self, path: str, target: str) -> None:
        """The symbolic link `path` -> `target`, unless the view already shows it."""
        if self.covered(path) or os.path.lexists(self.inside(path)):
            return
        self._dir(os.path.dirname(path))
        os.symlink(target, self.inside(path))

    def expose(self, path: str, depth: int = 0) -> None:
        """Make `path` resolve in the view as it does outside: recreate each symbolic link met
        on the way, then bind the real file or directory it ends at."""
        if depth > 40:
            return
        parts = [p for p in os.path.normpath(path).split("/") if p]
        current = "/"
        for i, part in enumerate(parts):
            step = os.path.join(current, part)
            try:
                mode = os.lstat(step).st_mode
            except OSError:
                return  # missing on this machine: nothing to show
            if stat.S_ISLNK(mode):
                target = os.readlink(step)
                self.link(step, target)
                resolved = os.path.normpath(os.path.join(current, target))
                self.expose(os.path.join(resolved, *parts[i + 1:]), depth + 1)
                return
            current = step
        self.bind(current)


def _proc(view: _View) -> str:
    """A procfs of this PID namespace (lists only the cell's processes) where the kernel allows
    a new one; the host's (a recursive bind keeps its masked entries masked) where it does not."""
    view._dir("/proc")
    try:
        view.libc.mount("proc", view.inside("/proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        view.bound.append("/proc")
        return "own"
    except OSError:
        view.bind("/proc")
        return "host's"


def _dev(view: _View, devices: list[str], shared_memory: bool) -> None:
    view._dir("/dev")
    for device in devices:
        if device.startswith("/dev/") and os.path.exists(device) and device != "/dev/shm":
            view.expose(device)
    for name, target in _DEV_LINKS.items():
        view.link(f"/dev/{name}", target)
    if shared_memory:
        view._dir("/dev/shm")
        view.libc.mount("tmpfs", view.inside("/dev/shm"), "tmpfs", MS_NOSUID | MS_NODEV,
                        "mode=1777,size=1g")
        view.bound.append("/dev/shm")


def build_view(rules, scratch: str, libc: _Libc | None = None) -> str:
    """Switch this process (and what it starts later) to a root holding only what `rules`
    (landlock.FileRules) name and `scratch`; the status line. Fails closed to the old view
    (returns an "off:" line) when any mount is refused before the switch."""
    libc = libc or _Libc()
    cwd = os.getcwd()
    try:
        libc.mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount leaks back out
        root = os.path.join(scratch, ".cell-root")
        os.makedirs(root, exist_ok=True)
        libc.mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m")
    except OSError as exc:
        return f"off: no mount namespace ({exc.strerror}); stat can still see hidden files"
    view = _View(root, libc)
    try:
        named = [*rules.read, *rules.write, *rules.exec_files, scratch]
        proc = _proc(view) if any(p == "/proc" or p.startswith("/proc/") for p in named) else ""
        shm = "/dev/shm" in rules.write
        for path in sorted({os.path.normpath(p) for p in named if p and os.path.isabs(p)}, key=len):
            if path == "/dev/shm" or path.startswith("/proc"):
                continue
            view.expose(path)
        for path in rules.list_only:
            if os.path.isabs(path) and not view.covered(path):
                view._dir(os.path.normpath(path))
        _dev(view, list(rules.devices), shm)
        view._dir("/tmp")
        os.chmod(view.inside("/tmp"), 0o1777)
        old = os.path.join(root, ".old-root")
        os.mkdir(old)
        libc.pivot_root(root, old)
    except OSError as exc:
        # before the pivot nothing is lost: the process keeps the old view, and says so
        with contextlib.suppress(OSError):
            libc.umount(root)
        os.chdir(cwd)
        return f"off: the cell's file view could not be built ({exc}); stat can still see hidden files"
    # past the pivot there is no way back: a failure here ends the cell (the old root must not
    # stay reachable beneath the new one)
    os.chdir("/")
    libc.umount("/.old-root")
    os.rmdir("/.old-root")
    # where refused, the tmpfs root stays writable in name only: Landlock refuses writes there
    with contextlib.suppress(OSError):
        libc.mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir(cwd if os.path.isdir(cwd) else scratch)
    return ON_LINE.replace("own /proc", f"{proc} /proc") if proc else ON_LINE
