"""Timing cheats, each a real planted kernel (tests/kernels/) through the real
CPU evaluator (worker cell, kernel host, cascade). The ground truth is an honest twin timed
beside the cheat in the same evaluator: a cheat that "wins" is timed well under its twin;
every one must now be refused or timed like its twin. Measured on the old code (/tmp/base2)
each of them won before the timing was hardened."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.types import RESOURCE_LIMIT, Candidate
from app.goal import Goal
from app.gpu.cpu import CpuEvaluator, CpuSettings, find_compiler
from app.gpu.timing import TimingSettings
from app.gpu.worker import Deadlines

KERNELS = Path(__file__).parent / "kernels"
pytestmark = [pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler"),
              pytest.mark.slow]

SHAPE = [96, 96, 96]  # naive C: about a millisecond a call, far above the channel's cost
SETTINGS = CpuSettings(
    timing=TimingSettings(warmup=1, min_samples=9, max_samples=12, max_seconds=2.0),
    baseline_timing=TimingSettings(warmup=1, min_samples=3, max_samples=3, max_seconds=0.2),
    deadlines=Deadlines(compile_s=60.0, run_s=30.0),
    flush_bytes=16 << 20,  # the window a background thread works in on the old code
    memory_limit_bytes=1 << 30, measure_roofs=False)
CONFIG = {"ISA": 0, "MR": 6, "NV": 2, "KC": 128, "MC": 96, "NC": 256, "UK": 4,
          "ORDER": 0, "PAR": 0, "PF": 0, "SHARE_B": 1, "THREADS": 1}
NAIVE = """
void ks_kernel(float *C, const float *A, const float *B, long M, long N, long K) {
    for (long i = 0; i < M; ++i)
        for (long j = 0; j < N; ++j) {
            float s = 0.0f;
            for (long k = 0; k < K; ++k) s += A[i * K + k] * B[k * N + j];
            C[i * N + j] = s;
        }
}
"""


@pytest.fixture(scope="module")
def gemm():
    ev = CpuEvaluator(Goal(name="timing attacks", backend="cpu", operator="gemm",
                           shapes=[SHAPE]), settings=SETTINGS)
    yield ev
    ev.close()


def run(ev, source: str, key: str, config: dict | None = None):
    return ev.evaluate(Candidate(config=dict(config or CONFIG), key=key, agent="llm",
                                 source=source))


def twin_ms(ev, key: str) -> float:
    """The honest kernel's figure: the faster of two (a busy machine only slows one down)."""
    times = []
    for i in range(2):
        r = run(ev, NAIVE + f"/* {key} {i} */\n", f"twin-{key}-{i}")
        assert r.ok, (r.reason, r.detail)
        times.append(r.time_ms)
    return min(times)


def refused_within(tries: int, attempt):
    """Evaluated up to `tries` times (fresh keys), the kernel must be refused at least once;
    the tree before the check accepts every time. The zygote counts the child's threads
    between calls, so one evaluation is enough, loaded machine or not (counting only the cores
    kept busy once missed extra threads that got no core)."""
    busy = []
    for i in range(tries):
        r = attempt(i)
        if not r.ok:
            assert r.reason == RESOURCE_LIMIT, (r.reason, r.detail)
            return r
        busy.append((r.metrics.get("cores_busy"), r.metrics.get("threads")))
    raise AssertionError(f"accepted {tries} times, (cores kept busy, threads): {busy}")


def assert_no_win(cheat, honest_ms: float) -> None:
    """Refused, or timed like its honest twin (no faster than 0.6x of it)."""
    if cheat.ok:
        assert cheat.time_ms > 0.6 * honest_ms, (cheat.time_ms, honest_ms, cheat.metrics)


def test_a_forged_start_time_does_not_lower_the_figure(gemm):
    """(a) The kernel edits the host's saved start time on three calls in four."""
    cheat = run(gemm, (KERNELS / "forged_clock_gemm.c").read_text(), "forged-clock")
    assert_no_win(cheat, twin_ms(gemm, "a"))
    if cheat.ok:  # each forged call was timed by the zygote's window instead
        assert cheat.metrics.get("timed_by_cell_clock", 0) > 0.3, cheat.metrics


def test_a_thread_left_running_computes_nothing_between_calls(gemm):
    """(b) GOMP_parallel_start without its end: a team thread computes the next call's
    product while the harness flushes caches. Declaring THREADS=2 it may run, but it is
    stopped between calls, so it wins nothing."""
    source = (KERNELS / "background_thread_gemm.c").read_text()
    cheat = run(gemm, source, "background-2", {**CONFIG, "THREADS": 2})
    assert_no_win(cheat, twin_ms(gemm, "b"))


def test_a_thread_beyond_the_declared_ones_is_refused(gemm):
    """(b) and the THREADS restriction: the same kernel declaring THREADS=1 keeps two cores
    busy; its threads, counted between calls, refuse it."""
    cheat = refused_within(1, lambda i: run(gemm, (KERNELS / "background_thread_gemm.c")
                                            .read_text(), f"background-1-{i}"))
    assert "THREADS=1" in cheat.detail, cheat.detail


def test_a_kernel_ignoring_its_threads_restriction_is_refused(gemm):
    """A goal's THREADS == 1: the kernel declares one thread and starts one per core."""
    goal = Goal(name="one thread", backend="cpu", operator="gemm", shapes=[SHAPE])
    goal.constraints.restrictions = ["THREADS == 1"]
    with CpuEvaluator(goal.validate(), settings=SETTINGS) as ev:
        cheat = refused_within(1, lambda i: run(ev, (KERNELS / "threads_ignored_gemm.c")
                                                .read_text(), f"threads-{i}"))
        honest = run(ev, NAIVE, "one-thread")
    assert honest.ok, (honest.reason, honest.detail)
    assert "more threads than declared" in cheat.detail and "THREADS=1" in cheat.detail


def test_a_cache_in_the_arena_tail_cannot_patch_results():
    """(c) Each slot's inputs and product kept past the last argument, patched in O(M N).
    Its own evaluator: the cache lives in a fresh worker's arena (the module's worker has
    run other kernels through it)."""
    with CpuEvaluator(Goal(name="arena cache", backend="cpu", operator="gemm", shapes=[SHAPE]),
                      settings=SETTINGS) as ev:
        cheat = run(ev, (KERNELS / "arena_cache_gemm.c").read_text(), "arena-cache")
        assert_no_win(cheat, twin_ms(ev, "c"))


def test_an_honest_openmp_kernel_within_its_threads_is_not_refused(gemm):
    """Threads it declares may work during its calls (a user's kernel without THREADS may use
    every core: tests/test_honest_roof.py); only work outside its calls is stopped."""
    source = NAIVE.replace("    for (long i", "#pragma omp parallel for num_threads(2)\n    for (long i", 1)
    r = run(gemm, source, "omp-2", {**CONFIG, "THREADS": 2})
    assert r.ok, (r.reason, r.detail)
