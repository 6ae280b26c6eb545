"""What the store offers the rest of the app instead of SQL: the llm_requests migration, LLM
usage, the one-query run listing, deleting runs, projects, prior knowledge for a goal, and the
event recorder. All on real SQLite files."""

from __future__ import annotations

import os
import socket
import sqlite3
import time

import pytest

from app.core.events import Evaluated, EventBus, LessonLearned, RunFinished, RunStarted
from app.core.types import Evaluation, Lesson
from app.goal import Goal, Objective
from app.llm.client import RequestRecord
from app.llm.lessons import LLM_KINDS, load_prior
from app.llm.usage import UsageLog, run_usage
from app.store import MIGRATIONS, SCHEMA_VERSION, Store, StoreError, UnknownRunError, goal_key
from app.store.recorder import Recorder

# The table exactly as app/llm/usage.py created it itself, before it became migration 2.
OLD_USAGE_TABLE = """
CREATE TABLE IF NOT EXISTS llm_requests (
    id INTEGER PRIMARY KEY,
    run_id INTEGER,
    agent TEXT NOT NULL,
    model TEXT NOT NULL,
    status TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL,
    cost REAL NOT NULL,
    seconds REAL NOT NULL,
    finish_reason TEXT NOT NULL DEFAULT '',
    usage_estimated INTEGER NOT NULL DEFAULT 0,
    outcome TEXT NOT NULL DEFAULT '',
    error TEXT NOT NULL DEFAULT '',
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS llm_requests_run ON llm_requests(run_id);
"""


def _goal(**kw) -> Goal:
    return Goal(name=kw.pop("name", "g"), space="pnpoly_RTX_3090.json.gz", **kw)


def _evaluation(i: int, ok: bool = True, value: float | None = None, **kw) -> Evaluation:
    return Evaluation(key=f"key{i}", config={"x": i}, ok=ok,
                      value=(float(100 - i) if value is None else value) if ok else None,
                      agent="local", reason=None if ok else "compile_failed", **kw)


def _record(**kw) -> RequestRecord:
    base = {"agent": "llm-a", "model": "m", "status": "ok", "attempt": 1, "prompt_tokens": 100,
            "completion_tokens": 20, "cost": 0.5, "seconds": 1.0}
    return RequestRecord(**{**base, **kw})


def _version_1_database(path, status: str = "finished") -> int:
    """A history as release 1 wrote it (its schema, rows in its layout): one run of _goal()
    with one evaluation. Returns the run's id."""
    conn = sqlite3.connect(path)
    conn.executescript(MIGRATIONS[0])
    goal = _goal()
    conn.execute("INSERT INTO goals (project_id, key, name, toml, created_at) "
                 "VALUES (1, ?, ?, ?, 0)", (goal_key(goal), goal.name, goal.to_toml()))
    run_id = conn.execute(
        "INSERT INTO runs (project_id, goal_id, goal_toml, name, backend, status, device, "
        "started_at, pid, host) VALUES (1, 1, ?, ?, ?, ?, '{\"name\": \"cpu\"}', 0, ?, ?)",
        (goal.to_toml(), goal.name, goal.backend, status, os.getpid(),
         socket.gethostname())).lastrowid
    conn.execute("INSERT INTO candidates (goal_id, key, config, created_at) "
                 "VALUES (1, 'key1', '{}', 0)")
    conn.execute("INSERT INTO evaluations (run_id, idx, candidate_id, key, ok, value, elapsed_s, "
                 "created_at) VALUES (?, 1, 1, 'key1', 1, 99.0, 0.5, 0)", (run_id,))
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    return run_id


