"""The engine in its own process, as the desktop app drives it (no Qt here)."""

from __future__ import annotations

import os
import signal

from app.engine_process import EngineProcess
from app.goal import Goal, StopRules, SwarmSettings
from app.store import Store
from app.core.events import Evaluated


def replay_goal(max_evals: int) -> Goal:
    return Goal(name="engine process", space="pnpoly_RTX_3090.json.gz",
                stop=StopRules(max_evals=max_evals),
                swarm=SwarmSettings(agents=["explorer", "local"], workers=1, seed=2))


def test_a_run_streams_its_events_and_commits_them(tmp_db):
    engine = EngineProcess(replay_goal(40), str(tmp_db), None)
    engine.start()
    events = []
    messages = list(engine.messages(events.append))
    assert [m[0] for m in messages] == ["prepared", "done"]
    run_id = messages[0][1]
    result = messages[1][1]
    evaluated = [e for e in events if isinstance(e, Evaluated)]
    assert [e.index for e in evaluated] == list(range(1, 41)) and result.evaluations == 40
    assert engine.join(10)
    with Store(tmp_db) as store:
        stored = store.load_evaluations(run_id)
    assert [e.key for _, e, _ in stored] == [e.evaluation.key for e in evaluated]


def test_a_goal_that_cannot_start_is_reported_not_raised(tmp_db):
    goal = replay_goal(10)
    goal.space = "no_such_space.json.gz"
    engine = EngineProcess(goal, str(tmp_db), None)
    engine.start()
    messages = list(engine.messages(lambda e: None))
    assert messages[-1][0] == "error" and "no_such_space.json.gz" in messages[-1][1]


def test_stop_command_ends_the_run_with_work_kept(tmp_db):
    engine = EngineProcess(replay_goal(100_000), str(tmp_db), None)
    engine.start()
    seen = []

    def on_event(e):
        seen.append(e)
        if isinstance(e, Evaluated) and e.index == 50:
            engine.send("stop")

    messages = list(engine.messages(on_event))
    assert messages[-1][0] == "done" and messages[-1][1].reason == "stopped"
    with Store(tmp_db) as store:
        assert len(store.load_evaluations(messages[0][1])) == messages[-1][1].evaluations >= 50


def test_an_engine_that_dies_is_reported(tmp_db):
    engine = EngineProcess(replay_goal(100_000), str(tmp_db), None)
    engine.start()

    def on_event(e):
        if isinstance(e, Evaluated) and e.index == 20:
            os.kill(engine.process.pid, signal.SIGKILL)

    messages = list(engine.messages(on_event))
    assert messages[-1][0] == "error" and "ended unexpectedly" in messages[-1][1]
