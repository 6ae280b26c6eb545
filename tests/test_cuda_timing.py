"""The timing protocol's statistics and stopping rule, and NVML throttle decoding (no GPU)."""

from __future__ import annotations

import math
import random

import pytest

from app.gpu.cuda.timing import (
    Protocol,
    StopRule,
    describe_reasons,
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
    assert throttle_reasons(0x4) == ["sw_power_cap"]
    assert throttle_reasons(0x20 | 0x40 | 0x8 | 0x80) == ["hw_slowdown", "sw_thermal", "hw_thermal",
                                                          "power_brake"]
    assert describe_reasons(0x1 | 0x4) == ["gpu_idle", "sw_power_cap"]
