"""The engine in its own process, as the desktop app drives it (no Qt here)."""

from __future__ import annotations

import os
import signal

import pytest

from app.core.events import Evaluated
from app.core.messages import EngineDone, EngineFailed, EnginePrepared, Stop
from app.engine_process import EngineProcess
from app.goal import Goal, StopRules, SwarmSettings
from app.gpu.cpu import find_compiler
from app.store import Store


def replay_goal(max_evals: int) -> Goal:
    return Goal(name="engine process", space="pnpoly_RTX_3090.json.gz",
                stop=StopRules(max_evals=max_evals),
                swarm=SwarmSettings(agents=["explorer", "local"], workers=1, seed=2))


def test_a_run_streams_its_events_and_commits_them(tmp_db):
    engine = EngineProcess(replay_goal(40), str(tmp_db), None)
    engine.start()
    events = []
    messages = list(engine.messages(events.append))
    assert [type(m) for m in messages] == [EnginePrepared, EngineDone]
    run_id = messages[0].run_id
    result = messages[1].result
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
    assert isinstance(messages[-1], EngineFailed)
    assert "no_such_space.json.gz" in messages[-1].message


def test_stop_command_ends_the_run_with_work_kept(tmp_db):
    engine = EngineProcess(replay_goal(100_000), str(tmp_db), None)
    engine.start()
    seen = []

    def on_event(e):
        seen.append(e)
        if isinstance(e, Evaluated) and e.index == 50:
            engine.send(Stop())

    messages = list(engine.messages(on_event))
    assert isinstance(messages[-1], EngineDone) and messages[-1].result.reason == "stopped"
    with Store(tmp_db) as store:
        assert len(store.load_evaluations(messages[0].run_id)) == messages[-1].result.evaluations >= 50


def test_an_engine_that_dies_is_reported(tmp_db):
    engine = EngineProcess(replay_goal(100_000), str(tmp_db), None)
    engine.start()

    def on_event(e):
        if isinstance(e, Evaluated) and e.index == 20:
            os.kill(engine.process.pid, signal.SIGKILL)

    messages = list(engine.messages(on_event))
    assert isinstance(messages[-1], EngineFailed) and "ended unexpectedly" in messages[-1].message


def cpu_goal(max_evals: int) -> Goal:
    return Goal(name="engine process cpu", backend="cpu", operator="softmax", shapes=[[16, 80]],
                stop=StopRules(max_evals=max_evals),
                swarm=SwarmSettings(agents=["explorer"], workers=1, seed=1))


@pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")
@pytest.mark.slow
def test_a_cpu_goal_runs_in_the_engine_process(tmp_db):
    """The CPU backend starts worker processes of its own: the engine may not be a daemon."""
    engine = EngineProcess(cpu_goal(3), str(tmp_db), None)
    engine.start()
    events = []
    messages = list(engine.messages(events.append))
    assert [type(m) for m in messages] == [EnginePrepared, EngineDone], messages
    assert messages[0].device.kind == "cpu" and messages[1].result.evaluations == 3
    assert engine.join(30)
    with Store(tmp_db) as store:
        run = store.get_run(messages[0].run_id)
    assert run["status"] == "finished" and run["evaluations"] == 3


def test_a_run_that_fails_while_starting_records_why(tmp_db):
    """A session that fails after creating its run (the CPU backend's workers failing to start
    did) never returns its id: the engine's store remembers it, and the run is closed as
    failed with the message the window shows, not left 'running' to be reaped as
    'interrupted' with no reason. A run that already ended keeps its own end."""
    from app.engine_process import _EngineStore, _record_failure

    store = _EngineStore(tmp_db)
    try:
        run_id = store.create_run(replay_goal(10), {"kind": "replay"})
        assert store.created_run_id == run_id
        _record_failure(store, store.created_run_id, "AssertionError: no children")
        run = store.get_run(run_id)
        assert (run["status"], run["message"]) == ("failed", "AssertionError: no children")
        _record_failure(store, run_id, "a later message")
        assert store.get_run(run_id)["message"] == "AssertionError: no children"
    finally:
        store.close()


