"""Pause, resume and stop from the toolbar reach the engine process."""

from __future__ import annotations

import time


def test_pause_holds_the_run_and_resume_finishes_it(qtbot, window, replay_goal):
    window.form.set_goal(replay_goal(max_evals=3000))
    qtbot.waitUntil(lambda: window.act_run.isEnabled(), timeout=3000)
    window.run_goal()
    qtbot.waitUntil(lambda: len(window.live.data) >= 20, timeout=30000)

    window.act_pause.trigger()
    assert window.controller.state == "paused"
    time.sleep(0.5)  # evaluations already under way may still arrive
    qtbot.wait(300)
    held = len(window.live.data)
    qtbot.wait(1000)
    assert len(window.live.data) == held  # nothing new while paused
    assert held < 3000

    window.act_pause.trigger()
    assert window.controller.state == "running"
    qtbot.waitUntil(lambda: len(window.live.data) > held, timeout=30000)

    with qtbot.waitSignal(window.controller.finished, timeout=60000) as finished:
        window.act_stop.trigger()
    assert finished.args[0].reason == "stopped"
    assert window.controller.state == "idle"
