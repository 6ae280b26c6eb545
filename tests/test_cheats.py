"""Planted kernels (tests/kernels/) that cheat or break, run through the real CPU backend:
compiled by the system compiler, run in the worker process. Each is rejected with the right
reason, and the run goes on: the next honest candidate is evaluated normally."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from app.core.types import CRASH, RESOURCE_LIMIT, TIMEOUT, VERIFY_FAILED, Candidate
from app.goal import Goal
from app.gpu.cpu import CpuEvaluator, CpuSettings, find_compiler
from app.gpu.timing import TimingSettings
from app.gpu.worker import Deadlines

KERNELS = Path(__file__).parent / "kernels"
pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")

# the machine's cache roofs, measured once (~10 s) and shared by every test that needs them
ROOF_FILE = Path(tempfile.gettempdir()) / "kernelswarm-test-cpu-roofs.json"
FAST = CpuSettings(
    timing=TimingSettings(warmup=1, min_samples=3, max_samples=5, max_seconds=0.2),
    baseline_timing=TimingSettings(warmup=1, min_samples=3, max_samples=3, max_seconds=0.2),
    deadlines=Deadlines(compile_s=60.0, run_s=2.0), flush_bytes=0, memory_limit_bytes=1 << 30,
    roof_file=ROOF_FILE)

HONEST = {"transpose": {"TILE": 16, "WRITE_MAJOR": 0, "VEC": 8, "THREADS": 1},
          "gemm": {"ISA": 0, "MR": 6, "NV": 2, "KC": 128, "MC": 96, "NC": 256, "UK": 4,
                   "ORDER": 0, "PAR": 0, "PF": 0, "THREADS": 1}}


def evaluator(operator: str, shape: list[int]) -> CpuEvaluator:
    return CpuEvaluator(Goal(name=f"cheats {operator}", backend="cpu", operator=operator,
                             shapes=[shape]), settings=FAST)


@pytest.fixture(scope="module")
def transpose():
    ev = evaluator("transpose", [64, 96])
    yield ev
    ev.close()


@pytest.fixture(scope="module")
def gemm():
    ev = evaluator("gemm", [32, 64, 48])
    yield ev
    ev.close()


def planted(ev: CpuEvaluator, kernel: str):
    name = ev.op.name
    return ev.evaluate(Candidate(config=HONEST[name], key=f"planted-{kernel}", agent="llm",
                                 source=(KERNELS / kernel).read_text()))


def honest(ev: CpuEvaluator, key: str):
    return ev.evaluate(Candidate(config=HONEST[ev.op.name], key=key, agent="explorer"))


@pytest.mark.parametrize("kernel, reason, evidence", [
    ("nonzero_only_transpose.c", VERIFY_FAILED, "NaN"),          # (b)
    ("cached_output_transpose.c", RESOURCE_LIMIT, "writable global data"),  # (c)
    ("out_of_bounds_transpose.c", VERIFY_FAILED, "guard canaries"),     # (e)
    ("hang_transpose.c", TIMEOUT, "2 s limit for the verify stage"),   # (f)
    ("crash_transpose.c", CRASH, "SIGSEGV"),                            # (g)
])
def test_transpose_cheats_are_rejected_and_the_run_goes_on(transpose, kernel, reason, evidence):
    ev = planted(transpose, kernel)
    assert not ev.ok and ev.value is None
    assert ev.reason == reason, (ev.reason, ev.detail)
    assert evidence in ev.detail, ev.detail
    assert ev.stages and not ev.stages[-1].ok
    assert honest(transpose, f"after-{kernel}").ok


@pytest.mark.parametrize("kernel, evidence", [
    ("skip_work_gemm.c", "outside tolerance"),  # (a)
    ("uninitialised_gemm.c", "NaN"),  # (d)
])
def test_gemm_cheats_are_rejected_and_the_run_goes_on(gemm, kernel, evidence):
    ev = planted(gemm, kernel)
    assert not ev.ok and ev.reason == VERIFY_FAILED
    assert evidence in ev.detail, ev.detail
    assert ev.failing_case and ev.failing_case["operator"] == "gemm"
    assert honest(gemm, f"after-{kernel}").ok


def test_crash_keeps_the_kernels_output_and_the_stage(transpose):
    ev = planted(transpose, "crash_transpose.c")
    assert "about to crash" in ev.log
    assert [s.name for s in ev.stages][-1] == "verify"
    assert [s.name for s in ev.stages if s.ok] == ["static_check", "compile", "resources"]


def test_cached_output_is_refused_by_its_state_before_it_runs(transpose):
    ev = planted(transpose, "cached_output_transpose.c")
    assert ev.reason == RESOURCE_LIMIT  # its statics are in .bss: the built library is refused
    assert [s.name for s in ev.stages] == ["static_check", "compile", "resources"]


def test_out_of_bounds_write_replaces_the_worker(transpose):
    before = honest(transpose, "pid-probe-1")
    pid = transpose.pool.workers[0].pid
    planted(transpose, "out_of_bounds_transpose.c")
    assert transpose.pool.workers[0].pid != pid or not transpose.pool.workers[0].alive()
    assert before.ok and honest(transpose, "pid-probe-2").ok
