"""Isolated evaluation workers: candidates are compiled and run only in spawned processes.

A worker process builds a handler (an importable factory, e.g. one per device) and serves
requests one at a time. While it works it reports which stage it is in; the parent's watchdog
applies that stage's deadline (compile or run) and a memory limit (resident set size, read from
/proc). A worker that crashes (signal), hangs past its deadline, outgrows its memory, or reports
that a candidate corrupted its memory is replaced by a fresh process; the request comes back as
a `WorkerFault` with the reason and the worker's captured stdout/stderr. Workers are also
recycled after a number of requests (loaded libraries and leaked state do not pile up).

Every worker is a sandbox cell (app.gpu.sandbox): started with an allow-listed environment and
its own scratch directory as HOME and TMPDIR, it enters its own user and network namespaces,
starts its compile helper, lowers its resource limits and restricts its files (Landlock) before
it imports the handler, then seals itself (seccomp: no exec, fork, sockets) before the first
request. A worker killed by the seal (SIGSYS) is reported as a sandbox violation.

`WorkerPool` holds one worker per device and hands requests to an idle one, so several GPUs
(or, later, remote workers) plug in behind the same evaluator.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import io
import multiprocessing as mp
import os
import pickle
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from app.core import entry_points
from app.core.types import CRASH, OUT_OF_MEMORY, RUNTIME_FAILED, TIMEOUT
from app.gpu import sandbox
from app.paths import baseline_cache_dir, cache_dir

LOG_TAIL_CHARS = 20_000
_LIVE_SCRATCH: set[str] = set()  # cells' scratch directories, removed at exit if still there
_LIVE_CELLS: set[Any] = set()  # cell processes, killed at exit (as multiprocessing's daemons were)


@atexit.register
def _end_cells_left_behind() -> None:
    for cell in list(_LIVE_CELLS):
        cell.kill()
        cell.join(2.0)
    for path in list(_LIVE_SCRATCH):
        shutil.rmtree(path, ignore_errors=True)
_POLL_S = 0.02
_START_TIMEOUT_S = 60.0


@dataclass
class Deadlines:
    """Seconds a worker may spend in one stage before it is killed."""

    compile_s: float = 60.0
    run_s: float = 30.0
    compile_stages: frozenset[str] = frozenset({"static_check", "compile", "resources"})

    def for_stage(self, stage: str) -> float:
        return self.compile_s if stage in self.compile_stages else self.run_s

    def total(self) -> float:
        """The most one request may take, whatever stages the worker reports: the worker runs
        candidate code, which could keep announcing new stages to stay alive."""
        return 3 * self.compile_s + 4 * self.run_s


@dataclass
class WorkerFault:
    """The worker died or was killed while serving a request."""

    reason: str  # CRASH, TIMEOUT, OUT_OF_MEMORY, RUNTIME_FAILED
    detail: str
    stage: str  # the stage it was in
    stage_seconds: float
    log: str = ""
    completed: list[tuple[str, float]] = field(default_factory=list)  # (stage, seconds) done before


@dataclass
class WorkerReply:
    result: Any = None
    fault: WorkerFault | None = None
    log: str = ""  # captured stdout/stderr of the worker during this request
    # seconds this request spent waiting for a worker, and starting one (a stage profile's
    # engine-side stages: app.gpu.cascade.account_stages)
    waited_s: float = 0.0
    started_s: float = 0.0


class _PlainUnpickler(pickle.Unpickler):
    """Unpickles what a worker sends back: plain data only. A candidate runs in the worker and
    can write to its end of the pipe; a pickle naming any other class or function (the classic
    way to run code in whoever unpickles it) is refused instead of running in this process."""

    ALLOWED = frozenset({
        ("builtins", n) for n in ("dict", "list", "tuple", "set", "frozenset", "str", "bytes",
                                  "bytearray", "int", "float", "complex", "bool", "NoneType")} | {
        ("collections", "OrderedDict"), ("numpy", "dtype"), ("numpy", "ndarray"),
        ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
        ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct")})

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"a worker sent {module}.{name}: only plain data may cross")


def _receive(conn: Any) -> Any:
    """One message from a worker, unpickled with the plain-data unpickler."""
    data = conn.recv_bytes()
    try:
        return _PlainUnpickler(io.BytesIO(data)).load()
    except Exception as exc:  # noqa: BLE001 - whatever it sent, it is not a message
        return ("error", CRASH, f"the worker sent a message that is not plain data ({exc})", "")


def cell_cache(kind: str) -> Any:
    """The cache a cell of `kind` writes: the application's, or the baseline cell's own (which
    no candidate cell may write: the baseline cell runs what it finds there)."""
    return baseline_cache_dir() if kind == "baseline" else cache_dir()


def _line_buffered_output() -> None:
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)


def cell_main(argv: list[str]) -> None:
    """Entry point of a worker process started as a sandbox cell (see Worker.start); argv: the
    descriptor of its end of the socket pair."""
    _line_buffered_output()
    conn = Connection(int(argv[0]))
    _tag, plan = conn.recv()
    # Everything up to the seal runs before any thread exists: namespaces and Landlock need it.
    # So the handler's arguments are unpickled only then: a goal's operator imports numpy
    # (OpenBLAS threads), and a process with threads cannot enter a user namespace (for a user
    # who is not root, the cell would have no network, PID or mount namespace).
    applied = sandbox.enter_cell(plan)
    _tag, factory_spec, args = conn.recv()
    _serve(conn, factory_spec, args, plan, applied)


def _worker_main(conn: Any, factory_spec: str, args: tuple, log_path: str, plan: Any) -> None:
    """Entry point of a worker started by multiprocessing (Windows, where no socket can be
    handed to a child process): the environment is scrubbed in place, the rest is the same."""
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    _line_buffered_output()
    clean = sandbox.cell_environment(plan.scratch, sandbox.cache_environment(
        str(cell_cache(plan.kind)), plan.kind))
    os.environ.clear()
    os.environ.update(clean)
    applied = sandbox.enter_cell(plan)
    applied["environment"] = "partial: scrubbed in process (Windows)"
    _serve(conn, factory_spec, args, plan, applied)


def _serve(conn: Any, factory_spec: str, args: tuple, plan: Any, applied: dict[str, str]) -> None:
    try:
        module, _, factory = factory_spec.partition(":")
        handler = getattr(importlib.import_module(module), factory)(*args)
        sandbox.seal_cell(plan, applied)
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        conn.send(("failed", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
        return
    sandbox.report_off(applied)
    conn.send(("ready", applied))

    def progress(stage: str) -> None:
        conn.send(("stage", stage))

    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        try:
            result = handler(request, progress)
            conn.send(("result", result))
        except MemoryError:
            conn.send(("error", OUT_OF_MEMORY, "ran out of memory", traceback.format_exc()))
        except Exception as exc:  # noqa: BLE001 - reported to the parent
            conn.send(("error", RUNTIME_FAILED, f"{type(exc).__name__}: {exc}", traceback.format_exc()))


class _CellProcess:
    """A worker started with subprocess (so its environment is ours to choose), with the
    multiprocessing.Process methods the Worker uses."""

    def __init__(self, popen: subprocess.Popen) -> None:
        self.popen, self.pid = popen, popen.pid
        _LIVE_CELLS.add(self)

    def is_alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        if self.is_alive():
            sandbox.kill_cell(self.pid)  # the whole tree: cc1, kernel host, candidate too

    def join(self, timeout: float | None = None) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout)
            _LIVE_CELLS.discard(self)

    @property
    def exitcode(self) -> int | None:
        return self.popen.poll()


def _rss_bytes(pid: int, depth: int = 0) -> int:
    """Resident memory of a process and its descendants (a CPU cell's kernel host and the
    candidate's process are its children; the cell itself is below a shim and its PID
    namespace's init: app.gpu.sandbox.namespaces)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            total = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
    if depth < 5:
        with (contextlib.suppress(OSError, ValueError),
              open(f"/proc/{pid}/task/{pid}/children", "rb") as f):
            total += sum(_rss_bytes(int(c), depth + 1) for c in f.read().split())
    return total


def signal_name(code: int) -> str:
    """"SIGSEGV" for 11; "signal 99" for a number that names no signal."""
    try:
        return signal.Signals(code).name
    except ValueError:
        return f"signal {code}"


class Worker:
    """One spawned worker process and its pipe. Not thread-safe: the pool serialises use."""

    def __init__(self, factory: str, args: tuple = (), name: str = "worker",
                 memory_limit_bytes: int | None = None, kind: str = "auto",
                 programs: Sequence[str] = ()) -> None:
        self.factory, self.args, self.name = factory, args, name
        self.programs = tuple(programs)  # our own programs the cell may start (the kernel host)
        self.memory_limit_bytes = memory_limit_bytes
        # "gpu": host code is ours, the GPU driver needs devices and big address ranges
        self.kind = kind if kind != "auto" else ("gpu" if "cuda" in factory else "cpu")
        self.protections: dict[str, str] = {}
        self.scratch: str | None = None
        # Windows hands no socket to a child process (pass_fds): multiprocessing spawns it
        self.via_multiprocessing = sys.platform == "win32"
        self.served = self.restarts = 0
        self._proc: Any = None
        self._conn: Any = None
        fd, self.log_path = tempfile.mkstemp(prefix=f"kernelswarm-{name}-", suffix=".log")
        os.close(fd)

    # ---- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        self._drop_scratch()  # a process that died on its own left its cell behind
        self.scratch = tempfile.mkdtemp(prefix=f"kernelswarm-{self.name}-cell-")
        _LIVE_SCRATCH.add(self.scratch)
        cache = str(cell_cache(self.kind))
        plan = sandbox.plan_cell(self.kind, self.scratch,
                                 sandbox.writable_caches(cache, self.kind),
                                 self.memory_limit_bytes, self.programs)
        self._proc, self._conn = (self._spawn(plan) if self.via_multiprocessing
                                  else self._start_cell(plan, cache))
        self.served = 0
        if not self._conn.poll(_START_TIMEOUT_S):
            self.stop()
            raise RuntimeError(f"{self.name} did not start within {_START_TIMEOUT_S:.0f} s")
        try:
            msg = _receive(self._conn)
        except EOFError:
            self._proc.join(timeout=5.0)
            code = self._proc.exitcode
            self.stop()
            raise RuntimeError(f"{self.name} died while starting (exit {code}): {self._read_log(0)}") from None
        if msg[0] != "ready":
            self.stop()
            raise RuntimeError(f"{self.name} could not start: {msg[1]}\n{msg[2]}")
        self.protections = msg[1]
        sandbox.report_off(self.protections)  # the parent's log says it too, once

    def _start_cell(self, plan: Any, cache: Any) -> tuple[_CellProcess, Connection]:
        """A fresh interpreter (the bundle's executable, frozen) with an allow-listed
        environment, talking over a socket pair."""
        ours, theirs = socket.socketpair()
        env = sandbox.cell_environment(self.scratch, sandbox.cache_environment(cache, plan.kind))
        with open(self.log_path, "ab") as log:
            try:
                popen = subprocess.Popen(
                    entry_points.command("app.gpu.worker:cell_main", str(theirs.fileno()),
                                         sys_path=plan.sys_path),
                    env=env, cwd=self.scratch, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    pass_fds=(theirs.fileno(),), start_new_session=True)
            finally:
                theirs.close()
        conn = Connection(ours.detach())
        conn.send(("plan", plan))
        with contextlib.suppress(OSError):  # a cell that died entering its walls: start says so
            conn.send(("handler", self.factory, self.args))
        return _CellProcess(popen), conn

    def _spawn(self, plan: Any) -> tuple[Any, Any]:
        ctx = mp.get_context("spawn")  # never fork: the parent has threads (and maybe Qt, CUDA)
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker_main,
                           args=(child, self.factory, self.args, self.log_path, plan),
                           name=f"kernelswarm-{self.name}", daemon=True)
        try:
            proc.start()
        finally:
            child.close()
        return proc, parent

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def stop(self) -> None:
        """Ask the worker to end, give it 2 s, then kill (if need be) and reap it."""
        if self._conn is not None:
            with contextlib.suppress(OSError):  # BrokenPipeError among them
                self._conn.send(None)
        if self._proc is not None:
            self._proc.join(timeout=2.0)
        self._end(kill=True)

    def _drop_scratch(self) -> None:
        if self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)
            _LIVE_SCRATCH.discard(self.scratch)
            self.scratch = None

    def kill(self) -> None:
        self._end(kill=True)

    def close(self) -> None:
        self.stop()
        with contextlib.suppress(OSError):
            os.unlink(self.log_path)

    # ---- one request ----------------------------------------------------------------------
    def request(self, message: Any, deadlines: Deadlines,
                on_stage: Callable[[str], None] | None = None) -> WorkerReply:
        """Send one request and watch the worker until it answers, dies or overruns."""
        t0 = time.monotonic()
        if not self.alive():
            self.start()
        started = time.monotonic() - t0
        reply = self._request(message, deadlines, on_stage)
        reply.started_s = started
        return reply

    def _request(self, message: Any, deadlines: Deadlines,
                 on_stage: Callable[[str], None] | None) -> WorkerReply:
        log_start = os.path.getsize(self.log_path)
        stage, stage_t0 = "start", time.monotonic()
        request_t0 = stage_t0
        completed: list[tuple[str, float]] = []
        self._conn.send(message)
        killed_for: str | None = None
        while True:
            try:
                ready = self._conn.poll(_POLL_S)
            except (EOFError, OSError):
                ready = False
            if ready:
                try:
                    msg = _receive(self._conn)
                except (EOFError, OSError):
                    break  # died; classified below
                kind = msg[0]
                if kind == "stage":
                    if stage != "start":
                        completed.append((stage, time.monotonic() - stage_t0))
                    stage, stage_t0 = msg[1], time.monotonic()
                    if on_stage:
                        on_stage(stage)
                    continue
                self.served += 1
                log = self._read_log(log_start)
                if kind == "result":
                    return WorkerReply(result=msg[1], log=log)
                # the handler raised: the process is fine but its state is suspect
                self.kill()
                return WorkerReply(fault=WorkerFault(msg[1], msg[2], stage, time.monotonic() - stage_t0,
                                                     log="\n".join(x for x in (log, msg[3]) if x),
                                                     completed=completed), log=log)
            if not self._proc.is_alive():
                break
            elapsed = time.monotonic() - stage_t0
            limit = deadlines.for_stage(stage)
            reason = TIMEOUT
            if elapsed > limit:
                killed_for = f"exceeded the {limit:g} s limit for the {stage} stage"
                break
            if time.monotonic() - request_t0 > deadlines.total():
                killed_for = (f"exceeded the {deadlines.total():g} s limit for one request (in "
                              f"the {stage} stage)")
                break
            if self.memory_limit_bytes and _rss_bytes(self._proc.pid) > self.memory_limit_bytes:
                killed_for = (f"used more than {self.memory_limit_bytes / 2**20:.0f} MiB of memory "
                              f"in the {stage} stage")
                reason = OUT_OF_MEMORY
                break
        elapsed = time.monotonic() - stage_t0
        code = self._end(kill=killed_for is not None)
        log = self._read_log(log_start)
        if killed_for:
            detail = f"killed: {killed_for}"
        elif code == -signal.SIGKILL:
            # A SIGKILL the watchdog did not send: the system's out-of-memory killer, usually.
            reason, detail = OUT_OF_MEMORY, (f"worker was killed (SIGKILL, most likely the "
                                             f"system's out-of-memory killer) in the {stage} stage")
        elif code == -signal.SIGSYS:
            reason, detail = CRASH, (f"sandbox violation: the candidate made a forbidden system "
                                     f"call (starting a process or program, opening a socket, "
                                     f"tracing or signalling another process) in the {stage} "
                                     f"stage; the worker was killed (SIGSYS)")
        elif code is not None and code < 0:
            reason, detail = CRASH, f"worker died with {signal_name(-code)} in the {stage} stage"
        else:
            reason, detail = CRASH, f"worker exited with code {code} in the {stage} stage"
        self.served += 1
        return WorkerReply(fault=WorkerFault(reason, detail, stage, elapsed, log, completed),
                           log=log)

    def _end(self, kill: bool) -> int | None:
        """Kill (watchdog) or reap (it died) the process; its exit code (-signal when killed)."""
        code = None
        if self._proc is not None:
            if kill and self._proc.is_alive():
                self._proc.kill()
            self._proc.join(timeout=5.0)
            code = self._proc.exitcode
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None
        self._drop_scratch()
        return code

    def _read_log(self, start: int) -> str:
        try:
            with open(self.log_path, "rb") as f:  # only the tail: a candidate may print GBs
                f.seek(max(start, os.fstat(f.fileno()).st_size - 4 * LOG_TAIL_CHARS))
                data = f.read(4 * LOG_TAIL_CHARS)
        except OSError:
            return ""
        return data.decode("utf-8", errors="replace")[-LOG_TAIL_CHARS:]


