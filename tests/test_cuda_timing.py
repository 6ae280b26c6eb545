"""The timing protocol's statistics and stopping rule, and NVML throttle decoding (no GPU)."""

from __future__ import annotations

import math
import random
import sys
import types

import pytest

from app.gpu.cuda.timing import (
    Protocol,
    StopRule,
    median_ci_rel,
    quantile,
    summarize,
    throttle_reasons,
)


def test_quantiles_and_summary():
    s = summarize([5.0, 1.0, 4.0, 2.0, 3.0])
    assert (s.median, s.minimum, s.n) == (3.0, 1.0, 5)
    assert s.p10 == pytest.approx(1.4) and s.p90 == pytest.approx(4.6)
    assert quantile([1.0, 2.0], 0.5) == 1.5
    with pytest.raises(ValueError):
        quantile([], 0.5)


def test_median_confidence_shrinks_with_more_samples():
    rng = random.Random(0)
    small = sorted(1.0 + rng.gauss(0, 0.01) for _ in range(10))
    large = sorted(1.0 + rng.gauss(0, 0.01) for _ in range(1000))
    assert median_ci_rel(small[:5]) == math.inf
    assert median_ci_rel(large) < median_ci_rel(small)
    assert median_ci_rel(large) < 0.002  # ~ 1.25 sigma / sqrt(n)
    assert median_ci_rel(sorted([2.0] * 20)) == 0.0


class FakeClock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_stop_rule_converges_caps_and_times_out():
    clock = FakeClock()
    p = Protocol(min_samples=10, max_samples=50, target_rel_spread=0.005, max_seconds=2.0)
    rule = StopRule(p, clock)
    steady = {"candidate": [1.0] * 9, "baseline": [2.0] * 9}
    assert rule.done(steady) == (False, "")
    steady = {"candidate": [1.0] * 10, "baseline": [2.0] * 10}
    assert rule.done(steady) == (True, "converged")
    rng = random.Random(1)
    noisy = {"candidate": [1.0 + rng.uniform(-0.2, 0.2) for _ in range(20)], "baseline": [2.0] * 20}
    assert rule.done(noisy) == (False, "")  # one noisy function keeps everyone sampling
    noisy = {k: v * 3 for k, v in noisy.items()}
    assert rule.done({k: v[:50] for k, v in noisy.items()}) == (True, "max_samples")
    clock.t = 2.5
    assert rule.done({"candidate": [1.0, 1.5, 0.7]}) == (True, "time_cap")
    assert rule.done({"candidate": [1.0, 1.5]}) == (False, "")  # never stop on < 3 samples


def test_throttle_reason_bits():
    assert throttle_reasons(0) == []
    assert throttle_reasons(0x1 | 0x2 | 0x10) == []  # idle, app clocks, sync boost: not throttling
    # the software power cap is a bf16 GEMM's normal state on an H100/H200, not a throttle
    assert throttle_reasons(0x4) == []
    assert throttle_reasons(0x20 | 0x40 | 0x8 | 0x80 | 0x4) == ["hw_slowdown", "sw_thermal", "hw_thermal",
                                                          "power_brake"]


# ---- the Timer's throttle handling, with fakes of NVML and CuPy ----------------------------
# A real GPU cannot run here (no GPU on this machine): CuPy is tests/fake_cupy's NumPy stand-in
# (host-side events) and NVML a scripted fake whose counters the test drives.


class FakeNvml:
    """pynvml's surface the throttle probe uses. `violation` is NVML's cumulative violation time
    (ns) per policy; `tick` (policy -> ns) is added to it at every read, as time passes."""

    NVML_CLOCK_SM = 1
    NVML_PERF_POLICY_POWER = 0
    NVML_PERF_POLICY_THERMAL = 1
    NVML_PERF_POLICY_BOARD_LIMIT = 3
    NVML_PERF_POLICY_RELIABILITY = 5

    def __init__(self, mask=0, tick=None, unsupported=()):
        self.mask, self.tick, self.unsupported = mask, dict(tick or {}), set(unsupported)
        self.violation = {0: 0, 1: 0, 3: 0, 5: 0}
        self.reads = 0
        self.clock = 1980.0

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self.mask

    def nvmlDeviceGetViolationStatus(self, handle, policy):
        if policy in self.unsupported:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        self.violation[policy] += self.tick.get(policy, 0)
        return types.SimpleNamespace(referenceTime=0, violationTime=self.violation[policy])

    def nvmlDeviceGetClockInfo(self, handle, which):
        self.reads += 1
        return self.clock - self.reads  # a clock that drifts down, read once per snapshot