# ---- migration 2: llm_requests ------------------------------------------------------------
def test_a_version_1_database_with_the_old_usage_table_upgrades_keeping_every_row(tmp_db):
    run_id = _version_1_database(tmp_db)
    # What the previous usage.py did beside it: its own table, on its own connection.
    conn = sqlite3.connect(tmp_db)
    conn.executescript(OLD_USAGE_TABLE)
    conn.executemany(
        "INSERT INTO llm_requests (run_id, agent, model, status, attempt, prompt_tokens, "
        "completion_tokens, cost, seconds, outcome, at) VALUES (?, ?, 'm', ?, 1, ?, ?, ?, 1, "
        "'candidate k', 0)",
        [(run_id, "llm-a", "ok", 100, 10, 0.25), (run_id, "llm-b", "timeout", 50, 0, 0.0)])
    conn.commit()
    conn.close()

    with Store(tmp_db) as store:
        assert store.schema_version == SCHEMA_VERSION
        usage = store.llm_usage(run_id)
        assert (usage["requests"], usage["prompt_tokens"], usage["completion_tokens"]) == (2, 150, 10)
        assert usage["by_status"] == {"ok": 1, "timeout": 1}
        assert usage["by_agent"]["llm-a"] == {"requests": 1, "tokens": 110, "cost": 0.25}
        run = store.get_run(run_id)
        assert (run["status"], run["evaluations"], run["best_value"]) == ("finished", 1, 99.0)
        store.record_llm_request(run_id, agent="llm-a", model="m", status="ok", attempt=1,
                                 prompt_tokens=1, completion_tokens=1, cost=0.0, at=1.0)
        assert store.llm_usage(run_id)["requests"] == 3


def test_a_version_1_database_without_usage_gains_the_table(tmp_db):
    run_id = _version_1_database(tmp_db, status="running")
    with Store(tmp_db) as store:
        assert store.schema_version == SCHEMA_VERSION
        names = {r[0] for r in store.conn.execute("SELECT name FROM sqlite_master")}
        assert {"llm_requests", "llm_requests_run"} <= names
        assert store.llm_usage(run_id)["requests"] == 0
        assert store.get_run(run_id)["status"] == "running"


# ---- LLM usage --------------------------------------------------------------------------
def test_usage_log_records_through_the_store_and_totals_per_run(tmp_db):
    with Store(tmp_db) as store:
        a = store.create_run(_goal(), {})
        b = store.create_run(_goal(name="other"), {})
        log = UsageLog(store, a)  # an open store stays open
        log.record(_record(), "candidate k1")
        log.record(_record(agent="llm-b", status="rate_limited", prompt_tokens=0,
                           completion_tokens=0, cost=0.0, error="x" * 5000), "retried")
        log.close()
        by_path = UsageLog(tmp_db, b)  # a path: its own store, closed with it
        by_path.record(_record(cost=2.0))
        by_path.close()
        usage = store.llm_usage(a)
        assert usage["requests"] == 2 and usage["cost"] == 0.5
        assert usage["by_status"] == {"ok": 1, "rate_limited": 1}
        assert usage["by_agent"]["llm-b"]["tokens"] == 0
        assert run_usage(tmp_db, b)["cost"] == 2.0 and run_usage(store, b)["requests"] == 1
        errors = [len(e) for (e,) in store.conn.execute("SELECT error FROM llm_requests")]
        assert max(errors) == 1000  # truncated by the log, as before
        assert store.llm_usage(999)["requests"] == 0


# ---- listing runs ---------------------------------------------------------------------------
def _statements(store: Store) -> list[str]:
    seen: list[str] = []
    store.conn.set_trace_callback(seen.append)
    return seen


def test_list_runs_matches_get_run_for_chains_and_both_directions(tmp_db):
    with Store(tmp_db) as store:
        first = store.create_run(_goal(), {})
        for i in (1, 2):
            store.record_evaluation(first, i, _evaluation(i), float(i), None)
        store.finish_run(first, "stopped")
        second = store.create_run(_goal(), {}, resumed_from=first)
        store.record_evaluation(second, 3, _evaluation(3, value=10.0), 3.0, None)
        store.record_evaluation(second, 4, _evaluation(4, ok=False), 4.0, None)
        third = store.create_run(_goal(), {}, resumed_from=second)
        maxi = store.create_run(_goal(name="max", objective=Objective("throughput")), {})
        store.record_evaluation(maxi, 1, _evaluation(1, value=5.0), 1.0, None)
        store.record_evaluation(maxi, 2, _evaluation(2, value=7.0), 2.0, None)
        empty = store.create_run(_goal(name="empty"), {})
        listed = store.list_runs()
        assert [r["id"] for r in listed] == [empty, maxi, third, second, first]
        for run in listed:
            full = store.get_run(run["id"])
            for k in ("evaluations", "best_value", "own_evaluations", "succeeded", "name",
                      "status", "resumed_from", "project_id", "goal_id", "goal_key"):
                assert run[k] == full[k], (run["id"], k)
            assert run["project"] == "default"
        by_id = {r["id"]: r for r in listed}
        assert (by_id[third]["evaluations"], by_id[third]["own_evaluations"]) == (4, 0)
        assert by_id[third]["best_value"] == 10.0 and by_id[maxi]["best_value"] == 7.0
        assert by_id[empty]["evaluations"] == 0 and by_id[empty]["best_value"] is None
        assert [r["id"] for r in store.list_runs(limit=2)] == [empty, maxi]


