"""A kept figure is shown against the roof of the threads its process is held to; the guard
still holds it to the roof of every thread it might start. Real compiler, real worker cells,
real kernel host (which counts the candidate's threads and CPU time).

Your own kernel that can start threads (OpenMP here) may run every core as far as the guard
knows, so the guard's roof is the all-core one. But the kernel host refuses a process that runs
more than the THREADS its configuration declares (ThreadLimit), so a kept THREADS=1 figure is
shown against the one-thread roof, not the all-core one that would understate it.

The cached roofs are planted (files given explicitly are taken as given): high ones, so that no
honest figure is beyond them and the shown roof is exactly the planted one; and absurdly low
ones, as a loaded machine might have cached them, for the guard's own test."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from app.core.types import CRASH, RESOURCE_LIMIT, SUSPECT, Candidate
from app.goal import Goal
from app.gpu.cpu import (
    CpuEvaluator,
    CpuSettings,
    compute_roof,
    find_compiler,
    memory_roof,
    toolchain,
)
from app.gpu.cpu.kernel_host import host_supported
from app.gpu.timing import TimingSettings
from app.gpu.worker import Deadlines

pytestmark = [
    pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler"),
    pytest.mark.skipif(not host_supported(), reason="needs the kernel host (it holds THREADS)"),
    pytest.mark.skipif(not toolchain().openmp, reason="needs OpenMP (THREADS = [1, 2])"),
    pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores"),
]

N = 1 << 21  # 8 MiB per array: the working set lives in DRAM at any thread count
HONEST_C = """\
#include <omp.h>
void scale(float *c, const float *a, int n)
{
    #pragma omp parallel for num_threads(THREADS) schedule(static)
    for (int i = 0; i < n; i++) c[i] = 2.0f * a[i];
}
"""
# declares THREADS=1 and runs two OpenMP threads: the pool thread outlives the call
OPENMP_TWO_C = HONEST_C.replace("num_threads(THREADS)", "num_threads(2)")
# declares THREADS=1, runs two OpenMP threads and ends OpenMP's pool before it returns (OpenMP
# 5's omp_pause_resource_all), so that no thread outlives the call: the sandbox kills it first
# (ending a thread loads libgcc_s)
PAUSED_TWO_C = OPENMP_TWO_C.replace(
    "c[i] = 2.0f * a[i];\n", "c[i] = 2.0f * a[i];\n    omp_pause_resource_all(omp_pause_hard);\n")
REFERENCE_PY = """\
def scale(a):
    return 2.0 * a
"""
GOAL_TOML = f"""\
name = "scale"
backend = "cpu"
shapes = [[{N}]]

[kernel]
source = "scale.c"
entry = "scale"
tune_params = {{ THREADS = [1, 2] }}
reference = "reference.py:scale"
args = [
  {{ name = "c", role = "output", shape = "n" }},
  {{ name = "a", shape = "n" }},
  {{ name = "n", role = "scalar", dtype = "int32", value = "n" }},
]
"""
LEVELS = [{"name": "L1", "size_bytes": 1 << 15, "shared_by": 1},
          {"name": "DRAM", "size_bytes": 0, "shared_by": os.cpu_count() or 1}]


def _planted_roofs(path: Path, one_thread: float, all_threads: float) -> Path:
    """Cached roofs in the file's format, DRAM (and L1) at the given GB/s."""
    path.write_text(json.dumps({
        "threads": os.cpu_count() or 1, "levels": LEVELS,
        "one_thread": {"L1": one_thread, "DRAM": one_thread},
        "all_threads": {"L1": all_threads, "DRAM": all_threads},
        "key": memory_roof.cache_key(toolchain().identity), "measured_at": time.time()}))
    return path


def _evaluator(d: Path, roof_file: Path) -> CpuEvaluator:
    (d / "scale.c").write_text(HONEST_C)
    (d / "reference.py").write_text(REFERENCE_PY)
    (d / "goal.toml").write_text(GOAL_TOML)
    settings = CpuSettings(
        timing=TimingSettings(warmup=1, min_samples=3, max_samples=5, max_seconds=0.3),
        deadlines=Deadlines(compile_s=60.0, run_s=30.0), flush_bytes=0,
        memory_limit_bytes=2 << 30, roof_file=roof_file)
    return CpuEvaluator(Goal.load(d / "goal.toml"), settings=settings)


@pytest.fixture(scope="module")
def high(tmp_path_factory):
    """Roofs no honest figure reaches: 1000 GB/s at one thread, 1500 at every core."""
    d = tmp_path_factory.mktemp("high")
    ev = _evaluator(d, _planted_roofs(d / "roofs.json", 1000.0, 1500.0))
    yield ev
    ev.close()


@pytest.fixture(scope="module")
def low(tmp_path_factory):
    """Roofs a loaded machine might have cached: far below any honest figure."""
    d = tmp_path_factory.mktemp("low")
    ev = _evaluator(d, _planted_roofs(d / "roofs.json", 1e-3, 1e-3))
    yield ev
    ev.close()