@pytest.fixture
def timer(monkeypatch):
    import fake_cupy

    monkeypatch.setitem(sys.modules, "cupy", fake_cupy.make_fake_cupy())
    from app.gpu.cuda import timing

    monkeypatch.setattr(timing.Timer, "flush", lambda self: None)

    def make(probe):
        return timing.Timer(1 << 20, probe)

    return make


PLAIN = Protocol(min_samples=10, max_samples=10, warmup=1, batch=5, max_seconds=30.0)


def test_power_cap_is_kept_and_a_throttle_between_batch_edges_is_caught(timer):
    from app.gpu.cuda.telemetry import ThrottleProbe

    nvml = FakeNvml(mask=0x4)  # at the power cap throughout: every batch is kept
    m = timer(ThrottleProbe(nvml, "h")).measure({"candidate": lambda: None}, PLAIN, graphable=())
    assert m.discarded_throttled == 0 and m.throttle_seen == [] and m.stats["candidate"].n == 10
    assert len(m.batch_sm_clock_mhz) == 2 and all(c > 1900 for c in m.batch_sm_clock_mhz)

    # thermal throttling that comes and goes inside the first batch: the mask is clear at both
    # edges, the cumulative counter is not
    nvml = FakeNvml(mask=0x4)
    probe = ThrottleProbe(nvml, "h")
    real = probe.snapshot
    calls = {"n": 0}

    def snapshot():
        calls["n"] += 1
        if calls["n"] == 2:  # the end of the first batch
            nvml.violation[1] += 40_000
        return real()

    probe.snapshot = snapshot
    m = timer(probe).measure({"candidate": lambda: None, "baseline": lambda: None}, PLAIN, graphable=())
    assert m.throttle_seen == ["thermal"] and m.discarded_throttled == 10  # one batch of 2 x 5
    assert m.kept_throttled == 0 and m.stats["candidate"].n == m.stats["baseline"].n == 10


def test_retakes_are_counted_per_batch(timer):
    """Throttled all the time: each batch is retaken at most max_throttle_retakes times, then kept
    (and counted as kept throttled); the next batch gets its retakes again."""
    from app.gpu.cuda.telemetry import ThrottleProbe

    nvml = FakeNvml(tick={3: 1000})  # board limit (hardware slowdown) counter always growing
    p = Protocol(min_samples=15, max_samples=15, warmup=1, batch=5, max_seconds=30.0, max_throttle_retakes=2)
    m = timer(ThrottleProbe(nvml, "h")).measure({"candidate": lambda: None}, p, graphable=())
    assert m.stats["candidate"].n == 15
    assert m.discarded_throttled == 3 * 2 * 5  # three kept batches, two retakes each
    assert m.kept_throttled == 15 and m.throttle_seen == ["board_limit"]


def test_without_nvml_or_with_a_plain_mask_function(timer):
    from app.gpu.cuda.telemetry import ThrottleProbe
    from app.gpu.cuda.timing import ThrottleSnapshot, snapshot_reader, throttled_between

    assert ThrottleProbe()() == 0 and ThrottleProbe().snapshot() == ThrottleSnapshot()
    masks = iter([0x40, 0, 0, 0])  # hw thermal at the first batch's start edge only
    m = timer(lambda: next(masks, 0)).measure({"candidate": lambda: None}, PLAIN, graphable=())
    assert m.throttle_seen == ["hw_thermal"] and m.discarded_throttled == 5 and m.batch_sm_clock_mhz == []
    assert snapshot_reader(lambda: 0x4)() == ThrottleSnapshot(mask=0x4)
    # a policy NVML does not support on this GPU is dropped after the first refusal
    nvml = FakeNvml(unsupported={5})
    probe = ThrottleProbe(nvml, "h")
    assert set(probe.snapshot().violation_ns) == {"thermal", "board_limit"}
    assert "reliability" not in probe.policies
    a = ThrottleSnapshot(violation_ns={"thermal": 5})
    assert throttled_between(a, ThrottleSnapshot(violation_ns={"thermal": 5})) == []
    assert throttled_between(a, ThrottleSnapshot(mask=0x4 | 0x80, violation_ns={"thermal": 6})) == [
        "power_brake", "thermal"]


def test_graph_replays_are_off_unless_asked_for():
    """A graph replays launches with no poisoning between them: the cascade never uses one by
    default (and a library baseline could not be captured anyway)."""
    assert Protocol().graph_below_ms == 0.0
