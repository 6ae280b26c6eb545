"""End to end: a replay run through RunSession, checked in the database against the recorded
space it replays."""

from __future__ import annotations

import sqlite3

from app.goal import Goal
from app.gpu.replay import load_cache_file
from app.session import RunSession
from app.store import Store


def test_replay_run_is_recorded_in_the_database(tmp_db, small_goal_file, small_space):
    goal = Goal.load(small_goal_file)
    with Store(tmp_db) as store:
        session = RunSession(goal, store=store)
        result = session.run()
        run_id = session.run_id
    assert result.evaluations == goal.stop.max_evals

    # Read back with plain sqlite3, as any other tool would.
    conn = sqlite3.connect(tmp_db)
    conn.row_factory = sqlite3.Row
    run = conn.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
    assert run["status"] == "finished" and run["reason"] == "max_evals"
    rows = conn.execute("SELECT e.*, c.config FROM evaluations e JOIN candidates c "
                        "ON c.id = e.candidate_id WHERE run_id = ? ORDER BY idx", (run_id,)).fetchall()
    assert [r["idx"] for r in rows] == list(range(1, goal.stop.max_evals + 1))
    assert len({r["key"] for r in rows}) == len(rows)  # nothing evaluated twice

    # Every stored measurement is the recorded one for that configuration.
    import json

    recorded = load_cache_file(small_space)
    space = recorded.space()
    for r in rows:
        rec = recorded.records[space.as_tuple(json.loads(r["config"]))]
        if r["ok"]:
            assert r["value"] == rec["time"]
        else:
            assert isinstance(rec["time"], str)

    # Convergence can be redrawn: best-so-far is the running minimum, time never goes back.
    best = None
    for r in rows:
        if r["ok"]:
            best = r["value"] if best is None else min(best, r["value"])
        assert r["best_so_far"] == best
    elapsed = [r["elapsed_s"] for r in rows]
    assert elapsed == sorted(elapsed) and elapsed[-1] > 0
    assert result.best.value == best
    agents = {r["agent"] for r in rows}
    assert agents <= set(goal.swarm.agents) | {"coordinator"} and len(agents) >= 2
