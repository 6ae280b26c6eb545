"""The timing protocol: CUDA events per sample, L2 flushed before each sample, warm-up, adaptive
sample count, CUDA graphs on request only (Protocol.graph_below_ms; off by default: no poisoning
between replays, and baselines cannot be captured), baselines interleaved with the
candidate, batches throttled by heat, hardware slowdown or power brake discarded and retaken (not
the software power cap), the SM clock recorded per batch.

The statistics and the stopping rule are plain Python (unit-tested without a GPU); `measure`
drives CuPy on the device inside a GPU worker process.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# NVML clock-event reasons that discard a batch of samples: heat, hardware slowdown, power brake.
# Not the software power cap: a bf16 GEMM on an H100/H200 runs at the power cap as its normal
# state (and so do cuBLAS's numbers); nor idle, application clocks or sync boost.
THROTTLE_BITS = {
    0x8: "hw_slowdown",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "power_brake",
}


def throttle_reasons(mask: int) -> list[str]:
    """Names of the throttling reasons set in an NVML clock-event mask."""
    return [name for bit, name in sorted(THROTTLE_BITS.items()) if mask & bit]


@dataclass
class ThrottleSnapshot:
    """The device's throttle state at one moment: the clock-event mask, NVML's cumulative
    violation time per throttling policy (ns; grows while a throttle is on, so it sees a throttle
    that started and ended between two snapshots) and the SM clock."""

    mask: int = 0
    violation_ns: dict[str, int] = field(default_factory=dict)
    sm_clock_mhz: float | None = None


def throttled_between(before: ThrottleSnapshot, after: ThrottleSnapshot) -> list[str]:
    """Throttling reasons in force at either edge or at any time in between."""
    grew = {policy for policy, ns in after.violation_ns.items()
            if ns > before.violation_ns.get(policy, ns)}
    return sorted(grew | set(throttle_reasons(before.mask | after.mask)))


def snapshot_reader(probe: Callable[[], Any] | None) -> Callable[[], ThrottleSnapshot]:
    """A probe with `snapshot()` (app.gpu.cuda.telemetry's) or a plain mask callable."""
    if probe is None:
        return ThrottleSnapshot
    snap = getattr(probe, "snapshot", None)
    return snap if callable(snap) else lambda: ThrottleSnapshot(mask=int(probe()))


@dataclass
class Stats:
    median: float
    p10: float
    p90: float
    n: int
    rel_ci: float  # half-width of the median's 95% confidence interval, relative to the median
    minimum: float = 0.0

    def to_dict(self) -> dict[str, float]:
        return {"median": self.median, "p10": self.p10, "p90": self.p90, "n": self.n,
                "rel_ci": self.rel_ci, "min": self.minimum}


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolation quantile of already sorted values."""
    if not sorted_values:
        raise ValueError("no samples")
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def median_ci_rel(sorted_values: list[float]) -> float:
    """Distribution-free 95% confidence interval of the median (order statistics
    n/2 -+ 0.98 sqrt(n)), as half its width over the median. inf below 6 samples."""
    n = len(sorted_values)
    if n < 6:
        return math.inf
    med = quantile(sorted_values, 0.5)
    half = 0.98 * math.sqrt(n)
    lo = max(0, math.floor(n / 2 - half))
    hi = min(n - 1, math.ceil(n / 2 + half))
    return math.inf if med <= 0 else (sorted_values[hi] - sorted_values[lo]) / (2.0 * med)


def summarize(samples: list[float]) -> Stats:
    s = sorted(samples)
    return Stats(median=quantile(s, 0.5), p10=quantile(s, 0.1), p90=quantile(s, 0.9), n=len(s),
                 rel_ci=median_ci_rel(s), minimum=s[0])


@dataclass
class Protocol:
    """How much to measure. Defaults fit a search loop; benchmarks may ask for more."""

    min_samples: int = 10
    max_samples: int = 200
    target_rel_spread: float = 0.005  # stop once the median is known to +-0.5%
    max_seconds: float = 3.0  # per measurement (all interleaved functions together)
    warmup: int = 3
    batch: int = 10  # samples between host synchronisations
    cold_l2: bool = True
    # Kernels shorter than this are timed as graph replays. Off by default: a graph replays its
    # launches with no output poisoning or input rotation between them (an early-return kernel
    # would win), and baselines (library calls) cannot be captured, so candidate and baseline
    # would not be timed on the same terms. Events include the launch, for both alike.
    graph_below_ms: float = 0.0
    graph_target_ms: float = 0.2  # ... of about this many milliseconds each
    max_throttle_retakes: int = 5


class StopRule:
    """Decides when enough samples were taken: every timed function has >= min_samples and a
    relative spread within target, or max_samples / max_seconds was reached."""

    def __init__(self, protocol: Protocol, clock: Callable[[], float] = time.perf_counter) -> None:
        self.protocol, self.clock, self.started = protocol, clock, clock()

    def done(self, samples: dict[str, list[float]]) -> tuple[bool, str]:
        p = self.protocol
        counts = [len(v) for v in samples.values()]
        if min(counts) >= p.max_samples:
            return True, "max_samples"
        if self.clock() - self.started >= p.max_seconds and min(counts) >= 3:
            return True, "time_cap"
        if min(counts) >= p.min_samples and all(
                median_ci_rel(sorted(v)) <= p.target_rel_spread for v in samples.values()):
            return True, "converged"
        return False, ""


@dataclass
class Measurement:
    stats: dict[str, Stats]
    samples: dict[str, list[float]]
    stop_reason: str
    mode: dict[str, str]  # "events" or "graph xR" per function
    cache: str  # "cold" or "warm"
    discarded_throttled: int = 0
    throttle_seen: list[str] = field(default_factory=list)
    batch_sm_clock_mhz: list[float] = field(default_factory=list)  # SM clock after each kept batch
    kept_throttled: int = 0  # samples kept although throttled (retakes for that batch used up)


# ---- on the device ------------------------------------------------------------------------

class Timer:
    """Device-side helpers bound to one CUDA device (lives in the GPU worker)."""

    def __init__(self, l2_bytes: int, throttle_mask: Callable[[], int] | None = None) -> None:
        import cupy as cp

        self.cp = cp
        # >= 2x L2 so that a memset evicts everything the previous sample left in the cache.
        self.flush_bytes = max(2 * int(l2_bytes), 64 << 20)
        self.flush_buf = cp.empty(self.flush_bytes, dtype=cp.uint8)
        self.throttle_snapshot = snapshot_reader(throttle_mask)
        self._spin = None

    def flush(self) -> None:
        self.flush_buf.data.memset_async(0, self.flush_bytes)

    def busy(self) -> None:
        """Keep the GPU busy ~30 us so the start event never waits on the host (warm mode)."""
        if self._spin is None:
            self._spin = self.cp.RawKernel(
                r'extern "C" __global__ void ks_spin(long long ns){ long long t0 = clock64();'
                r' while (clock64() - t0 < ns) { } }', "ks_spin")
        self._spin((1,), (1,), (self.cp.int64(50_000),))

    def one_launch_ms(self, fn: Callable[[], Any]) -> float:
        a, b = self.cp.cuda.Event(), self.cp.cuda.Event()
        self.flush()
        a.record()
        fn()
        b.record()
        b.synchronize()
        return self.cp.cuda.get_elapsed_time(a, b)

    def make_graph(self, fn: Callable[[], Any], reps: int) -> Any:
        stream = self.cp.cuda.Stream(non_blocking=True)
        with stream:
            stream.begin_capture()
            for _ in range(reps):
                fn()
            graph = stream.end_capture()
        with contextlib.suppress(AttributeError):  # older CuPy: uploaded on first launch
            graph.upload(stream)
        stream.synchronize()
        return graph, stream

    def _runners(self, fns: dict[str, Callable[[], Any]], p: Protocol, graphable: tuple[str, ...],
                 hook: Callable[[str], Any]) -> tuple[dict[str, Callable[[], Any]], dict[str, str],
                                                      dict[str, int], dict[str, Any]]:
        """What each function is timed as: its launch, or a CUDA graph of `reps` launches when
        one launch is shorter than the protocol's graph threshold (and it may be captured):
        (runners, modes, repetitions per sample, the graphs' streams)."""
        runners: dict[str, Callable[[], Any]] = {}
        modes: dict[str, str] = {}
        reps_of: dict[str, int] = {}
        streams: dict[str, Any] = {}
        for name, fn in fns.items():
            runners[name], modes[name], reps_of[name] = fn, "events", 1
            t = min(self.one_launch_ms(fn) for _ in range(3))
            if t >= p.graph_below_ms or name not in graphable:
                continue
            reps = max(2, min(1000, int(p.graph_target_ms / max(t, 1e-4))))
            hook(name)
            try:
                graph, stream = self.make_graph(fn, reps)
            except Exception:  # noqa: BLE001, S112 - some library calls cannot be captured
                continue  # timed plainly, as set above
            streams[name] = stream
            runners[name] = (lambda g=graph, s=stream: g.launch(s))
            modes[name], reps_of[name] = f"graph x{reps} (L2 warm after the first)", reps
        return runners, modes, reps_of, streams

    def _batch(self, runners: dict[str, Callable[[], Any]], streams: dict[str, Any], p: Protocol,
               hook: Callable[[str], Any]) -> list[tuple[str, Any, Any]]:
        """One batch of samples, interleaved: (name, start event, end event) per timed call,
        each after the hook and an L2 flush (or a busy kernel), events not yet synchronised."""
        cp = self.cp
        batch: list[tuple[str, Any, Any]] = []
        for _ in range(p.batch):
            for name, run in runners.items():
                stream = streams.get(name)
                if stream is None:
                    hook(name)
                (self.flush if p.cold_l2 else self.busy)()  # cold: an L2 flush; warm: busy
                start, end = cp.cuda.Event(), cp.cuda.Event()
                if stream is not None:  # graph replays run on their own stream
                    start.record(cp.cuda.get_current_stream())
                    stream.wait_event(start)
                    run()
                    end.record(stream)
                    cp.cuda.get_current_stream().wait_event(end)
                else:
                    start.record()
                    run()
                    end.record()
                batch.append((name, start, end))
        return batch

    def measure(self, fns: dict[str, Callable[[], Any]], protocol: Protocol | None = None,
                graphable: tuple[str, ...] = ("candidate",),
                before: Callable[[str], Any] | None = None) -> Measurement:
        """Time each function by the protocol, interleaving them sample by sample so that a
        candidate and its baseline see the same clocks, temperature and neighbours. Only the
        functions named in `graphable` (raw kernel launches, which allocate nothing) may be
        captured into CUDA graphs; library calls are always timed with plain events.

        `before(name)` (the cascade's input rotation and output poisoning) is queued before
        every warm-up call and every event-timed sample, ahead of the L2 flush and the start
        event, so it is outside the timed window. A graph replays the launches it captured:
        the hook runs once, before the capture, and never between replays."""
        cp = self.cp
        p = protocol or Protocol()
        hook = before or (lambda name: None)
        for name, fn in fns.items():
            for _ in range(p.warmup):
                hook(name)
                fn()
        cp.cuda.Device().synchronize()
        runners, modes, reps_of, streams = self._runners(fns, p, graphable, hook)
        samples: dict[str, list[float]] = {n: [] for n in fns}
        rule = StopRule(p)
        discarded = kept_throttled = 0
        retakes = 0  # of the current batch: reset once a batch is kept
        seen: set[str] = set()
        clocks: list[float] = []
        while True:
            before = self.throttle_snapshot()
            batch = self._batch(runners, streams, p, hook)
            cp.cuda.Device().synchronize()
            after = self.throttle_snapshot()
            reasons = throttled_between(before, after)
            seen.update(reasons)
            if reasons and retakes < p.max_throttle_retakes:
                discarded += len(batch)
                retakes += 1
                time.sleep(0.05)
                continue
            if reasons:
                kept_throttled += len(batch)
            retakes = 0
            if after.sm_clock_mhz is not None:
                clocks.append(after.sm_clock_mhz)
            for name, start, end in batch:
                samples[name].append(cp.cuda.get_elapsed_time(start, end) / reps_of[name])
            done, why = rule.done(samples)
            if done:
                break
        return Measurement(stats={n: summarize(v) for n, v in samples.items()}, samples=samples,
                           stop_reason=why, mode=modes,
                           cache="cold" if p.cold_l2 else "warm",
                           discarded_throttled=discarded, throttle_seen=sorted(seen),
                           batch_sm_clock_mhz=clocks, kept_throttled=kept_throttled)
