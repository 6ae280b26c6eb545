"""The compile helper: the one process of a cell that may still start programs, and only the
toolchain's (Landlock execute rights on the compiler, its cc1/as/ld, nm and the loader).

The worker starts it before sealing itself, then asks it over a pipe to run the compiler or nm.
Requests are JSON (never pickle: the worker may be running hostile code by then), checked
against the toolchain list and a list of flags that would load or run other code.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from typing import Any

PR_SET_PDEATHSIG = 1
# Flags that make the compiler load or run something other than its own toolchain.
REFUSED_FLAGS = ("-wrapper", "-fplugin", "-B", "-specs", "--specs", "-fdump-", "@",
                 "-fprofile-generate", "-fauto-profile", "-X", "-Wl,", "-Wa,", "-Wp,",
                 "-fuse-ld", "--sysroot", "-iplugindir", "-imacros", "-include", "--plugin",
                 "-plugin")


def _die_with_parent() -> None:
    with contextlib.suppress(OSError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def refused(argv: Sequence[str], programs: Sequence[str]) -> str:
    if not argv:
        return "empty command"
    exe = os.path.realpath(argv[0])
    if exe not in programs:
        return f"{os.path.basename(argv[0])} is not part of the toolchain"
    for arg in argv[1:]:
        if arg.startswith(REFUSED_FLAGS):
            return f"the flag {arg.split('=')[0]} is not allowed"
    return ""


def _run(argv: list[str], timeout: float | None) -> dict[str, Any]:
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=_die_with_parent)  # noqa: PLW1509 - helper has one thread
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # cc1, as and ld too, not just the driver
        proc.communicate()
        return {"timeout": True}
    return {"returncode": proc.returncode, "stdout": out.decode("utf-8", "replace"),
            "stderr": err.decode("utf-8", "replace")}


def main(argv: list[str]) -> None:
    """Entry point of the helper process (argv: its JSON configuration; stdin: requests,
    stdout: replies, one JSON a line)."""
    from app.gpu.sandbox import landlock, limits, seccomp

    _die_with_parent()
    seccomp.available()  # loads libseccomp before the walls (finding it runs ldconfig)
    config = json.loads(argv[0])
    protections = {"limits": limits.apply(limits.COMPILER_LIMITS),
                   "files": landlock.restrict(landlock.FileRules(**config["rules"])),
                   "processes": seccomp.seal_compiler()}
    programs = config["programs"]
    requests, replies = sys.stdin, sys.stdout
    sys.stdout = sys.stderr  # nothing but replies on the reply pipe
    replies.write(json.dumps({"ready": protections}) + "\n")
    replies.flush()
    for line in requests:
        req = json.loads(line)
        why = refused(req["argv"], programs)
        reply = {"refused": why} if why else _run(req["argv"], req.get("timeout"))
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


class ToolClient:
    """The worker's end of the helper: run_tool() sends one command and waits for its result."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.lock = threading.Lock()
        self._protections: dict[str, str] | None = None

    @property
    def protections(self) -> dict[str, str]:
        """What the helper put itself under; waits for it to be ready (it starts while the
        worker imports its handler)."""
        if self._protections is None:
            with self.lock:
                ready = json.loads(self.proc.stdout.readline() or "{}")
            if "ready" not in ready:
                raise OSError("the compile helper did not start")
            self._protections = ready["ready"]
        return self._protections

    def run(self, argv: Sequence[str], timeout: float | None, text: bool) -> subprocess.CompletedProcess:
        argv = [str(a) for a in argv]
        _ = self.protections  # its ready line comes first
        with self.lock:
            try:
                self.proc.stdin.write(json.dumps({"argv": argv, "timeout": timeout}) + "\n")
                self.proc.stdin.flush()
                line = self.proc.stdout.readline()
            except (OSError, ValueError) as exc:
                raise OSError(f"the compile helper is gone ({exc})") from None
        if not line:
            raise OSError("the compile helper died")
        reply = json.loads(line)
        if reply.get("timeout"):
            raise subprocess.TimeoutExpired(argv, timeout or 0)
        if "refused" in reply:
            raise PermissionError(f"the sandbox refused to run {argv[0]}: {reply['refused']}")
        out, err = reply["stdout"], reply["stderr"]
        if not text:
            out, err = out.encode(), err.encode()
        return subprocess.CompletedProcess(argv, reply["returncode"], out, err)