class WorkerPool:
    """Workers (one per device) behind one `call`; thread-safe, one request per worker at a time."""

    def __init__(self, factory: str, worker_args: Sequence[tuple], *, recycle_after: int = 50,
                 memory_limit_bytes: int | None = None, name: str = "worker",
                 kind: str = "auto", programs: Sequence[str] = ()) -> None:
        if not worker_args:
            raise ValueError("a worker pool needs at least one worker")
        self.recycle_after = recycle_after
        self.workers = [Worker(factory, tuple(a), f"{name}{i}", memory_limit_bytes, kind, programs)
                        for i, a in enumerate(worker_args)]
        self._idle: queue.Queue[Worker] = queue.Queue()
        for w in self.workers:
            self._idle.put(w)
        self._closed = False
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return len(self.workers)

    def call(self, message: Any, deadlines: Deadlines,
             on_stage: Callable[[str], None] | None = None) -> WorkerReply:
        t0 = time.monotonic()
        worker = self._idle.get()
        try:
            if self._closed:
                raise RuntimeError("the worker pool is closed")
            if worker.served >= self.recycle_after and worker.alive():
                worker.stop()  # recycled: a fresh process starts on the next request
            waited = time.monotonic() - t0
            reply = worker.request(message, deadlines, on_stage)
            reply.waited_s = waited
            if reply.fault is not None:
                worker.restarts += 1  # the dead worker is replaced lazily by the next request
            elif isinstance(reply.result, dict) and reply.result.get("restart"):
                worker.kill()  # the candidate corrupted memory or state: start afresh
                worker.restarts += 1
            return reply
        finally:
            self._idle.put(worker)

    def broadcast_kill(self) -> None:
        for w in self.workers:
            w.kill()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        for w in self.workers:
            w.close()
