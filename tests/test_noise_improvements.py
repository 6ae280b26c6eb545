"""A new best counts as an improvement only when its p10-p90 range clears the best it replaced
(app.core.noise), and the window's buffers count the same way live and when a stored run is
reopened or a best revoked."""

from __future__ import annotations

import pytest

from app.core.noise import ImprovementCount, clear_of_noise, new_bests, spread_of
from app.core.types import Evaluation
from app.ui.buffers import RunData


def _ev(value, spread=None, agent="a", ok=True, key=None):
    metrics = {} if spread is None else {"spread": spread}
    return Evaluation(ok=ok, value=value if ok else None, agent=agent, metrics=metrics, config={},
                      key=key or f"k{value}-{agent}-{spread}", reason=None if ok else "compile")


# ---- the predicate -------------------------------------------------------------------------
def test_no_spread_means_every_strict_gain_is_clear():
    assert clear_of_noise(9.99, 0.0, 10.0, 0.0, minimize=True)
    assert clear_of_noise(10.01, 0.0, 10.0, 0.0, minimize=False)


def test_equal_values_are_never_clear():
    assert not clear_of_noise(10.0, 0.0, 10.0, 0.0, minimize=True)
    assert not clear_of_noise(10.0, 0.0, 10.0, 0.0, minimize=False)


def test_a_gain_inside_the_spread_is_not_clear_minimize():
    # 1.01x on figures spread ±62 %: the ranges overlap widely
    assert not clear_of_noise(9.9, 1.24, 10.0, 1.24, minimize=True)
    # 10 ±1 % vs 8 ±1 %: apart
    assert clear_of_noise(8.0, 0.02, 10.0, 0.02, minimize=True)


def test_touching_ranges_overlap():
    assert not clear_of_noise(8.0, 0.25, 10.0, 0.2, minimize=True)  # 8*1.125 == 10*0.9
    assert not clear_of_noise(12.0, 0.0, 10.0, 0.4, minimize=False)  # 10*1.2 == 12


def test_maximize_uses_the_upper_end_of_the_old_range():
    assert clear_of_noise(130.0, 0.1, 100.0, 0.1, minimize=False)   # 123.5 > 105
    assert not clear_of_noise(108.0, 0.1, 100.0, 0.1, minimize=False)  # 102.6 < 105
    assert not clear_of_noise(90.0, 0.0, 100.0, 0.0, minimize=False)   # worse is never clear


def test_one_sided_spread_counts():
    assert not clear_of_noise(9.0, 0.0, 10.0, 0.4, minimize=True)  # old range reaches 8
    assert not clear_of_noise(9.0, 0.4, 10.0, 0.0, minimize=True)  # new range reaches 10.8


def test_nothing_to_beat_is_clear():
    assert clear_of_noise(10.0, 5.0, None, 0.0, minimize=True)


@pytest.mark.parametrize("metrics, expected", [
    (None, 0.0), ({}, 0.0), ({"spread": None}, 0.0), ({"spread": "x"}, 0.0),
    ({"spread": float("nan")}, 0.0), ({"spread": -0.2}, 0.0), ({"spread": 0.3}, 0.3)])
def test_spread_of_reads_only_a_usable_figure(metrics, expected):
    assert spread_of(metrics) == expected


def test_new_bests_flags_each_against_the_best_it_replaced():
    history = [_ev(10.0, 0.02), _ev(None, ok=False), _ev(9.9, 0.02), _ev(12.0, 0.02),
               _ev(8.0, 1.24, agent="b"), _ev(4.9, 1.24), _ev(4.9, 0.0)]
    bests = new_bests(history, minimize=True)
    assert [(b.row, b.agent, b.clear) for b in bests] == [
        (0, "a", True), (2, "a", False), (4, "b", False), (5, "a", False)]
    count = ImprovementCount.of(bests)
    assert (count.clear, count.within) == (1, 3)
    assert count.sentence().startswith("improvements: 1 clear of the timing noise, 3 more")
    assert ImprovementCount(4, 0).sentence() == "improvements: 4 clear of the timing noise"


def test_new_bests_without_spreads_is_todays_count():
    history = [_ev(v) for v in (10.0, 11.0, 9.0, 9.0, 8.0)]
    assert [b.clear for b in new_bests(history, minimize=True)] == [True, True, True]


# ---- the window's buffers ----------------------------------------------------------------
def _history():
    return [_ev(10.0, 0.05, "explorer"), _ev(9.8, 0.05, "local"), _ev(6.0, 0.05, "evolution"),
            _ev(None, ok=False, agent="local"), _ev(5.9, 1.2, "local"), _ev(2.0, 0.05, "explorer")]


def test_buffers_count_only_improvements_clear_of_the_noise():
    d = RunData(minimize=True)
    d.add([(i + 1, e, float(i)) for i, e in enumerate(_history())])
    assert len(d.improvements) == 5  # every new best still steps the staircase
    assert d.improvement_count == ImprovementCount(clear=3, within=2)
    assert d.clear_by_agent == {"explorer": 2, "evolution": 1}


def test_a_reopened_run_counts_as_the_live_one_did():
    live = RunData(minimize=True)
    for i, e in enumerate(_history()):  # one event at a time, as the bridge delivers them
        live.add([(i + 1, e, float(i))])
    reopened = RunData(minimize=True)
    reopened.add([(i + 1, e, float(i)) for i, e in enumerate(_history())])
    reopened._rebest()  # recomputed from the stored rows
    assert reopened.improvement_count == live.improvement_count
    assert reopened.clear_by_agent == live.clear_by_agent
    assert reopened.improvements == live.improvements


def test_a_revoked_best_is_recounted_against_the_best_before_it():
    d = RunData(minimize=True)
    d.add([(i + 1, e, float(i)) for i, e in enumerate(_history())])
    assert d.revoke(_history()[2].key, "wrong")  # the 6.0 goes: 5.9 ±60 % now clears 9.8 ±2.5 %
    assert d.improvement_count == ImprovementCount(clear=3, within=1)
    history = [e for e in _history()]
    history[2] = _ev(None, ok=False, agent="evolution")
    assert d.improvement_count == ImprovementCount.of(new_bests(history, minimize=True))


def test_buffers_maximize():
    d = RunData(minimize=False)
    d.add([(1, _ev(100.0, 0.1), 0.0), (2, _ev(104.0, 0.1), 1.0), (3, _ev(130.0, 0.1), 2.0)])
    assert d.improvement_count == ImprovementCount(clear=2, within=1)
