"""The compute roof: a compute-bound figure (GFLOP/s) is held to the FP32
peak measured on this machine, for the threads the kernel really runs, measured again beside it
before anything is refused. Real compiler, real worker cells, a real CPU hog beside them.

The planted kernel does far less work than its goal's FLOP count claims: a colleague's goal
multiplies two fixed all-ones matrices (so every check passes when C = n everywhere) and
declares 2 n^3 FLOPs; the kernel writes n and returns. Before this roof it was accepted at
thousands of GFLOP/s, several times this machine's peak."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from app.core.types import SUSPECT, Candidate
from app.goal import Goal
from app.gpu.cpu import CpuEvaluator, CpuSettings, compute_roof, find_compiler, toolchain
from app.gpu.timing import TimingSettings
from app.gpu.trusted_cache import store_trusted
from app.gpu.worker import Deadlines

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")

SETTINGS = CpuSettings(
    timing=TimingSettings(warmup=1, min_samples=5, max_samples=9, max_seconds=1.0),
    baseline_timing=TimingSettings(warmup=1, min_samples=3, max_samples=3, max_seconds=0.2),
    deadlines=Deadlines(compile_s=60.0, run_s=30.0), memory_limit_bytes=1 << 30)
# the catalog's packed GEMM, one thread, the widest SIMD every x86-64 has plus a tail
GEMM_CONFIG = {"ISA": 0, "MR": 6, "NV": 2, "KC": 128, "MC": 96, "NC": 256, "UK": 4,
               "ORDER": 0, "PAR": 0, "PF": 0, "SHARE_B": 1, "THREADS": 1}

HONEST_C = """\
void mm(float *c, const float *a, const float *b, int n)
{
    for (int i = 0; i < n * n; i++) c[i] = 0.0f;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < n; k++)
            for (int j = 0; j < n; j++) c[i * n + j] += a[i * n + k] * b[k * n + j];
}
"""
# every input is 1: the product is n everywhere, without one multiply
SKIPS_WORK_C = """\
void mm(float *c, const float *a, const float *b, int n)
{
    (void)a; (void)b;
    for (int i = 0; i < n * n; i++) c[i] = (float)n;
}
"""
REFERENCE_PY = """\
def mm(a, b):
    return a @ b
"""
GOAL_TOML = """\
name = "matmul of ones"
backend = "cpu"
shapes = [[512]]

[kernel]
source = "mm.c"
entry = "mm"
dims = ["n"]
tune_params = { VARIANT = [0] }
reference = "reference.py:mm"
flops = "2 * n * n * n"
args = [
  { name = "c", role = "output", shape = ["n", "n"] },
  { name = "a", shape = ["n", "n"], fill = "ones", fixed = true },
  { name = "b", shape = ["n", "n"], fill = "ones", fixed = true },
  { name = "n", role = "scalar", dtype = "int32", value = "n" },
]
"""


def _low_peak(path: Path) -> Path:
    """A peak as a loaded machine might have cached it (far too low), trusted (MAC'd)."""
    roof = compute_roof.ComputeRoof(os.cpu_count() or 1, 0.5, 0.5)
    store_trusted(path, compute_roof.encode(roof, toolchain().identity))
    return path


@pytest.fixture
def ones_goal(tmp_path):
    (tmp_path / "mm.c").write_text(HONEST_C)
    (tmp_path / "reference.py").write_text(REFERENCE_PY)
    (tmp_path / "goal.toml").write_text(GOAL_TOML)
    return Goal.load(tmp_path / "goal.toml")


def test_the_probe_measures_the_peak_quickly_and_caches_it_trusted(tmp_path):
    tc = toolchain()
    t0 = time.perf_counter()
    roof, from_cache = compute_roof.cached(tc.compiler, tc.identity, tmp_path / "peak.json")
    took = time.perf_counter() - t0
    assert not from_cache and took < 3.0, took  # compile + 2 x 9 samples of 2 ms
    assert roof.one_thread > 0.5 and roof.all_threads >= roof.one_thread, roof
    assert roof.gflops(1) == roof.one_thread and roof.gflops(roof.threads) == roof.all_threads
    again, from_cache = compute_roof.cached(tc.compiler, tc.identity, tmp_path / "peak.json")
    assert from_cache and again == roof
    # a cell (or anyone) raising the cached peak: the MAC fails, the peak is measured again
    path = compute_roof.default_file()
    store_trusted(path, compute_roof.encode(roof, tc.identity))
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "one_thread": 99999.0, "all_threads": 99999.0}))
    fresh, from_cache = compute_roof.cached(tc.compiler, tc.identity, path)
    assert not from_cache and fresh.one_thread < 99999.0


