"""Each process wall of the cell on its own, in a real process: the PID
and IPC namespaces, the seccomp rules on process-acting calls, Landlock's signal scope and the
engine's tree kill. Any one of them alone must keep a victim outside safe; the attack tests
(test_sandbox_walls.py) hit all of them together through the real worker."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from test_sandbox_walls import nice_of

from app.gpu import sandbox
from app.gpu.sandbox import landlock, seccomp, tree


def start_python(code: str, *args: str) -> subprocess.Popen:
    boot = f"import sys, json; sys.path[:0] = json.loads(sys.argv[1])\n{textwrap.dedent(code)}"
    return subprocess.Popen([sys.executable, "-I", "-c", boot, json.dumps(sys.path), *args],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def run_python(code: str, *args: str) -> tuple[int, str]:
    proc = start_python(code, *args)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out + err




def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pids: list[int], seconds: float = 3.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


# ---- the namespaces alone -------------------------------------------------------------------
ALONE_IN_NAMESPACES = """
    import ctypes, os, signal, subprocess
    from app.gpu.sandbox import namespaces
    lines = namespaces.isolate()
    print(lines["pid namespace"][:3], lines["ipc namespace"][:3], "pid", os.getpid(), flush=True)
    victim, key = int(sys.argv[2]), int(sys.argv[3])
    for name, act in (("kill", lambda: os.kill(victim, signal.SIGKILL)),
                      ("setpriority", lambda: os.setpriority(os.PRIO_PROCESS, victim, 19)),
                      ("affinity", lambda: os.sched_setaffinity(victim, {0}))):
        try:
            act(); print(name, "DONE", flush=True)
        except OSError as exc:
            print(name, "refused", type(exc).__name__, flush=True)
    libc = ctypes.CDLL(None, use_errno=True)
    print("host segment", libc.shmget(key, 0, 0), flush=True)
    print("made segment", libc.shmget(key + 1, 1 << 20, 0o1000 | 0o600), flush=True)
    escaped = subprocess.Popen(["sleep", "300"], start_new_session=True)  # no death signal
    print("ready", flush=True)
    sys.stdin.readline()
"""


def test_the_pid_and_ipc_namespaces_alone(victim):
    """No seccomp, no Landlock: the victim cannot be named, the host's SysV segment is not
    there, the cell's own segment dies with it, and a process that left the cell's session
    dies when the cell's first process does."""
    from test_sandbox_walls import IPC_CREAT, IPC_RMID, _libc, _sysv

    libc = _libc()
    key = random.randrange(1 << 20, 1 << 30)
    shmid = libc.shmget(key, 4096, IPC_CREAT | 0o600)
    proc = start_python(ALONE_IN_NAMESPACES, str(victim.pid), str(key))
    try:
        lines = []
        while not lines or lines[-1] != "ready":
            line = proc.stdout.readline().strip()
            assert line, lines
            lines.append(line)
        out = "\n".join(lines)
        if not out.startswith("on: on:"):
            pytest.skip(f"no PID/IPC namespace here: {out}")
        assert "pid 2" in out
        assert "kill refused ProcessLookupError" in out and "DONE" not in out, out
        assert "host segment -1" in out, out
        tree_below = tree.descendants(proc.pid)
        assert len(tree_below) == 3, tree_below  # init, the cell (pid 2 inside), the escaped sleep
        os.kill(proc.pid, signal.SIGKILL)  # the shim, as the engine's watchdog would
        proc.wait()
        assert _wait_gone(tree_below) == []
        assert key + 1 not in _sysv("shm")
        assert victim.poll() is None and nice_of(victim.pid) == 0
    finally:
        proc.kill()
        libc.shmctl(shmid, IPC_RMID, None)
        if key + 1 in _sysv("shm"):
            libc.shmctl(_sysv("shm")[key + 1], IPC_RMID, None)


def test_the_shim_ends_as_the_cell_ended():
    """The engine watches the shim: it must see the cell's exit code and signal."""
    code, out = run_python("""
        from app.gpu.sandbox import namespaces
        namespaces.isolate()
        sys.exit(7)
    """)
    assert code == 7, out
    code, out = run_python("""
        import os, signal
        from app.gpu.sandbox import namespaces
        namespaces.isolate()
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
        os.abort()
    """)
    assert code == -signal.SIGABRT, out


