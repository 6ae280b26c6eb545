"""A reopened run's agent chart has the rows the live run showed: the adversary's
row comes from the run's AgentCredit, not from its evaluations, and reopening from History
dropped it. Here a real replay run is recorded, then given the adversary's credit through
the recorder as a CPU run's coordinator publishes it; the window's live chart, given the
same event, and the reopened and played-back charts must agree row for row."""

from __future__ import annotations

from app.core.events import AgentCredit
from app.store import Store
from app.store.recorder import subscriber

# AdversaryDriver.credits() as a short CPU run (cpu_transpose, 8 evaluations) recorded it
ADVERSARY = {"proposed": 24.0, "evaluated": 0.0, "probes": 4.0, "failed": 0.0,
             "improvements": 2.0, "share": 0.08, "time_share": 0.066, "seconds": 3.3,
             "cases": 2.0, "dethroned": 0.0, "time_budget": 1.0}


def _recorded_run(window, replay_goal, run_headless) -> tuple[int, AgentCredit]:
    with Store(window.db_path) as store:
        run_id = run_headless(store, replay_goal(max_evals=12))
        credits = dict(store.get_run(run_id)["credits"], adversary=ADVERSARY)
        event = AgentCredit(credits=credits, run_id=run_id)
        subscriber(store, run_id)(event)  # as the coordinator's last credit is recorded
    return run_id, event


def _live_rows(window, run_id: int, event: AgentCredit) -> dict:
    """The live chart: the run's evaluations as they streamed in, then its credit."""
    with Store(window.db_path) as store:
        rows = store.load_evaluations(run_id)
    window.live.reset(minimize=True, title="live", unit="ms")
    window.live.preload(rows)
    window.live.on_credit(event)
    window.live.redraw()
    return dict(window.live.agents.shares)


def test_reopened_chart_keeps_the_adversary_row(qtbot, window, replay_goal, run_headless):
    run_id, event = _recorded_run(window, replay_goal, run_headless)
    live = _live_rows(window, run_id, event)
    assert "adversary (2 cases)" in live and round(live["adversary (2 cases)"][0], 1) == 6.6
    window.open_run(run_id)
    window.live.redraw()
    assert window.live.agents.shares == live  # same rows, same order, same figures


def test_played_back_chart_keeps_it_too(qtbot, window, replay_goal, run_headless):
    run_id, event = _recorded_run(window, replay_goal, run_headless)
    live = _live_rows(window, run_id, event)
    assert window.play_back_run(run_id, per_second=100)
    qtbot.waitUntil(lambda: not window.playing_back, timeout=30_000)
    window.live.redraw()
    assert window.live.agents.shares == live
