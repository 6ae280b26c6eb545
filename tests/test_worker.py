"""The isolated worker pool with a small Python handler (no compiler needed): crashes, hangs,
memory blow-ups and handler errors cost one worker process, which comes back for the next
request; per-stage deadlines; recycling; captured output."""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time

import pytest

from app.core.types import CRASH, OUT_OF_MEMORY, RUNTIME_FAILED, TIMEOUT
from app.gpu.worker import Deadlines, WorkerPool

_PROCESS_ID = int.from_bytes(os.urandom(8), "little")  # drawn once in each worker process


def _pid() -> int:
    """Which worker process answered. Not its pid: in the cell's PID namespace and its own
    procfs every worker is pid 2, so each process draws an identity of its own."""
    return _PROCESS_ID


class ProbeHandler:
    """Runs in the worker process; imported there by name ("test_worker:ProbeHandler")."""

    def __init__(self, tag: str) -> None:
        self.tag = tag
        self.calls = 0

    def __call__(self, request, progress):
        self.calls += 1
        action = request[0]
        if action == "echo":
            progress("compile")
            progress("verify")
            return {"tag": self.tag, "pid": _pid(), "calls": self.calls, "value": request[1]}
        if action == "print":
            print(request[1], flush=True)
            return {"pid": _pid()}
        if action == "crash":
            progress("verify")
            print("going down", flush=True)
            ctypes.string_at(0)  # a real fault: pid 1 of a namespace ignores its own kill()
        if action == "sleep":
            progress(request[2])
            time.sleep(request[1])
            return {"slept": request[1]}
        if action == "hog":
            progress("verify")
            blocks = [bytearray(16 << 20) for _ in range(request[1])]  # touched: zero-filled
            time.sleep(2.0)
            return {"blocks": len(blocks)}
        if action == "chatter":  # a candidate announcing stage after stage to stay alive
            end = time.monotonic() + request[1]
            while time.monotonic() < end:
                progress("compile")
                time.sleep(0.05)
            return {"chattered": True}
        if action == "raise":
            raise ValueError("handler bug")
        if action == "taint":
            return {"pid": _pid(), "restart": True}
        raise AssertionError(action)


FACTORY = "test_worker:ProbeHandler"
FAST = Deadlines(compile_s=5.0, run_s=5.0)


@pytest.fixture
def pool():
    p = WorkerPool(FACTORY, [("a",)], recycle_after=100, memory_limit_bytes=256 << 20)
    yield p
    p.close()


def test_requests_run_in_another_process_with_stages(pool):
    stages: list[str] = []
    reply = pool.call(("echo", 42), FAST, on_stage=stages.append)
    assert reply.fault is None
    assert reply.result["value"] == 42 and reply.result["tag"] == "a"
    assert reply.result["pid"] != _pid()  # not this process
    assert stages == ["compile", "verify"]


def test_crash_is_a_fault_with_captured_output_and_the_worker_comes_back(pool):
    first = pool.call(("echo", 1), FAST).result["pid"]
    reply = pool.call(("crash",), FAST)
    assert reply.fault is not None
    assert reply.fault.reason == CRASH
    assert "SIGSEGV" in reply.fault.detail and reply.fault.stage == "verify"
    assert "going down" in reply.fault.log
    after = pool.call(("echo", 2), FAST)
    assert after.fault is None and after.result["pid"] != first
    assert after.result["calls"] == 1  # a fresh process: no state from before


def test_hang_past_the_stage_deadline_is_killed(pool):
    t0 = time.monotonic()
    reply = pool.call(("sleep", 30.0, "verify"), Deadlines(compile_s=10.0, run_s=0.5))
    assert time.monotonic() - t0 < 5.0
    assert reply.fault.reason == TIMEOUT
    assert "0.5 s limit for the verify stage" in reply.fault.detail
    assert pool.call(("echo", 3), FAST).fault is None


def test_compile_and_run_stages_have_their_own_deadlines(pool):
    # 0.8 s is within the compile limit but past the run limit
    slow_compile = pool.call(("sleep", 0.8, "compile"), Deadlines(compile_s=5.0, run_s=0.3))
    assert slow_compile.fault is None
    slow_run = pool.call(("sleep", 0.8, "time"), Deadlines(compile_s=5.0, run_s=0.3))
    assert slow_run.fault.reason == TIMEOUT and slow_run.fault.stage == "time"


def test_memory_blow_up_is_out_of_memory(pool):
    reply = pool.call(("hog", 40), FAST)  # 640 MiB against a 256 MiB limit
    assert reply.fault.reason == OUT_OF_MEMORY
    assert "256 MiB" in reply.fault.detail
    assert pool.call(("echo", 4), FAST).fault is None


def test_handler_error_is_runtime_failure_with_traceback(pool):
    reply = pool.call(("raise",), FAST)
    assert reply.fault.reason == RUNTIME_FAILED
    assert "handler bug" in reply.fault.detail and "Traceback" in reply.fault.log
    assert pool.call(("echo", 5), FAST).fault is None


def test_killed_worker_is_restarted(pool):
    pid = pool.call(("echo", 1), FAST).result["pid"]
    os.kill(pool.workers[0].pid, signal.SIGKILL)  # the process the engine started
    time.sleep(0.1)
    reply = pool.call(("echo", 2), FAST)
    assert reply.fault is None and reply.result["pid"] != pid


def test_tainted_worker_is_replaced(pool):
    pid = pool.call(("taint",), FAST).result["pid"]
    assert pool.call(("echo", 1), FAST).result["pid"] != pid


def test_workers_are_recycled_after_n_requests():
    pool = WorkerPool(FACTORY, [("r",)], recycle_after=2)
    try:
        pids = [pool.call(("echo", i), FAST).result["pid"] for i in range(5)]
    finally:
        pool.close()
    assert pids[0] == pids[1] and pids[1] != pids[2] and pids[2] == pids[3] and pids[3] != pids[4]


def test_output_is_captured_per_request(pool):
    a = pool.call(("print", "first message"), FAST)
    b = pool.call(("print", "second message"), FAST)
    assert "first message" in a.log and "second message" in b.log
    assert "first message" not in b.log


def test_one_worker_per_device_serves_in_parallel():
    pool = WorkerPool(FACTORY, [("gpu0",), ("gpu1",)])
    results = []
    try:
        tags = {pool.call(("echo", i), FAST).result["tag"] for i in range(2)}  # starts both
        threads = [threading.Thread(target=lambda: results.append(
            pool.call(("sleep", 0.6, "time"), FAST))) for _ in range(2)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.monotonic() - t0
    finally:
        pool.close()
    assert tags == {"gpu0", "gpu1"}
    assert all(r.fault is None for r in results)
    assert took < 1.1  # the two 0.6 s requests overlapped


def test_announcing_new_stages_does_not_extend_a_request_past_its_total(pool):
    short = Deadlines(compile_s=0.5, run_s=0.5)  # at most 3.5 s for one request
    t0 = time.monotonic()
    reply = pool.call(("chatter", 20.0), short)
    assert reply.fault is not None and reply.fault.reason == TIMEOUT
    assert "limit for one request" in reply.fault.detail
    assert time.monotonic() - t0 < 10.0
    assert pool.call(("echo", 1), FAST).result["value"] == 1