def test_an_engine_whose_window_dies_stops_by_itself(tmp_db):
    """The engine is not a daemon: when its parent's end of the pipe closes it stops the run
    (keeping what was measured) and exits."""
    engine = EngineProcess(replay_goal(100_000), str(tmp_db), None)
    engine.start()
    seen = []

    def on_event(e):
        seen.append(e)
        if isinstance(e, Evaluated) and e.index == 20:
            engine._commands.close()  # as when the window's process dies

    messages = list(engine.messages(on_event))
    assert isinstance(messages[-1], EngineDone) and messages[-1].result.reason == "stopped"
    assert engine.join(30)


PARENT = """
import sys, time
from app.engine_process import EngineProcess
from app.goal import Goal, StopRules, SwarmSettings

if __name__ == "__main__":
    goal = Goal(name="orphan", space="pnpoly_RTX_3090.json.gz", stop=StopRules(max_evals=100_000),
                swarm=SwarmSettings(agents=["explorer", "local"], workers=1, seed=2))
    engine = EngineProcess(goal, sys.argv[1], None)
    engine.start()
    print(engine.process.pid, flush=True)
    for message in engine.messages(lambda e: None):
        pass
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie has ended
        return f.read().split(")")[-1].split()[0] != "Z"


def test_an_engine_whose_window_process_is_killed_stops_and_exits(tmp_db, tmp_path):
    """The window's process dies without a word (SIGKILL): the engine, not a daemon, notices,
    stops the run keeping what it measured, and exits."""
    import subprocess
    import sys
    import time

    from project_paths import ROOT

    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen([sys.executable, str(script), str(tmp_db)], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    engine_pid = 0
    try:
        engine_pid = int(parent.stdout.readline())
        deadline = time.monotonic() + 60
        while not tmp_db.exists() or _evaluations(tmp_db) < 20:
            assert time.monotonic() < deadline, "the engine made no progress"
            time.sleep(0.05)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 30
        while _alive(engine_pid):
            assert time.monotonic() < deadline, "the engine outlived its window"
            time.sleep(0.05)
    finally:
        parent.kill()
        if engine_pid and _alive(engine_pid):
            os.kill(engine_pid, signal.SIGKILL)
    with Store(tmp_db) as store:
        run = store.get_run(1)
    assert run["status"] == "stopped" and run["evaluations"] >= 20


def _evaluations(db) -> int:
    import sqlite3

    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        conn.close()


EXITING_PARENT = """
import sys, time
from app.engine_process import EngineProcess
from app.goal import Goal, StopRules, SwarmSettings

if __name__ == "__main__":
    goal = Goal(name="exit", space="pnpoly_RTX_3090.json.gz", stop=StopRules(max_evals=100_000),
                swarm=SwarmSettings(agents=["explorer", "local"], workers=1, seed=2))
    engine = EngineProcess(goal, sys.argv[1], None)
    engine.start()
    next(engine.messages(lambda e: None))  # prepared: the run exists
    time.sleep(1)
    sys.exit(0)  # without stopping the engine nor reading its messages
"""


@pytest.mark.slow
def test_the_window_process_exits_while_an_engine_runs(tmp_db, tmp_path):
    """multiprocessing joins non-daemon children at exit: the engine is stopped first, so the
    app's exit never hangs on a run, and the run is stored stopped."""
    import subprocess
    import sys

    from project_paths import ROOT

    script = tmp_path / "parent.py"
    script.write_text(EXITING_PARENT)
    done = subprocess.run([sys.executable, str(script), str(tmp_db)], cwd=ROOT, timeout=60,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    with Store(tmp_db) as store:
        assert store.get_run(1)["status"] == "stopped"


def test_a_terminal_ctrl_c_does_not_kill_the_engine(tmp_db):
    """Ctrl-C in the terminal that started the app reaches the engine too (same process
    group): the window decides when the run stops, so the engine ignores it."""
    engine = EngineProcess(replay_goal(100_000), str(tmp_db), None)
    engine.start()

    def on_event(e):
        if isinstance(e, Evaluated) and e.index == 20:
            os.kill(engine.process.pid, signal.SIGINT)
        if isinstance(e, Evaluated) and e.index == 60:
            engine.send(Stop())

    messages = list(engine.messages(on_event))
    assert isinstance(messages[-1], EngineDone), messages[-1]
    assert messages[-1].result.reason == "stopped" and messages[-1].result.evaluations >= 60
