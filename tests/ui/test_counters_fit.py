"""The run's counters read whole at 1366x768 (after looking at the playback
screenshot: 'Best 4.004 ms' was cut by '1.40× vs first' beside it). The speedup's basis is in
the counter's name, so its value stays short."""

from __future__ import annotations


def test_counters_are_not_clipped_at_1366x768(qtbot, window, replay_goal, run_headless):
    window.resize(1366, 740)
    window.fit_docks()
    run_id = run_headless(window.store(), replay_goal(max_evals=40))
    assert window.play_back_run(run_id, per_second=100)
    qtbot.waitUntil(lambda: len(window.live.data) >= 10, timeout=10_000)
    window.live.redraw()
    qtbot.wait(50)
    live = window.live
    assert live.counter_names["speedup"].text() == "Speedup vs first"
    assert live.counters["speedup"].text().endswith("×")
    for key, label in live.counters.items():
        assert label.width() >= label.sizeHint().width(), (key, label.text(), label.width())
    qtbot.waitUntil(lambda: not window.playing_back, timeout=20_000)