@pytest.mark.slow
def test_an_honest_gemm_gets_a_fraction_of_the_peak():
    goal = Goal(name="gemm", backend="cpu", operator="gemm", shapes=[[64, 96, 80]])
    with CpuEvaluator(goal, settings=SETTINGS) as ev:
        r = ev.evaluate(Candidate(config=GEMM_CONFIG, key="g", agent="t"))
        peak = ev.peak()
    assert r.ok, (r.reason, r.detail)
    assert r.resources["roof"].startswith("FP32 peak") and "at 1 thread" in r.resources["roof"]
    assert 0 < r.metrics["fraction_of_roof"] < 1, r.metrics
    assert r.metrics["roof_gflops"] >= peak.one_thread and r.metrics["roof_threads"] == 1
    assert r.metrics["gflops"] < r.metrics["roof_gflops"]


@pytest.mark.slow
def test_a_kernel_doing_less_work_than_its_flops_is_refused_by_the_peak(ones_goal):
    with CpuEvaluator(ones_goal, settings=SETTINGS) as ev:
        honest = ev.evaluate(Candidate(config={"VARIANT": 0}, key="honest", agent="t"))
        cheat = ev.evaluate(Candidate(config={"VARIANT": 0}, key="skips", agent="llm",
                                      source=SKIPS_WORK_C))
        peak = ev.peak()
    assert honest.ok, (honest.reason, honest.detail)
    assert honest.metrics["fraction_of_roof"] < 1, honest.metrics
    assert not cheat.ok and cheat.reason == SUSPECT, (cheat.reason, cheat.detail, cheat.metrics)
    assert "faster than the hardware allows" in cheat.detail, cheat.detail
    # both figures, and the peak it was held to: measured again beside it, at its one thread
    m = cheat.metrics
    assert m["measured_ms"] * 1.1 < m["roof_ms"], m
    assert m["roof_gflops"] >= peak.one_thread, (m, peak)
    label = cheat.resources["roof"]
    assert label.startswith("FP32 peak") and "at 1 thread, measured again beside" in label, label
    names = [s.name for s in cheat.stages]
    assert names.count("roof") == 2 and "retime" in names and not cheat.stages[-1].ok, names


@pytest.mark.slow
def test_a_loaded_machine_does_not_get_an_honest_gemm_refused(tmp_path, cpu_hog):
    """The cached peak as a loaded machine measured it (0.5 GFLOP/s) and a hog beside the
    candidate: the peak is measured again beside it, and the higher one holds. (A call of a
    few ms: under a hog the zygote's window of a 0.1 ms call can hold a whole time slice.)"""
    goal = Goal(name="gemm", backend="cpu", operator="gemm", shapes=[[256, 256, 160]])
    settings = CpuSettings(**{**vars(SETTINGS), "compute_roof_file": _low_peak(
        tmp_path / "low-peak.json")})
    with CpuEvaluator(goal, settings=settings) as ev:
        r = ev.evaluate(Candidate(config=GEMM_CONFIG, key="g", agent="t"))
    assert r.ok, (r.reason, r.detail, r.metrics)
    assert "measured again beside the candidate" in r.resources["roof"], r.resources
    assert r.metrics["roof_gflops"] > 0.5 and 0 < r.metrics["fraction_of_roof"] <= 1.1, r.metrics
