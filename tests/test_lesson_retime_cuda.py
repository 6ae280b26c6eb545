"""Re-timed lessons on the CUDA backend: CudaEvaluator.retime_pair times two verified kernels
again in one measurement, interleaved sample by sample by the cascade's CUDA timer on the
goal's shapes (each kernel on its own timed slots: inputs perturbed and outputs poisoned before
every call, outputs checked after), through the evaluator's worker pool and deadlines; the lesson
book decides a close call on that re-timing.

There is no GPU here: fake CuPy (tests/fake_cupy.py) stands in for one. Real: the worker
processes (spawned through app.gpu.worker, one request at a time, deadlines, restarts), NVRTC
compiles and ptxas resources, the timed slots, the checks of timed outputs, the timer's
interleaving and statistics, the lesson book. What fake CuPy cannot show: real event timing.
Its "events" are host clocks around a Python emulation of the kernel, which runs synchronously,
so these tests show that the figures are each kernel's own (a kernel made 5 ms slower per call
is the slower one, summed over two shapes), never that CUDA events, the L2 flush or a GPU's
clocks measure what they should; tests/gpu runs the real timer on a GPU.

Where the cuda backend falls back to replay (your own kernel with a recorded space, no GPU),
the evaluator has no retime_pair at all: replay figures are recorded means, and re-timing them
would mean nothing; the session's getattr then gives the lesson book no re-timer.
"""

from __future__ import annotations

from dataclasses import replace

import fake_cupy
import pytest
from project_paths import ROOT
from retiming import Counting

from app.core.types import Candidate, Evaluation
from app.goal import Goal
from app.gpu.cuda.evaluator import CudaEvaluator
from app.gpu.cuda.timing import Protocol
from app.gpu.worker import Deadlines
from app.llm.facts import is_measured_lesson
from app.llm.lessons import RETIMED, Attempt, LessonBook

FACTORY = "fake_cupy:slow_512_worker"  # 512 threads per block: correct, SLOW_S slower per call
QUICK = Protocol(min_samples=6, max_samples=16, max_seconds=0.5, warmup=1, batch=2)
SHAPES = [[64, 1024], [16, 256]]
SLOW_MS = fake_cupy.SLOW_S * 1e3


def goal() -> Goal:
    return Goal(name="retime cuda", operator="softmax", backend="cuda", dtype="bfloat16",
                shapes=[list(s) for s in SHAPES]).validate()


def cand(threads: int, tpr: int = 64, source: str | None = None) -> Candidate:
    cfg = {"THREADS": threads, "TPR": min(tpr, threads), "VEC": 8, "FAST_EXP": 1}
    return Candidate(config=cfg, key=f"k{threads}-{tpr}{'-src' if source else ''}",
                     agent="llm-memory", source=source)


FAST, SLOW = cand(256), cand(512)


@pytest.fixture
def evaluator():
    ev = CudaEvaluator(goal(), devices=[0], worker_factory=FACTORY, protocol=QUICK,
                       measure_baseline=False, deadlines=Deadlines(compile_s=60, run_s=4))
    yield ev
    ev.close()


def _figures_ok(figures: dict[str, float]) -> None:
    assert 0 < figures["p10_ms"] <= figures["median_ms"] <= figures["p90_ms"], figures
    assert figures["samples"] >= 3  # the timer stops on its time cap with at least 3


def test_retime_pair_gives_both_kernels_figures_summed_over_the_goal_shapes(evaluator):
    got = evaluator.retime_pair(FAST, SLOW)
    assert got is not None and set(got) == {"a", "b"}
    for figures in got.values():
        _figures_ok(figures)
    # the slow kernel sleeps SLOW_MS in every call: its median sums two shapes' worth
    assert got["b"]["median_ms"] >= 2 * SLOW_MS, got
    assert got["a"]["p90_ms"] < got["b"]["p10_ms"], got
    # "a" is always the first argument's kernel
    swapped = evaluator.retime_pair(SLOW, FAST)
    assert swapped is not None and swapped["a"]["median_ms"] >= 2 * SLOW_MS
    assert swapped["b"]["p90_ms"] < swapped["a"]["p10_ms"], swapped


@pytest.mark.slow
def test_a_wrong_crashing_hanging_or_broken_kernel_gives_no_figures(evaluator):
    # THREADS 64 writes only half its rows: caught by the check of what the timed calls wrote
    # (the worker does not verify again before timing)
    assert evaluator.retime_pair(cand(64, tpr=32), FAST) is None
    assert evaluator.retime_pair(FAST, cand(64, tpr=32)) is None
    worker = evaluator.pool.workers[0]
    restarts = worker.restarts
    # an illegal address while timed: a sticky CUDA error, the worker is replaced
    assert evaluator.retime_pair(cand(128), FAST) is None
    assert worker.restarts == restarts + 1
    # hangs while timed: killed at the run deadline of the time stage
    assert evaluator.retime_pair(FAST, cand(1024, tpr=1024)) is None
    assert worker.restarts == restarts + 2
    # does not compile; outside the space
    assert evaluator.retime_pair(cand(256, source="this is not CUDA"), FAST) is None
    outside = Candidate(config={"THREADS": 100, "TPR": 32, "VEC": 8, "FAST_EXP": 1}, key="x")
    assert evaluator.retime_pair(outside, FAST) is None
    # and the next re-timing is fine
    got = evaluator.retime_pair(FAST, SLOW)
    assert got is not None and got["a"]["p90_ms"] < got["b"]["p10_ms"]