def test_listing_1000_runs_is_one_query_and_instant(tmp_db):
    n = 1000
    with Store(tmp_db) as store:
        goal_id = store.run_goal(store.create_run(_goal(), {}))[0]
        # Bulk rows straight into the file (creating them one transaction at a time is not
        # what is measured); every 10th run continues the one before it.
        now = time.time()
        store.conn.execute("BEGIN")
        store.conn.executemany(
            "INSERT INTO runs (project_id, goal_id, goal_toml, name, backend, status, "
            "started_at, resumed_from) VALUES (1, ?, '', 'g', 'replay', 'finished', ?, ?)",
            [(goal_id, now, i if i % 10 == 0 else None) for i in range(1, n)])
        store.conn.execute("INSERT INTO candidates (goal_id, key, config, created_at) "
                           "VALUES (?, 'k', '{}', 0)", (goal_id,))
        store.conn.executemany(
            "INSERT INTO evaluations (run_id, idx, candidate_id, key, ok, value, elapsed_s, "
            "created_at) VALUES (?, ?, 1, 'k', 1, ?, 0, 0)",
            [(r, i, float(r + i)) for r in range(1, n + 1) for i in range(1, 6)])
        store.conn.execute("COMMIT")

        seen = _statements(store)
        t0 = time.perf_counter()
        runs = store.list_runs()
        elapsed = time.perf_counter() - t0
        store.conn.set_trace_callback(None)
        assert len(runs) == n
        assert len(seen) == 1, seen  # one statement, not one (or three) per run
        assert elapsed < 2.0, elapsed  # sanity bound, far above the ~tens of ms it takes
        by_id = {r["id"]: r for r in runs}
        assert by_id[11]["evaluations"] == 10 and by_id[11]["best_value"] == 11.0  # 10 + 1
        assert by_id[12]["evaluations"] == 5 and by_id[12]["best_value"] == 13.0
        for rid in (1, 11, 500, n):
            full = store.get_run(rid)
            assert (by_id[rid]["evaluations"], by_id[rid]["best_value"]) == \
                (full["evaluations"], full["best_value"])


# ---- deleting runs, projects --------------------------------------------------------------
def test_delete_run_removes_what_only_it_owns(tmp_db):
    with Store(tmp_db) as store:
        keep = store.create_run(_goal(), {})
        store.record_evaluation(keep, 1, _evaluation(1), 1.0, None)
        gone = store.create_run(_goal(), {})
        store.record_evaluation(gone, 1, _evaluation(2), 1.0, None)
        store.add_lesson(gone, Lesson("kind", "text", {}, "local"))
        store.add_telemetry(gone, "cpu", {"temp": 50.0})
        store.record_llm_request(gone, agent="llm", model="m", status="ok", attempt=1)
        store.delete_run(gone)
        with pytest.raises(UnknownRunError):
            store.get_run(gone)
        assert [r["id"] for r in store.list_runs()] == [keep]
        for table in ("evaluations", "lessons", "telemetry", "llm_requests"):
            rows = store.conn.execute(f"SELECT COUNT(*) FROM {table} WHERE run_id = ?",
                                      (gone,)).fetchone()[0]
            assert rows == 0, table
        # the goal's candidates stay for later runs
        assert store.conn.execute("SELECT COUNT(*) FROM candidates").fetchone()[0] == 2
        assert store.get_run(keep)["evaluations"] == 1
        with pytest.raises(UnknownRunError):
            store.delete_run(gone)
        with pytest.raises(UnknownRunError):
            store.subscriber(gone)


