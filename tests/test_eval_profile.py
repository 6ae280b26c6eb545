"""Where an evaluation's time goes, and what it is held to: every
stage, the evaluator's own included (starting the worker, the baselines, the roofs, the
exchange), with seconds that add up to the evaluation's wall time; one fraction of the hardware
per candidate, named by its roof, or "no roof" where there is none. Real compiler, real worker."""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

from app.catalog.protocol import OperatorBase
from app.core.types import Candidate
from app.goal import Goal
from app.gpu.cascade import ENGINE_STAGES, STAGES
from app.gpu.cpu import CpuEvaluator, CpuSettings, find_compiler
from app.gpu.timing import TimingSettings, time_interleaved
from app.gpu.verify import CheckCase, Tolerance, compare, make_inputs, make_outputs, plan_checks

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")
ROOF_FILE = Path(tempfile.gettempdir()) / f"kernelswarm-test-cpu-roofs-{os.getuid()}.json"  # shared with others
FAST = CpuSettings(timing=TimingSettings(warmup=1, min_samples=3, max_samples=5, max_seconds=0.2),
                   baseline_timing=TimingSettings(warmup=1, min_samples=3, max_samples=3,
                                                  max_seconds=0.2),
                   flush_bytes=0, memory_limit_bytes=1 << 30, roof_file=ROOF_FILE)


@pytest.mark.slow
def test_the_stages_account_for_the_wall_time_and_name_one_roof():
    goal = Goal(name="profile", backend="cpu", operator="transpose", shapes=[[64, 96]])
    with CpuEvaluator(goal, settings=FAST) as ev:
        first = ev.evaluate(Candidate(config={"TILE": 16, "WRITE_MAJOR": 0, "VEC": 8,
                                              "THREADS": 1}, key="a", agent="t"))
        second = ev.evaluate(Candidate(config={"TILE": 32, "WRITE_MAJOR": 0, "VEC": 8,
                                               "THREADS": 1}, key="b", agent="t"))
    for r in (first, second):
        assert r.ok, (r.reason, r.detail)
        names = [s.name for s in r.stages]
        assert [n for n in names if n not in ENGINE_STAGES] == list(STAGES)
        assert sum(s.seconds for s in r.stages) == pytest.approx(r.sim_seconds, rel=1e-9)
        # exactly one fraction of the hardware, and the roof it is against
        assert 0 < r.metrics["fraction_of_roof"] and "roof" in r.resources["roof"]
        assert "at 1 thread" in r.resources["roof"], r.resources["roof"]
        assert "fraction_of_copy_bandwidth" not in r.metrics
    # the first evaluation started the worker and measured the run's baselines: named stages
    assert {"worker_start", "baselines"} <= {s.name for s in first.stages}
    assert not {"worker_start", "baselines"} & {s.name for s in second.stages}


@pytest.mark.slow
def test_a_compute_bound_operator_is_held_to_the_fp32_peak():
    goal = Goal(name="gemm", backend="cpu", operator="gemm", shapes=[[32, 64, 48]])
    config = {"ISA": 0, "MR": 6, "NV": 2, "KC": 128, "MC": 96, "NC": 256, "UK": 4, "ORDER": 0,
              "PAR": 0, "PF": 0, "SHARE_B": 1, "THREADS": 1}
    with CpuEvaluator(goal, settings=dataclasses.replace(FAST, measure_roofs=True)) as ev:
        r = ev.evaluate(Candidate(config=config, key="g", agent="t"))
    assert r.ok, (r.reason, r.detail)
    # the measured FP32 peak at its one thread (app.gpu.cpu.compute_roof)
    assert r.resources["roof"].startswith("FP32 peak") and "at 1 thread" in r.resources["roof"]
    assert 0 < r.metrics["fraction_of_roof"] < 1, r.metrics


def test_a_long_call_is_warmed_once():
    calls = []

    def slow() -> None:
        calls.append(1)
        import time
        time.sleep(0.3)

    time_interleaved({"k": slow}, TimingSettings(warmup=3, min_samples=3, max_samples=3,
                                                 max_seconds=10))
    assert len(calls) == 1 + 3  # one warm-up round, then the samples


class _Stored(OperatorBase):
    """A stand-in operator with stored inputs (as an imported Kernel Tuner goal has)."""

    distributions = ("normal",)
    inputs_vary = False
    deterministic = True

    def make_inputs(self, xp, shape, dtype, rng, distribution="normal"):
        return {"x": np.arange(shape[0], dtype=np.float32)}

    def output_shapes(self, shape):
        return {"y": tuple(shape)}

    def edge_shapes(self, goal_shapes, dtype, params):
        return []

    def check_shape(self, shape, dtype="float32"):
        return None

    def reference(self, xp, inputs, shape):
        return {"y": inputs["x"] * 2.0}

    def error_scale(self, xp, inputs, ref, shape):
        return {"y": np.abs(ref["y"])}


def test_stored_inputs_are_checked_once_per_shape():
    op = _Stored()
    cases = plan_checks(op, [[10], [20]], {}, "float32", seed=1)
    assert [c.shape for c in cases] == [[10], [20]]  # no second draw of the very same values


def test_the_chunked_comparison_finds_what_the_whole_one_does(monkeypatch):
    """A large output is compared in chunks: the same verdict, counts and positions."""
    from app.gpu import verify

    op = _Stored()
    n = 5000
    inputs = make_inputs(np, op, CheckCase([n], "normal", 1), "float32")
    out = make_outputs(np, op, [n], "float32")["y"]
    out.view[...] = inputs["x"] * 2
    out.view[1234] = 7.0
    out.view[4321] += 1e4  # the worst
    tol = Tolerance(rtol=1e-6, atol=0.0)
    whole = compare(np, op, inputs, {"y": out.view}, [n], "float32", tol)
    monkeypatch.setattr(verify, "CHUNK", 256)
    chunked = verify.compare(np, op, inputs, {"y": out.view}, [n], "float32", tol)
    assert whole == chunked and "2 of 5000" in whole and "(1234,)" in whole and "(4321,)" in whole
    out.view[3000] = np.nan
    assert "NaN" in verify.compare(np, op, inputs, {"y": out.view}, [n], "float32", tol)
