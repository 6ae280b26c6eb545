"""Harness timing statistics: percentiles, interleaving, adaptive sample count, budget."""

from __future__ import annotations

import itertools
import time

from app.gpu.timing import SETTLE_WARM_S, TimingSettings, summarize, time_interleaved


def test_summary_statistics():
    s = summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert s.median_ms == 3.0
    assert 1.0 < s.p10_ms < 2.0 and 4.0 < s.p90_ms < 5.0
    assert abs(s.spread - (s.p90_ms - s.p10_ms) / 3.0) < 1e-12


def test_interleaved_rounds_rotate_the_order():
    calls: list[str] = []
    fns = {n: (lambda n=n: calls.append(n)) for n in ("a", "b", "c")}
    time_interleaved(fns, TimingSettings(warmup=0, min_samples=3, max_samples=3))
    assert calls == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]


def test_sampling_stops_early_when_the_spread_is_small():
    # a target spread any measurement meets: sampling stops at the minimum count
    fns = {"steady": lambda: time.sleep(0.002)}
    stats = time_interleaved(fns, TimingSettings(warmup=0, min_samples=4, max_samples=50,
                                                 target_spread=100.0))
    assert len(stats["steady"].samples_ms) == 4
    assert stats["steady"].median_ms >= 2.0


def test_noisy_functions_get_more_samples_up_to_the_cap():
    state = {"i": 0}

    def noisy():
        state["i"] += 1
        time.sleep(0.0005 if state["i"] % 2 else 0.004)

    stats = time_interleaved({"noisy": noisy}, TimingSettings(warmup=0, min_samples=3,
                                                             max_samples=12, target_spread=0.01))
    assert len(stats["noisy"].samples_ms) == 12


def test_time_budget_bounds_the_measurement():
    t0 = time.perf_counter()
    stats = time_interleaved({"slow": lambda: time.sleep(0.05)},
                             TimingSettings(warmup=0, min_samples=10, max_samples=100,
                                            target_spread=0.0, max_seconds=0.2))
    assert time.perf_counter() - t0 < 1.0
    assert 3 <= len(stats["slow"].samples_ms) < 10


def test_harness_time_includes_the_whole_call():
    stats = time_interleaved({"sleep": lambda: time.sleep(0.01)},
                             TimingSettings(warmup=0, min_samples=3, max_samples=3))
    assert stats["sleep"].median_ms >= 10.0


def test_before_hook_runs_before_every_call_outside_the_timed_window():
    events = []

    def before(name):
        events.append(("before", name))
        time.sleep(0.02)  # would dominate the samples if it were inside the timed window

    fns = {"a": lambda: events.append(("call", "a")), "b": lambda: events.append(("call", "b"))}
    stats = time_interleaved(fns, TimingSettings(warmup=1, min_samples=3, max_samples=4,
                                                 max_seconds=5.0), before=before)
    calls = [i for i, e in enumerate(events) if e[0] == "call"]
    assert calls and all(events[i - 1] == ("before", events[i][1]) for i in calls)
    assert all(s.median_ms < 10.0 for s in stats.values())


def test_timed_slots_rotate_perturb_poison_and_catch_stale_outputs():
    import numpy as np

    from app.catalog import get_operator
    from app.gpu.timed_slots import TimedSlots
    from app.gpu.verify import tolerance_for

    op = get_operator("cpu", "transpose")
    shape = (8, 12)
    stale: dict = {}

    def make_calls(inputs, outputs):
        x, y = inputs["x"], outputs["out"]

        def cached():  # keyed on the input pointer: the first result, forever
            key = x.ctypes.data
            stale.setdefault(key, x.T.copy())
            y.view[...] = stale[key]
        return {"candidate": cached}

    slots = TimedSlots(np, op, shape, "float32", 3, make_calls)
    calls, picked = slots.calls(), []
    for _ in range(12):
        slots.before("candidate")
        picked.append(slots.current["candidate"])
        assert np.isnan(slots.slots[picked[-1]].outputs["out"].view).all()  # poisoned
        calls["candidate"]()
    assert all(a != b for a, b in itertools.pairwise(picked))  # never the same slot twice in a row
    assert set(picked) == {0, 1, 2}
    problem = slots.check(tolerance_for(op, shape, "float32"))
    assert problem and "outside tolerance" in problem


