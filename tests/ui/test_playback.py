"""A stored run played back at a watchable pace (a replay finishes in under 3 s, too
fast to watch): the points arrive a few at a time, then the run's summary as opened."""

from __future__ import annotations

import time


def test_a_run_plays_back_at_its_pace(qtbot, window, replay_goal, run_headless):
    run_id = run_headless(window.store(), replay_goal(max_evals=30))
    window.history.refresh()
    window._update_actions()
    assert window.playback_menu.isEnabled() is False or window.current_run_id is None
    window.open_run(run_id)
    window._update_actions()
    assert window.playback_menu.isEnabled()
    started = time.monotonic()
    assert window.play_back_run(per_second=20)
    assert window.live.title.text().startswith("Playing back at 20 evaluations/s: ")
    qtbot.wait(600)
    shown = len(window.live.data)
    assert 0 < shown < 30, shown  # a few at a time, not all at once
    qtbot.waitUntil(lambda: not window.playing_back, timeout=10_000)
    assert time.monotonic() - started >= 1.2  # 30 evaluations at 20 per second
    assert len(window.live.data) == 30 and window.table.model.rowCount() == 30
    assert "playing back" not in window.live.title.text().lower()
    assert window.live.summary_panel.summary is not None


def test_the_slowest_pace_is_the_pace_it_names(qtbot, window, replay_goal, run_headless):
    """5 evaluations per second drew one per 100 ms tick: twice the pace the title named."""
    run_id = run_headless(window.store(), replay_goal(max_evals=12))
    started = time.monotonic()
    assert window.play_back_run(run_id, per_second=5)
    assert window.live.title.text().startswith("Playing back at 5 evaluations/s: ")
    qtbot.waitUntil(lambda: not window.playing_back, timeout=20_000)
    assert time.monotonic() - started >= 2.2  # 12 at 5 per second: 2.4 s (it took 1.2 s)
