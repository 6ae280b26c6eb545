"""An engine process that dies mid-run: the window says so and the run is recorded as failed
with the reason (not left 'running', to be reaped later as 'interrupted' with no word)."""

from __future__ import annotations

import os
import signal

from app.store import Store


def test_a_killed_engine_is_shown_and_recorded(qtbot, window, replay_goal):
    goal = replay_goal(max_evals=100_000, name="engine killed mid-run")
    failures = []
    window.controller.failed.connect(failures.append)
    window._start(goal, None, f"{goal.name} — starting…")
    qtbot.waitUntil(lambda: len(window.live.data) >= 20, timeout=60_000)
    run_id = window.current_run_id
    os.kill(window.controller._engine.process.pid, signal.SIGKILL)
    qtbot.waitUntil(lambda: bool(failures), timeout=30_000)

    assert "ended unexpectedly" in failures[0]
    assert "failed" in window.live.title.text()
    assert window.controller.state == "idle"
    with Store(window.db_path) as store:
        run = store.get_run(run_id)
    assert run["status"] == "failed" and "ended unexpectedly" in run["message"]
    assert run["evaluations"] >= 20