def test_settle_lets_the_previous_contestants_threads_sleep_and_wakes_the_next():
    """settle_s: when the contestant changes, a pause, then untimed calls of the next one (its
    before hook too) for SETTLE_WARM_S, then its timed call; never between two calls of the
    same one."""
    events: list[tuple[str, str, float]] = []

    def fn(name: str):
        def call() -> None:
            time.sleep(0.0002)  # so SETTLE_WARM_S, not the call cap, ends the untimed calls
            events.append(("call", name, time.perf_counter()))
        return call

    settings = TimingSettings(warmup=1, min_samples=3, max_samples=3, target_spread=1.0,
                              settle_s=0.05)
    stats = time_interleaved({"a": fn("a"), "b": fn("b")}, settings,
                             before=lambda n: events.append(("before", n, time.perf_counter())))
    assert all(len(s.samples_ms) == 3 for s in stats.values())
    calls = [(n, t) for kind, n, t in events if kind == "call"]
    switches = [i for i in range(1, len(calls)) if calls[i][0] != calls[i - 1][0]]
    assert switches, "the two contestants alternate"
    befores = [t for kind, _, t in events if kind == "before"]  # one before each call, in order
    for i in switches:  # the pause, then the same contestant for SETTLE_WARM_S (untimed), timed
        assert calls[i][1] - calls[i - 1][1] >= 0.05
        run = next((j for j in range(i, len(calls)) if calls[j][0] != calls[i][0]), len(calls))
        # untimed calls from the start of the first to the end of the last span SETTLE_WARM_S
        # (measured from the first one's start: a call slowed by a busy machine only adds)
        assert run - i >= 2 and calls[run - 2][1] - befores[i] >= SETTLE_WARM_S - 0.002
    for i in range(1, len(calls)):
        if i not in switches:  # no pause within one contestant's calls
            assert calls[i][1] - calls[i - 1][1] < 0.05
    kinds = [k for k, _, _ in events]
    assert all(kinds[j] == "before" for j in range(0, len(kinds), 2))  # before every call
    # without settle_s the calls simply alternate
    events.clear()
    time_interleaved({"a": fn("a"), "b": fn("b")},
                     TimingSettings(warmup=1, min_samples=3, max_samples=3, target_spread=1.0))
    assert len([e for e in events if e[0] == "call"]) == 2 + 6


def test_after_the_pause_an_idle_core_is_woken_before_the_timed_call(monkeypatch):
    """A kernel whose cores went idle during the pause is slow for the first ~10 ms after it
    (a VM's vCPU here: two calls of 7.5 and 4 ms instead of 0.05 ms). The timed figure must be
    of the work, not of the wake-up; one untimed call is not enough."""
    from app.gpu import timing

    state = {"last": 0.0, "woke": 0.0}

    def kernel() -> None:
        now = time.perf_counter()
        if now - state["last"] > 0.05:  # had been idle: waking up takes 10 ms
            state["woke"] = now
        if now - state["woke"] < 0.010:
            time.sleep(0.004)
        time.sleep(0.0003)
        state["last"] = time.perf_counter()

    def measure() -> float:
        settings = TimingSettings(warmup=1, min_samples=3, max_samples=3, target_spread=1.0,
                                  settle_s=0.1)
        return time_interleaved({"k": kernel, "other": lambda: None}, settings)["k"].median_ms

    assert measure() < 2.0
    monkeypatch.setattr(timing, "SETTLE_WARM_MAX_CALLS", 1)  # one untimed call only
    assert measure() > 3.5