def _run(ev: CpuEvaluator, threads: int, key: str, source: str | None = None):
    return ev.evaluate(Candidate(config={"THREADS": threads}, key=key, agent="explorer",
                                 source=source))


@pytest.mark.parametrize("threads", [1, 2])
def test_a_kept_figure_is_shown_against_the_roof_of_its_declared_threads(high, threads):
    r = _run(high, threads, f"honest-{threads}")
    assert r.ok, (r.reason, r.detail)
    roofs = high.roofs()
    assert roofs is not None and roofs.level_for(2 * 4 * N, threads).name == "DRAM"
    want = roofs.bandwidth("DRAM", threads)
    assert r.metrics["roof_gbs"] == pytest.approx(want), r.metrics
    assert r.metrics["roof_threads"] == threads
    plural = "s" if threads > 1 else ""
    assert r.resources["roof"] == f"DRAM roof {want:.1f} GB/s at {threads} thread{plural}"
    # the one fraction of the hardware: the bytes the goal moves at that roof, over the time
    roof_ms = 2 * 4 * N / (want * 1e9) * 1e3
    assert r.metrics["fraction_of_roof"] == pytest.approx(roof_ms / r.time_ms, rel=1e-6)
    # the guard still allows every core to a source that can start threads
    assert high.guard_threads({"THREADS": threads}) == os.cpu_count()


COMPUTE_GOAL_TOML = GOAL_TOML.replace("THREADS = [1, 2]", "THREADS = [1]").replace(
    'reference = "reference.py:scale"', 'reference = "reference.py:scale"\nflops = "n"')


def test_the_runs_roof_line_is_at_the_most_threads_the_space_allows(tmp_path):
    """Every configuration declares THREADS=1 and is held to it: the run's roof line (limit)
    is the one-thread peak, not every core's. (A compute-bound goal; the memory-bound one is
    the next test.)"""
    (tmp_path / "scale.c").write_text(HONEST_C)
    (tmp_path / "reference.py").write_text(REFERENCE_PY)
    (tmp_path / "goal.toml").write_text(COMPUTE_GOAL_TOML)
    peak = compute_roof.ComputeRoof(os.cpu_count() or 1, 100.0, 100.0 * (os.cpu_count() or 1))
    roof_file = tmp_path / "peak.json"
    roof_file.write_bytes(compute_roof.encode(peak, toolchain().identity))
    ev = CpuEvaluator(Goal.load(tmp_path / "goal.toml"),
                      settings=CpuSettings(compute_roof_file=roof_file))
    try:
        assert not ev.op.memory_bound and ev.space.params["THREADS"] == [1]
        assert ev.limit() == pytest.approx(N / (peak.gflops(1) * 1e9) * 1e3)
    finally:
        ev.close()


def test_your_own_memory_bound_kernel_has_a_run_roof_line(high):
    """No library baseline (so no copy bandwidth) for your own kernel, but the same cached
    roofs: the run's roof line is the DRAM roof at the most threads the space allows (2)."""
    assert high.op.memory_bound and high.baselines() is None
    threads = min(2, os.cpu_count() or 1)
    assert high.run_threads() == threads
    want = high.roofs().bandwidth("DRAM", threads)
    assert high.limit() == pytest.approx(2 * 4 * N / (want * 1e9) * 1e3)


@pytest.mark.parametrize("source, reason, says", [
    (OPENMP_TWO_C, RESOURCE_LIMIT, "more threads than declared"),
    (PAUSED_TWO_C, CRASH, "sandbox violation")], ids=["pool", "paused"])
def test_a_kernel_that_runs_more_threads_than_it_declares_is_refused(high, source, reason, says):
    """Declares THREADS=1 (so its figure would be shown against the one-thread roof) but runs
    two threads: refused, never kept or shown against any roof."""
    r = _run(high, 1, f"two-threads-{reason}", source)
    assert not r.ok and r.reason == reason, (r.reason, r.detail)
    assert says in r.detail, r.detail
    assert "fraction_of_roof" not in r.metrics and "roof" not in r.resources, r.resources


@pytest.mark.slow
def test_the_guard_does_not_refuse_an_honest_one_thread_kernel_on_low_cached_roofs(low):
    """The cached one-thread roof is far too low. The guard holds the figure to the roof of
    every core the source might start, measures it again beside the candidate and keeps it;
    the shown figure is never beyond the roof it names (the too-low one-thread roof is not
    shown: the figure keeps the roof the guard measured)."""
    r = _run(low, 1, "honest-low")
    assert r.ok and r.reason != SUSPECT, (r.reason, r.detail)
    cores = os.cpu_count() or 1
    assert f"at {cores} threads, measured again beside the candidate" in r.resources["roof"], \
        r.resources
    assert 0 < r.metrics["fraction_of_roof"] <= 1.1, r.metrics
    assert r.metrics["roof_threads"] == cores