def test_a_continued_run_is_not_deleted_before_its_follower(tmp_db):
    with Store(tmp_db) as store:
        first = store.create_run(_goal(), {})
        store.finish_run(first, "stopped")
        second = store.create_run(_goal(), {}, resumed_from=first)
        with pytest.raises(StoreError, match=f"continued by run {second}"):
            store.delete_run(first)
        assert store.get_run(first)["status"] == "stopped"
        store.delete_run(second)
        store.delete_run(first)
        assert store.list_runs() == []


def test_projects(tmp_db):
    with Store(tmp_db) as store:
        assert store.projects() == {1: "default"}


# ---- prior knowledge for a goal -----------------------------------------------------------
def test_prior_knowledge_of_same_and_similar_goals(tmp_db):
    same = Goal(name="a", operator="vector_add", backend="cpu", shapes=[[1024]])
    similar = Goal(name="b", operator="vector_add", backend="cpu", shapes=[[4096]])
    other = Goal(name="c", operator="gemm", backend="cpu", shapes=[[64, 64, 64]])
    with Store(tmp_db) as store:
        runs = {}
        for name, goal in (("same", same), ("similar", similar), ("other", other)):
            rid = runs[name] = store.create_run(goal, {})
            for i, value in enumerate((3.0, 1.0, 2.0), start=1):
                store.record_evaluation(rid, i, _evaluation(i, value=value,
                                                            source=f"// {name} {i}"), i, None)
            store.add_lesson(rid, Lesson(LLM_KINDS[0], f"{name} lesson", {}, "llm"))
            store.add_lesson(rid, Lesson("local", f"{name} not for llm", {}, "local"))
        same_id = store.run_goal(runs["same"])[0]
        assert {g["id"] for g in store.goals()} == {store.run_goal(r)[0] for r in runs.values()}
        assert store.goal_lessons(same_id, LLM_KINDS) == ["same lesson"]
        assert store.goal_lessons(same_id) == ["same not for llm", "same lesson"]  # newest first
        best = store.best_kernels(same_id, 2)
        assert [(k["source"], k["value"]) for k in best] == [("// same 2", 1.0), ("// same 3", 2.0)]
        assert best[0]["config"] == {"x": 2}

        prior = load_prior(store, same, max_kernels=4)
    assert prior.lessons == ["same lesson", "(similar goal) similar lesson"]
    assert [(k["source"], k["same_goal"]) for k in prior.kernels] == [
        ("// same 2", True), ("// same 3", True), ("// same 1", True), ("// similar 2", False)]
    by_path = load_prior(tmp_db, same, max_kernels=4)
    assert by_path.lessons == prior.lessons and by_path.kernels == prior.kernels
    assert load_prior(tmp_db.parent / "none.sqlite", same).kernels == []
    assert not (tmp_db.parent / "none.sqlite").exists()


# ---- the event recorder ---------------------------------------------------------------------
def test_recorder_turns_events_into_rows_and_ignores_other_runs(tmp_db):
    with Store(tmp_db) as store:
        run_id = store.create_run(_goal(), {})
        other = store.create_run(_goal(), {})
        bus = EventBus()
        bus.subscribe(Recorder(store, run_id), critical=True)
        bus.publish(RunStarted("g", "replay", ["local"], 10, None, run_id=run_id,
                                baseline_value=5.0, limit_value=1.0))
        bus.publish(Evaluated(run_id=run_id, index=1, evaluation=_evaluation(1), elapsed_s=0.5,
                              best_value=99.0))
        bus.publish(Evaluated(run_id=other, index=1, evaluation=_evaluation(2), elapsed_s=0.5,
                              best_value=98.0))
        bus.publish(LessonLearned(run_id=run_id, lesson=Lesson("k", "t", {}, "local")))
        bus.publish(RunFinished("max_evals", 1, None, 1.0, run_id=run_id))
        run = store.get_run(run_id)
        assert (run["status"], run["evaluations"], run["baseline_value"]) == ("finished", 1, 5.0)
        assert store.get_run(other)["evaluations"] == 0
        assert [lesson["text"] for lesson in store.lessons(run_id=run_id)] == ["t"]
        with pytest.raises(UnknownRunError):
            Recorder(store, 12345)