# ---- seccomp alone --------------------------------------------------------------------------
SECCOMP_ALONE = """
    import ctypes, os, resource
    from app.gpu.sandbox import seccomp
    victim = int(sys.argv[2])
    libc = ctypes.CDLL(None, use_errno=True)
    r, w = os.pipe()
    print(seccomp.seal(kill=False, allow_unix_sockets=False)[:3], flush=True)
    def attempt(name, fn):
        try:
            result = fn()
            bad = isinstance(result, int) and result < 0
            print(name, "refused" if bad else "DONE", ctypes.get_errno() if bad else "", flush=True)
        except OSError as exc:
            print(name, "refused", exc.errno, flush=True)
    attempt("setown", lambda: libc.fcntl(r, 8, victim))
    attempt("setown-high-bits", lambda: libc.syscall(72, r, (1 << 32) | 8, victim))
    attempt("setsig", lambda: libc.fcntl(r, 10, 9))
    attempt("prlimit", lambda: resource.prlimit(victim, resource.RLIMIT_NOFILE, (5, 5)))
    attempt("setpriority", lambda: os.setpriority(os.PRIO_PROCESS, victim, 19))
    # a group that does not exist: unfiltered, this is ESRCH (3), never a renice of anything
    attempt("setpriority-group", lambda: os.setpriority(os.PRIO_PGRP, 0x7FFFFFF0, 19))
    attempt("affinity", lambda: os.sched_setaffinity(victim, {0}))
    attempt("ioprio", lambda: libc.syscall(251, 1, victim, (3 << 13) | 7))
    attempt("setsid", os.setsid)
    attempt("pdeathsig", lambda: libc.prctl(1, 0, 0, 0, 0))
    attempt("own-nice", lambda: os.setpriority(os.PRIO_PROCESS, 0, 1))
    attempt("own-limits", lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64)))
    attempt("own-affinity", lambda: os.sched_setaffinity(0, os.sched_getaffinity(0)))
"""


@pytest.mark.skipif(seccomp.available() != "", reason="libseccomp not usable")
@pytest.mark.skipif(os.uname().machine != "x86_64", reason="raw syscall numbers of x86_64")
def test_seccomp_alone_lets_process_acting_calls_name_only_the_caller(victim):
    """No namespace: the victim is nameable, and every call on it is refused (EPERM here, the
    GPU cell's action; a CPU cell is killed instead); the same calls on itself still work."""
    _, out = run_python(SECCOMP_ALONE, str(victim.pid))
    assert out.startswith("on:"), out
    for name in ("setown", "setown-high-bits", "setsig", "prlimit", "setpriority",
                 "setpriority-group", "affinity", "ioprio", "setsid", "pdeathsig"):
        assert f"{name} refused 1" in out, (name, out)
    for name in ("own-nice", "own-limits", "own-affinity"):
        assert f"{name} DONE" in out, (name, out)
    assert victim.poll() is None and nice_of(victim.pid) == 0
    assert os.sched_getaffinity(victim.pid) == os.sched_getaffinity(0)


# ---- Landlock's signal scope alone ----------------------------------------------------------
@pytest.mark.skipif(landlock.abi_version() < 6, reason="Landlock signal scope needs ABI 6")
def test_landlock_signal_scope_alone_stops_kill_and_sigio(victim):
    _, out = run_python("""
        import fcntl, os, signal
        from app.gpu.sandbox import landlock
        victim = int(sys.argv[2])
        print(landlock.scope_signals()[:3], flush=True)
        try:
            os.kill(victim, signal.SIGKILL); print("kill DONE", flush=True)
        except PermissionError:
            print("kill refused", flush=True)
        r, w = os.pipe()
        fcntl.fcntl(r, fcntl.F_SETOWN, victim)
        fcntl.fcntl(r, 10, signal.SIGKILL)  # F_SETSIG
        fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) | os.O_ASYNC)
        os.write(w, b"x")
        print("wrote", flush=True)
    """, str(victim.pid))
    assert out.startswith("on:") and "kill refused" in out and "wrote" in out, out
    time.sleep(0.2)
    assert victim.poll() is None


# ---- the tree kill alone --------------------------------------------------------------------
def test_the_tree_kill_alone_finds_an_orphan_that_left_the_session():
    """No namespace: a grandchild in its own session whose parent exited (cc1 after its driver
    died) stays below the subreaper cell, and the engine's tree kill ends it."""
    proc = start_python("""
        import subprocess
        from app.gpu.sandbox import namespaces
        namespaces.child_subreaper()
        mid = subprocess.Popen([sys.executable, "-c", "import subprocess; print(subprocess.Popen("
                                "['sleep', '300'], start_new_session=True, stdout=subprocess.DEVNULL).pid)"],
                               stdout=subprocess.PIPE, text=True)
        print(mid.communicate()[0].strip(), flush=True)
        sys.stdin.readline()
    """)
    try:
        orphan = int(proc.stdout.readline() or 0)
        assert _alive(orphan) and orphan in tree.descendants(proc.pid)
        sandbox.kill_cell(proc.pid)
        proc.wait(5)
        assert _wait_gone([orphan]) == []
    finally:
        proc.kill()


def test_a_platform_without_pid_namespaces_says_so_and_keeps_the_network_wall():
    """unshare(CLONE_NEWPID) refused (as where user namespaces are off for that): the status
    names the missing walls, the cell still gets its network namespace, and no shim forks."""
    _, out = run_python("""
        import errno, json, os
        from app.gpu.sandbox import namespaces
        real = namespaces._unshare
        def refuse_pid(flags):
            if flags & namespaces.CLONE_NEWPID:
                raise OSError(errno.EPERM, "Operation not permitted")
            real(flags)
        namespaces._unshare = refuse_pid
        me = os.getpid()
        lines = namespaces.isolate()
        print(json.dumps({**lines, "same process": os.getpid() == me}))
    """)
    lines = json.loads(out.strip().splitlines()[-1])
    assert lines["network"].startswith("on"), lines
    assert lines["pid namespace"].startswith("off") and lines["ipc namespace"].startswith("off")
    assert "refused" in lines["pid namespace"] and lines["same process"]
    assert sandbox._tree_line(lines["pid namespace"]).startswith("partial")
