"""The history database: schema and migrations, refusing files that are not ours, per-evaluation
commits, resume history, validation cases, thread safety."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
import threading

import pytest

import app.store.schema as store_schema
from app.core.events import (
    AgentCredit,
    Evaluated,
    EventBus,
    LessonLearned,
    RunFinished,
    RunStarted,
    Telemetry,
)
from app.core.types import Evaluation, Lesson, Stage
from app.goal import Goal
from app.store import SCHEMA_VERSION, Store, StoreError, UnknownRunError, goal_key


def _goal(**kw) -> Goal:
    return Goal(name=kw.pop("name", "g"), space="pnpoly_RTX_3090.json.gz", **kw)


def _evaluation(i: int, ok: bool = True, **kw) -> Evaluation:
    return Evaluation(key=f"key{i}", config={"x": i, "y": "a"}, ok=ok,
                      value=float(100 - i) if ok else None, agent="local",
                      reason=None if ok else "compile_failed", **kw)


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_fresh_database_has_current_schema_in_wal_mode(tmp_db):
    with Store(tmp_db) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert {"projects", "goals", "runs", "candidates", "evaluations", "lessons", "telemetry",
                "validation_cases", "llm_requests"} <= set(store.db.table_names())


def test_migrations_upgrade_an_older_database_keeping_its_data(tmp_db, monkeypatch):
    with Store(tmp_db) as store:
        run_id = store.create_run(_goal(), {"name": "replay"})
        store.record_evaluation(run_id, 1, _evaluation(1), 0.5, 99.0)
    extra = "ALTER TABLE runs ADD COLUMN note TEXT NOT NULL DEFAULT 'migrated';"
    monkeypatch.setattr(store_schema, "MIGRATIONS", store_schema.MIGRATIONS + [extra])
    monkeypatch.setattr(store_schema, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with Store(tmp_db) as store:
        assert store.schema_version == SCHEMA_VERSION + 1
        assert store.get_run(run_id)["note"] == "migrated"
        assert len(store.load_evaluations(run_id)) == 1


def test_a_failing_migration_rolls_back_and_leaves_the_version(tmp_db, monkeypatch):
    Store(tmp_db).close()
    monkeypatch.setattr(store_schema, "MIGRATIONS",
                        store_schema.MIGRATIONS + ["CREATE TABLE half (x INTEGER); SELECT nope FROM nowhere;"])
    monkeypatch.setattr(store_schema, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with pytest.raises(StoreError, match="cannot upgrade"):
        Store(tmp_db)
    conn = sqlite3.connect(tmp_db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'half'").fetchone()[0] == 0


def test_newer_schema_is_refused_untouched(tmp_db):
    with Store(tmp_db) as store:
        store.create_run(_goal(), {})
    conn = sqlite3.connect(tmp_db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 3}")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    before = _digest(tmp_db)
    with pytest.raises(StoreError, match="newer") as err:
        Store(tmp_db)
    assert str(tmp_db) in str(err.value)
    assert _digest(tmp_db) == before


def test_non_sqlite_file_is_refused_untouched(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("these are my notes, not a database\n" * 10)
    before = _digest(path)
    with pytest.raises(StoreError, match="not a SQLite database"):
        Store(path)
    assert _digest(path) == before


def test_corrupt_database_is_reported(tmp_path):
    path = tmp_path / "corrupt.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 4000)
    with pytest.raises(StoreError, match="corrupt|damaged"):
        Store(path)


def test_unknown_run_is_named(tmp_db):
    with Store(tmp_db) as store:
        with pytest.raises(UnknownRunError, match="no run 42"):
            store.get_run(42)
        with pytest.raises(UnknownRunError):
            store.subscriber(42)


def test_evaluation_round_trips_every_field(tmp_db):
    e = Evaluation(key="k1", config={"bx": 64, "flag": True}, ok=True, value=1.5, agent="model",
                   source="__global__ void k() {}", parent_key="k0", time_ms=1.5,
                   samples_ms=[1.4, 1.5, 1.6], p10_ms=1.4, p90_ms=1.6,
                   stages=[Stage("compile", True, 0.2, "nvrtc"), Stage("time", True, 0.1)],
                   resources={"registers": 32}, metrics={"GB/s": 812.0}, log="ok", sim_seconds=0.3,
                   detail="fine")
    with Store(tmp_db) as store:
        run_id = store.create_run(_goal(), {"name": "replay: X"})
        store.record_evaluation(run_id, 1, e, 0.3, 1.5)
    with Store(tmp_db) as store:
        [(index, loaded, elapsed)] = store.load_evaluations(run_id)
    assert (index, elapsed) == (1, 0.3)
    assert loaded == e


def test_subscriber_records_a_run_from_its_events(tmp_db):
    goal = _goal()
    with Store(tmp_db) as store:
        run_id = store.create_run(goal, {"name": "replay"})
        bus = EventBus()
        bus.subscribe(store.subscriber(run_id), critical=True)
        bus.publish(RunStarted(goal_name="g", backend="replay", agents=["local"], max_evals=3,
                               time_budget_s=None, baseline_value=120.0, run_id=run_id))
        best = None
        for i in (1, 2, 3):
            e = _evaluation(i, ok=i != 2, failing_case={"seed": 7} if i == 2 else None)
            best = e.value if e.ok and (best is None or e.value < best) else best
            bus.publish(Evaluated(index=i, evaluation=e, elapsed_s=i * 0.5, best_value=best,
                                  run_id=run_id))
        bus.publish(LessonLearned(lesson=Lesson("failure_region", "x=2 fails", {"x": 2}), run_id=run_id))
        bus.publish(Telemetry(device="gpu0", readings={"temp_c": 61.0}, run_id=run_id))
        bus.publish(AgentCredit(credits={"local": {"evaluated": 3}}, run_id=run_id))
        bus.publish(Evaluated(index=9, evaluation=_evaluation(9), elapsed_s=9, best_value=1,
                              run_id=run_id + 1))  # another run's event: ignored
        bus.publish(RunFinished(reason="max_evals", evaluations=3, best=None, elapsed_s=1.5,
                                run_id=run_id))
        run = store.get_run(run_id)
        assert run["status"] == "finished" and run["reason"] == "max_evals"
        assert run["evaluations"] == 3 and run["succeeded"] == 2
        assert run["best_value"] == 97.0 and run["best_key"] == "key3"
        assert run["baseline_value"] == 120.0 and run["credits"] == {"local": {"evaluated": 3}}
        assert [r[3] for r in store.convergence(run_id)] == [99.0, 99.0, 97.0]
        assert store.lessons(goal)[0]["text"] == "x=2 fails"
        assert store.telemetry(run_id)[0]["readings"] == {"temp_c": 61.0}
        assert store.validation_cases(goal) == [{"seed": 7}]


def test_validation_cases_belong_to_the_goal_and_dedupe(tmp_db):
    goal = _goal(name="first name")
    renamed = _goal(name="renamed, bigger budget")
    renamed.stop.max_evals = 999
    other = Goal(name="g", space="gemm_RTX_3090.json.gz")
    assert goal_key(goal) == goal_key(renamed) != goal_key(other)
    with Store(tmp_db) as store:
        store.add_validation_case(goal, {"shape": [17, 3], "seed": 1})
        store.add_validation_case(renamed, {"seed": 1, "shape": [17, 3]})
        assert store.validation_cases(renamed) == [{"shape": [17, 3], "seed": 1}]
        assert store.validation_cases(other) == []


def test_finish_reasons_map_to_statuses(tmp_db):
    with Store(tmp_db) as store:
        for reason, status in [("plateau", "finished"), ("stopped", "stopped"), ("error", "failed")]:
            run_id = store.create_run(_goal(), {})
            store.finish_run(run_id, reason, message="m")
            assert store.get_run(run_id)["status"] == status


def test_run_of_a_dead_process_becomes_interrupted(tmp_db):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with Store(tmp_db) as store:
        run_id = store.create_run(_goal(), {})
        store.conn.execute("UPDATE runs SET pid = ? WHERE id = ?", (dead.pid, run_id))
        assert store.get_run(run_id)["status"] == "running"
    with Store(tmp_db) as store:
        assert store.get_run(run_id)["status"] == "interrupted"
        store.mark_running(run_id)  # resuming it in this process
        assert store.get_run(run_id)["status"] == "running"


def test_concurrent_writers_lose_nothing(tmp_db):
    with Store(tmp_db) as store:
        run_id = store.create_run(_goal(), {})

        def write(t: int) -> None:
            for i in range(40):
                n = t * 100 + i
                store.record_evaluation(run_id, n, _evaluation(n), float(n), None)
                if i % 10 == 0:
                    store.add_telemetry(run_id, "gpu", {"t": float(i)})

        threads = [threading.Thread(target=write, args=(t,)) for t in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        rows = store.load_evaluations(run_id)
    assert len(rows) == 240 and len({e.key for _, e, _ in rows}) == 240
    assert [i for i, _, _ in rows] == sorted(i for i, _, _ in rows)


def test_a_duplicate_index_is_refused_and_keeps_the_first(tmp_db):
    with Store(tmp_db) as store:
        run_id = store.create_run(_goal(), {})
        store.record_evaluation(run_id, 1, _evaluation(1), 0.1, None)
        with pytest.raises(sqlite3.IntegrityError):
            store.record_evaluation(run_id, 1, _evaluation(2), 0.2, None)
        [(_, e, _)] = store.load_evaluations(run_id)
        assert e.key == "key1"
        # the failed transaction rolled back completely: no orphan candidate row
        assert store.conn.execute("SELECT COUNT(*) FROM candidates").fetchone()[0] == 1