def _close(rewrite: Evaluation, parent: Evaluation) -> tuple[Evaluation, Attempt]:
    """A rewrite whose first figures overlap its parent's (a noisy first measurement)."""
    lo = min(rewrite.p10_ms, parent.p10_ms) * 0.9
    hi = max(rewrite.p90_ms, parent.p90_ms) * 1.1
    noisy = replace(rewrite, p10_ms=lo, p90_ms=hi)
    return noisy, Attempt(noisy.key, "llm-memory", "idea", parent.key, parent.value,
                          parent.p10_ms, parent.p90_ms, parent)


@pytest.mark.slow
def test_a_lesson_book_retimes_a_close_call_through_the_cuda_worker(evaluator):
    fast, slow = evaluator.evaluate(FAST), evaluator.evaluate(SLOW)
    assert fast.ok and slow.ok, (fast.detail, slow.detail)
    retime = Counting(evaluator.retime_pair)
    published: list = []
    book = LessonBook(goal(), "NVIDIA H200", generation=1, publish=published.append,
                      retime=retime)
    for rewrite, parent in ((fast, slow), (slow, fast)):
        noisy, attempt = _close(rewrite, parent)
        book.note_attempt(attempt)
        assert book.observe(noisy) == []  # decided on the book's thread, after the re-timing
    book.flush()
    assert retime.calls == [(fast.key, slow.key), (slow.key, fast.key)]
    by_key = {lesson.evidence["key"]: lesson for lesson in published}
    assert set(by_key) == {fast.key, slow.key} and len(published) == 2
    for lesson in by_key.values():
        ev = lesson.evidence
        assert ev["retimed"] is True and ev["retimed_samples"] >= 3
        assert lesson.text.endswith(RETIMED) and is_measured_lesson(lesson.text)
        assert "within the measurement spread" not in lesson.text
        (lo, hi), (plo, phi) = ev["spread_ms"], ev["parent_spread_ms"]
        assert not (hi < plo or lo > phi)  # the first figures alone decided nothing
    gain, loss = by_key[fast.key], by_key[slow.key]
    assert gain.kind == "llm_transformation" and "faster than the kernel it started from" in gain.text
    assert gain.evidence["retimed_spread_ms"][1] < gain.evidence["retimed_parent_spread_ms"][0]
    assert loss.kind == "llm_no_gain" and "was correct but not faster" in loss.text
    assert loss.evidence["retimed_spread_ms"][0] > loss.evidence["retimed_parent_spread_ms"][1]


def test_the_replay_fallback_has_no_retimer():
    """Your own CUDA kernel with a recorded space, and no GPU: the cuda backend replays the
    recorded means. No retime_pair there (the session's getattr gives None), so a close call
    keeps "within the measurement spread" and no re-timing is counted or attempted."""
    from app.core.evaluator import BackendUnavailable
    from app.gpu.cuda.evaluator import visible_devices
    from app.gpu.replay import ReplayEvaluator
    from app.session import build_evaluator, check_goal

    try:
        visible_devices()
        pytest.skip("a GPU is here: the goal measures live")
    except BackendUnavailable:
        pass
    g = Goal.load(ROOT / "resources" / "goals" / "custom" / "pnpoly_cuda" / "goal.toml")
    assert check_goal(g).name == "cuda"
    ev = build_evaluator(g)
    try:
        assert isinstance(ev, ReplayEvaluator)
        assert not ev.can_retime  # recorded means: nothing to time again
    finally:
        ev.close()
    assert CudaEvaluator.can_retime  # the live backend times the pair again

    parent = Evaluation(key="p", config={"block_size_x": 32}, ok=True, value=2.0, p10_ms=1.2,
                        p90_ms=2.8)
    child = Evaluation(key="c", config={"block_size_x": 64}, ok=True, value=1.5, p10_ms=1.1,
                       p90_ms=2.5)
    published: list = []
    book = LessonBook(g, "replay", generation=1, publish=published.append,
                      retime=ev.retime_pair if ev.can_retime else None)  # as the session does
    book.note_attempt(Attempt("c", "llm-memory", "idea", "p", 2.0, 1.2, 2.8, parent))
    book.observe(child)
    book.flush()
    (lesson,) = published
    assert "within the measurement spread" in lesson.text and not lesson.evidence.get("retimed")
    assert book.retimed == []


def _gpu_count() -> int:
    try:
        from cupy.cuda import runtime

        return int(runtime.getDeviceCount())
    except Exception:  # noqa: BLE001 - no CuPy, no driver or no device: no GPU
        return 0


def test_on_a_real_gpu_two_recommended_kernels_are_retimed():
    """Only where a GPU is visible (skipped here): the real worker, CUDA events, the L2 flush.
    Two recommended configurations, each re-timed near its own first figure."""
    if _gpu_count() == 0:
        pytest.skip("no NVIDIA GPU with a working driver")
    shape = [4096, 4096]
    g = Goal(name="retime gpu", operator="softmax", backend="cuda", dtype="float32",
             shapes=[shape]).validate()
    ev = CudaEvaluator(g, protocol=Protocol(min_samples=10, max_samples=60, max_seconds=1.0),
                       measure_baseline=False)
    try:
        configs = (ev.op.recommended("float32", shape) * 2)[:2]
        first = [ev.evaluate(Candidate(config=dict(c), key=f"gpu-retime-{i}", agent="test"))
                 for i, c in enumerate(configs)]
        assert all(e.ok for e in first), [(e.reason, e.detail) for e in first]
        got = ev.retime_pair(first[0], first[1])
        assert got is not None
        for label, e in zip(("a", "b"), first):
            _figures_ok(got[label])
            assert 0.5 < got[label]["median_ms"] / e.time_ms < 2.0, (got, e.time_ms)
    finally:
        ev.close()
