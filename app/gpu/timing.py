"""Harness timing: the harness, never the kernel, takes the time.

Several functions (a candidate and its baselines) are sampled interleaved, round by round with
the order rotated, so drift in machine load hits all of them alike. The sample count adapts:
sampling stops once every function's spread (p90 - p10) / median is small, or the time budget
is spent, or the sample cap is reached.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

# After a settle pause the next contestant runs untimed for this long first: cores left idle
# come back slowly (here, a VM: the first two calls of a 2-thread kernel took 7.5 and 4 ms
# instead of 0.05 ms, one scheduler tick each), and the figure is of the kernel, not the wake-up.
SETTLE_WARM_S = 0.02
SETTLE_WARM_MAX_CALLS = 1000
LONG_WARMUP_S = 0.25  # a first warm-up round longer than this is the only one


@dataclass
class TimingSettings:
    warmup: int = 2
    min_samples: int = 5
    max_samples: int = 40
    target_spread: float = 0.05  # stop when (p90 - p10) / median is below this for all
    max_seconds: float = 3.0  # time budget for one measurement (all functions together)
    flush_bytes: int = 0  # >0: write a buffer this large before every sample (evicts caches)
    # >0: when the next call is another function's, sleep this long, then call it untimed for
    # SETTLE_WARM_S. Thread pools spin after a call (OpenBLAS ~2^28 cycles, about 0.1 s; GNU OpenMP well
    # under 1 ms): timed back to back, one contestant's spinning threads take the cores the
    # other's threads need. A program calls one of them, so each is timed as it runs alone.
    settle_s: float = 0.0


@dataclass
class TimingStats:
    samples_ms: list[float] = field(default_factory=list)
    median_ms: float = 0.0
    p10_ms: float = 0.0
    p90_ms: float = 0.0

    @property
    def spread(self) -> float:
        return (self.p90_ms - self.p10_ms) / self.median_ms if self.median_ms > 0 else 0.0


def add_shape_figures(total: dict[str, float], median_ms: float, p10_ms: float, p90_ms: float,
                      samples: int) -> None:
    """Adds one goal shape's figures to a kernel's totals over the goal's shapes (medians and
    percentiles summed, samples the fewest of any shape); `total` starts at zeros."""
    total["median_ms"] += median_ms
    total["p10_ms"] += p10_ms
    total["p90_ms"] += p90_ms
    total["samples"] = samples if not total["samples"] else min(total["samples"], samples)


def summarize(samples_ms: list[float]) -> TimingStats:
    if not samples_ms:
        return TimingStats()
    a = np.asarray(samples_ms, dtype=np.float64)
    return TimingStats(samples_ms=[float(s) for s in samples_ms], median_ms=float(np.median(a)),
                       p10_ms=float(np.percentile(a, 10)), p90_ms=float(np.percentile(a, 90)))


class CacheFlusher:
    """Evicts caches between samples by writing a buffer larger than the last-level cache."""

    def __init__(self, nbytes: int) -> None:
        self._buf = np.zeros(max(1, nbytes // 4), dtype=np.float32) if nbytes > 0 else None

    def __call__(self) -> None:
        if self._buf is not None:
            self._buf += 1.0


def time_call(fn: Callable[[], float | None]) -> float:
    """One harness-timed call, in milliseconds. A call that runs in another process (a CPU
    candidate in the kernel host) returns the time taken there around the kernel alone; the
    host checks it against this process's clock (app.gpu.cpu.kernel_host)."""
    t0 = time.perf_counter_ns()
    own = fn()
    wall = (time.perf_counter_ns() - t0) / 1e6
    return own if isinstance(own, float) else wall


def time_interleaved(fns: dict[str, Callable[[], None]], settings: TimingSettings,
                     flusher: CacheFlusher | None = None,
                     before: Callable[[str], None] | None = None) -> dict[str, TimingStats]:
    """Sample every function round by round (order rotated each round); adaptive count.
    `before(name)` runs before every call of `name` (warm-up included), outside the timed
    window: the cascade picks an input slot there, perturbs it and poisons its outputs."""
    names = list(fns)
    last: list[str | None] = [None]
    hook = before or (lambda name: None)

    def settle(name: str) -> None:
        if settings.settle_s > 0 and name != last[0]:
            time.sleep(settings.settle_s)
            # untimed calls until its own threads are awake (the other's are asleep by now)
            end = time.perf_counter() + SETTLE_WARM_S
            for _ in range(SETTLE_WARM_MAX_CALLS):
                hook(name)
                fns[name]()
                if time.perf_counter() >= end:
                    break
        last[0] = name

    warm_start = time.perf_counter()
    for i in range(settings.warmup):
        # one round warms a long call (pages, threads, caches): more would only cost its time
        if i and time.perf_counter() - warm_start > LONG_WARMUP_S:
            break
        for name in names:
            settle(name)
            hook(name)
            fns[name]()
    samples: dict[str, list[float]] = {n: [] for n in names}
    start = time.perf_counter()
    rounds = 0
    hard_min = min(3, settings.min_samples)
    while rounds < settings.max_samples:
        order = names[rounds % len(names):] + names[:rounds % len(names)]
        for name in order:
            settle(name)
            hook(name)
            if flusher is not None and not getattr(fns[name], "flushes_itself", False):
                flusher()
            samples[name].append(time_call(fns[name]))
        rounds += 1
        if rounds >= hard_min and time.perf_counter() - start > settings.max_seconds:
            break
        if rounds >= settings.min_samples and all(
                summarize(s).spread < settings.target_spread for s in samples.values()):
            break
    return {n: summarize(s) for n, s in samples.items()}
