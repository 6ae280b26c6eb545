"""The run history: one SQLite file (WAL mode) read and written through sqlite-utils.

Writes go through one connection guarded by a lock, each in its own short transaction, so an
evaluation is on disk before the coordinator accepts the next result: a run killed with SIGKILL
loses nothing it had already reported, and `--resume` continues from exactly there. Every Store
of a process on one file shares that connection (app.store.connection: why, and SQLite's list of
ways to corrupt a database with how each is closed here).
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any, Self

from app import __version__
from app.core.events import Event
from app.core.types import Evaluation, Lesson, Stage
from app.goal import Goal, GoalError
from app.store import cases, connection, llm_usage
from app.store.connection import StoreError, check_file, pid_alive
from app.store.identity import goal_family, goal_key
from app.store.recorder import subscriber as _subscriber

__all__ = ["STATUSES", "DatabaseError", "Store", "StoreError", "UnknownRunError", "check_file",
           "goal_family", "goal_key"]

STATUSES = ("running", "finished", "stopped", "interrupted", "failed")
# How a coordinator's stop reason maps onto a run's status.
_STATUS_OF_REASON = {"stopped": "stopped", "error": "failed", "interrupted": "interrupted"}
# Tables whose rows belong to one run (deleted with it); candidates belong to the goal and stay.
_RUN_TABLES = ("evaluations", "lessons", "telemetry", "llm_requests")
# What any sqlite failure raises: callers outside the store catch it without importing sqlite3.
DatabaseError = sqlite3.Error


class UnknownRunError(StoreError, KeyError):
    def __str__(self) -> str:  # KeyError would quote the message
        return self.args[0] if self.args else "unknown run"


def _json(v: Any) -> str:
    if is_dataclass(v) and not isinstance(v, type):
        v = asdict(v)
    return json.dumps(v, sort_keys=True, default=str)


class Store:
    """KernelSwarm's history database. Thread-safe. Any number may be opened on one file in one
    process: they share its one connection, and closing one leaves the others open."""

    def __init__(self, path: str | Path | None = None) -> None:
        if path is None:
            from app.paths import default_db_path

            path = default_db_path()
        self.path = Path(path).expanduser()
        self._closed = False
        self._shared = connection.acquire(self.path)

    # ---- the shared connection --------------------------------------------------------------
    def _live(self) -> connection.Shared:
        if self._closed:
            raise StoreError(f"history database {str(self.path)!r} was closed")
        if self._shared.pid != os.getpid():  # a forked child: never the parent's connection
            self._shared = connection.acquire(self.path)
        return self._shared

    @property
    def conn(self) -> sqlite3.Connection:
        return self._live().conn

    @property
    def db(self) -> Any:
        """The connection as a sqlite_utils.Database."""
        return self._live().db

    @property
    def _lock(self) -> Any:
        return self._live().lock

    @property
    def _goal_ids(self) -> dict[int, tuple[int, str]]:
        return self._live().goal_ids

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: committed on success, rolled back on any error."""
        shared = self._live()
        with shared.lock:
            shared.conn.execute("BEGIN IMMEDIATE")
            try:
                yield shared.conn
            except BaseException:
                shared.conn.execute("ROLLBACK")
                raise
            else:
                shared.conn.execute("COMMIT")

    def close(self) -> None:
        """Done with the history; the process's connection closes with its last Store."""
        if not self._closed:
            self._closed = True
            connection.release(self._shared)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        with self._lock:
            return self.conn.execute("PRAGMA user_version").fetchone()[0]

    # ---- goals and runs -------------------------------------------------------------------
    def _goal_id(self, c: sqlite3.Connection, goal: Goal, key: str) -> int:
        row = c.execute("SELECT id FROM goals WHERE key = ?", (key,)).fetchone()
        if row:
            return row[0]
        project = c.execute("SELECT id FROM projects WHERE name = 'default'").fetchone()[0]
        return c.execute("INSERT INTO goals (project_id, key, name, toml, created_at, family) "
                         "VALUES (?, ?, ?, ?, ?, ?)",
                         (project, key, goal.name, goal.to_toml(), time.time(),
                          goal_family(goal))).lastrowid

    def create_run(self, goal: Goal, device: dict | Any = None,
                   resumed_from: int | None = None) -> int:
        """Record a new run of `goal` (status running) and return its id. `resumed_from` names
        the run it continues; its evaluations become this run's history."""
        if resumed_from is not None:
            prev = self.get_run(resumed_from)
            if prev["status"] == "running" and prev["host"] == socket.gethostname() \
                    and pid_alive(prev["pid"]) and prev["pid"] != os.getpid():
                raise StoreError(f"run {resumed_from} is still running (process {prev['pid']}); "
                                 "stop it before resuming")
        key = goal_key(goal)
        with self._tx() as c:
            goal_id = self._goal_id(c, goal, key)
            project = c.execute("SELECT project_id FROM goals WHERE id = ?", (goal_id,)).fetchone()[0]
            run_id = c.execute(
                "INSERT INTO runs (project_id, goal_id, goal_toml, goal_path, name, backend, "
                "minimize, status, seed, device, started_at, resumed_from, pid, host, app_version) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, ?, ?)",
                (project, goal_id, goal.to_toml(), goal.source_path, goal.name, goal.backend,
                 int(goal.objective.minimize), goal.swarm.seed, _json(device or {}), time.time(),
                 resumed_from, os.getpid(), socket.gethostname(), __version__)).lastrowid
        self._goal_ids[run_id] = (goal_id, key)
        return run_id

    def mark_running(self, run_id: int) -> None:
        """This process now runs `run_id` (a new run, or an interrupted one being resumed).
        Refuses a run that another live process is still running."""
        with self._tx() as c:
            row = c.execute("SELECT status, pid, host FROM runs WHERE id = ?", (run_id,)).fetchone()
            if row is None:
                raise UnknownRunError(f"no run {run_id} in {self.path}")
            status, pid, host = row
            if status == "running" and host == socket.gethostname() and pid != os.getpid() \
                    and pid_alive(pid):
                raise StoreError(f"run {run_id} is still running (process {pid}); stop it first")
            c.execute("UPDATE runs SET status = 'running', reason = NULL, finished_at = NULL, "
                      "pid = ?, host = ? WHERE id = ?", (os.getpid(), socket.gethostname(), run_id))

    def run_goal(self, run_id: int) -> tuple[int, str]:
        """(goal id, goal key) of a run; UnknownRunError if there is no such run."""
        if run_id not in self._goal_ids:
            with self._lock:
                row = self.conn.execute(
                    "SELECT goals.id, goals.key FROM runs JOIN goals ON goals.id = runs.goal_id "
                    "WHERE runs.id = ?", (run_id,)).fetchone()
            if row is None:
                raise UnknownRunError(f"no run {run_id} in {self.path}")
            self._goal_ids[run_id] = (row[0], row[1])
        return self._goal_ids[run_id]

    def set_run_info(self, run_id: int, *, baseline_value: float | None = None,
                     limit_value: float | None = None, credits: dict | None = None,
                     device: dict | None = None) -> None:
        updates = {"baseline_value": baseline_value, "limit_value": limit_value,
                   "credits": None if credits is None else _json(credits),
                   "device": None if device is None else _json(device)}
        updates = {k: v for k, v in updates.items() if v is not None}
        if not updates:
            return
        sets = ", ".join(f"{k} = ?" for k in updates)
        with self._tx() as c:
            c.execute(f"UPDATE runs SET {sets} WHERE id = ?", (*updates.values(), run_id))

    def finish_run(self, run_id: int, reason: str, best: Evaluation | None = None,
                   elapsed_s: float | None = None, message: str = "") -> None:
        """Close a run: status from the stop reason (stopped, error -> failed, otherwise
        finished)."""
        del best  # the best is derived from the evaluations, which are already stored
        status = _STATUS_OF_REASON.get(reason, "finished")
        with self._tx() as c:
            c.execute("UPDATE runs SET status = ?, reason = ?, message = ?, finished_at = ?, "
                      "elapsed_s = COALESCE(?, elapsed_s) WHERE id = ?",
                      (status, reason, message, time.time(), elapsed_s, run_id))

    def chain(self, run_id: int) -> list[int]:
        """The run ids this run continues, oldest first, ending with `run_id`."""
        ids: list[int] = []
        current: int | None = run_id
        with self._lock:
            while current is not None and current not in ids:
                row = self.conn.execute("SELECT resumed_from FROM runs WHERE id = ?",
                                        (current,)).fetchone()
                if row is None:
                    raise UnknownRunError(f"no run {current} in {self.path}")
                ids.append(current)
                current = row[0]
        return ids[::-1]

    def get_run(self, run_id: int) -> dict[str, Any]:
        """The run's row plus its goal, evaluation counts and best value (over the whole
        chain of runs it resumed)."""
        with self._lock:
            rows = list(self.db.query(
                "SELECT runs.*, goals.key AS goal_key FROM runs "
                "JOIN goals ON goals.id = runs.goal_id WHERE runs.id = ?", [run_id]))
            if not rows:
                raise UnknownRunError(f"no run {run_id} in {self.path}")
            run = rows[0]
            run["device"] = json.loads(run["device"] or "{}")
            run["credits"] = json.loads(run["credits"] or "{}")
            chain = self.chain(run_id)
            marks = ",".join("?" * len(chain))
            agg = "MIN" if run["minimize"] else "MAX"
            stats = self.conn.execute(
                f"SELECT COUNT(*), SUM(ok), {agg}(value), SUM(run_id = ?) FROM evaluations "
                f"WHERE run_id IN ({marks})", (run_id, *chain)).fetchone()
            run["evaluations"], ok, run["best_value"], own = stats
            run["succeeded"] = ok or 0
            run["own_evaluations"] = own or 0
            best = self.conn.execute(
                f"SELECT key FROM evaluations WHERE run_id IN ({marks}) AND ok = 1 "
                f"ORDER BY value {'ASC' if run['minimize'] else 'DESC'}, idx LIMIT 1",
                chain).fetchone()
            run["best_key"] = best[0] if best else None
            run["chain"] = chain
            return run

    def goal_of_run(self, run_id: int) -> Goal:
        run = self.get_run(run_id)
        try:
            return Goal.from_stored_toml(run["goal_toml"], source_path=run["goal_path"])
        except GoalError as exc:
            raise StoreError(f"run {run_id}: its stored goal no longer loads: {exc}") from None

    def list_runs(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Runs, newest first, with their project, goal, evaluation counts and best values
        (over the chain of runs each one resumed, as get_run counts them). One query however
        many runs there are: the History panel and `kernelswarm history` list thousands."""
        with self._lock:
            cursor = self.conn.execute(_LIST_RUNS, {"limit": int(limit) if limit else -1})
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def projects(self) -> dict[int, str]:
        """Project id -> name."""
        with self._lock:
            return dict(self.conn.execute("SELECT id, name FROM projects ORDER BY id").fetchall())

    def delete_run(self, run_id: int) -> None:
        """Delete a run and the rows only it owns, in one transaction. The goal and its
        candidates stay for later runs. A run that another run continues is refused: delete
        the follower first."""
        with self._tx() as c:
            if c.execute("SELECT 1 FROM runs WHERE id = ?", (run_id,)).fetchone() is None:
                raise UnknownRunError(f"no run {run_id} in {self.path}")
            follower = c.execute("SELECT MIN(id) FROM runs WHERE resumed_from = ?",
                                 (run_id,)).fetchone()[0]
            if follower is not None:
                raise StoreError(f"run {run_id} is continued by run {follower}; "
                                 "delete that run first")
            for table in _RUN_TABLES:
                c.execute(f"DELETE FROM {table} WHERE run_id = ?", (run_id,))
            c.execute("DELETE FROM runs WHERE id = ?", (run_id,))
        self._goal_ids.pop(run_id, None)

    # ---- evaluations ------------------------------------------------------------------------
    def record_evaluation(self, run_id: int, index: int, evaluation: Evaluation,
                          elapsed_s: float, best_so_far: float | None) -> None:
        """Commit one evaluation (and its candidate, and any failing input it found)."""
        goal_id, key = self.run_goal(run_id)
        e = evaluation
        now = time.time()
        with self._tx() as c:
            c.execute("INSERT OR IGNORE INTO candidates (goal_id, key, config, source, agent, "
                      "parent_key, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                      (goal_id, e.key, _json(e.config), e.source, e.agent, e.parent_key, now))
            cand = c.execute("SELECT id FROM candidates WHERE goal_id = ? AND key = ?",
                             (goal_id, e.key)).fetchone()[0]
            c.execute(
                "INSERT INTO evaluations (run_id, idx, candidate_id, key, agent, ok, value, reason,"
                " detail, time_ms, p10_ms, p90_ms, samples, stages, resources, metrics, "
                "failing_case, log, sim_seconds, elapsed_s, best_so_far, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, index, cand, e.key, e.agent, int(e.ok), e.value, e.reason, e.detail,
                 e.time_ms, e.p10_ms, e.p90_ms, _json(e.samples_ms),
                 _json([asdict(s) if is_dataclass(s) else s for s in e.stages]),
                 _json(e.resources), _json(e.metrics),
                 None if e.failing_case is None else _json(e.failing_case), e.log,
                 e.sim_seconds, elapsed_s, best_so_far, now))
            c.execute("UPDATE runs SET elapsed_s = ? WHERE id = ?", (elapsed_s, run_id))
            if e.failing_case is not None:
                cases.insert(c, key, e.failing_case, f"verification failure of candidate {e.key[:12]}")

    def revoke_evaluation(self, run_id: int, evaluation: Evaluation) -> None:
        """An accepted candidate failed re-verification later in the run: its stored
        evaluation becomes a failure with that reason (and the input that broke it)."""
        _, key = self.run_goal(run_id)
        runs = self.chain(run_id)
        e = evaluation
        with self._tx() as c:
            c.execute("UPDATE evaluations SET ok = 0, value = NULL, reason = ?, detail = ?, "
                      f"failing_case = ?, log = ? WHERE key = ? AND run_id IN ({','.join('?' * len(runs))})",
                      (e.reason, e.detail, None if e.failing_case is None else _json(e.failing_case),
                       e.log, e.key, *runs))
            if e.failing_case is not None:
                cases.insert(c, key, e.failing_case, f"re-verification of candidate {e.key[:12]}")

    def refresh_evaluation(self, run_id: int, evaluation: Evaluation) -> None:
        """A stored row re-checked on resume passed: its figures become the ones measured now
        (a shared history's stored figures are never what a run reports)."""
        runs = self.chain(run_id)
        e = evaluation
        with self._tx() as c:
            c.execute("UPDATE evaluations SET ok = 1, value = ?, reason = NULL, detail = ?, "
                      "time_ms = ?, p10_ms = ?, p90_ms = ?, samples = ?, stages = ?, resources = ?,"
                      " metrics = ?, log = ?, sim_seconds = ? "
                      f"WHERE key = ? AND run_id IN ({','.join('?' * len(runs))})",
                      (e.value, e.detail, e.time_ms, e.p10_ms, e.p90_ms, _json(e.samples_ms),
                       _json([asdict(s) if is_dataclass(s) else s for s in e.stages]),
                       _json(e.resources), _json(e.metrics), e.log, e.sim_seconds, e.key, *runs))

    def _chain_rows(self, run_id: int, own_only: bool) -> list[dict[str, Any]]:
        ids = [run_id] if own_only else self.chain(run_id)
        order = {rid: i for i, rid in enumerate(ids)}
        with self._lock:
            rows = list(self.db.query(
                "SELECT e.*, c.config, c.source, c.parent_key FROM evaluations e "
                "JOIN candidates c ON c.id = e.candidate_id "
                f"WHERE e.run_id IN ({','.join('?' * len(ids))})", ids))
        rows.sort(key=lambda r: (order[r["run_id"]], r["idx"]))
        return rows

    def load_evaluations(self, run_id: int, own_only: bool = False
                         ) -> list[tuple[int, Evaluation, float]]:
        """(index, evaluation, elapsed_s) in order: the history a resumed run starts from,
        including what the runs it continues had evaluated (unless `own_only`)."""
        return [(r["idx"], _evaluation(r), r["elapsed_s"]) for r in self._chain_rows(run_id, own_only)]

    def evaluation_rows(self, run_id: int, own_only: bool = False) -> list[dict[str, Any]]:
        """The evaluations as plain dicts (JSON decoded, plus index, run_id, elapsed_s and
        best_so_far), in order: for export and tables."""
        out = []
        for r in self._chain_rows(run_id, own_only):
            d = _evaluation(r).to_dict()
            d.update(index=r["idx"], run_id=r["run_id"], elapsed_s=r["elapsed_s"],
                     best_so_far=r["best_so_far"], created_at=r["created_at"])
            out.append(d)
        return out

    def convergence(self, run_id: int) -> list[tuple[int, float, float | None, float | None]]:
        """(index, elapsed_s, value, best_so_far) per evaluation: what a chart redraws from."""
        ids = self.chain(run_id)
        with self._lock:
            rows = self.conn.execute(
                "SELECT run_id, idx, elapsed_s, value, best_so_far FROM evaluations WHERE run_id IN "
                f"({','.join('?' * len(ids))})", ids).fetchall()
        order = {rid: i for i, rid in enumerate(ids)}
        rows.sort(key=lambda r: (order[r[0]], r[1]))
        return [(r[1], r[2], r[3], r[4]) for r in rows]

    # ---- lessons, telemetry, validation cases -------------------------------------------
    def add_lesson(self, run_id: int, lesson: Lesson) -> None:
        goal_id, _ = self.run_goal(run_id)
        with self._tx() as c:
            c.execute("INSERT INTO lessons (run_id, goal_id, kind, text, evidence, agent, "
                      "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                      (run_id, goal_id, lesson.kind, lesson.text, _json(lesson.evidence),
                       lesson.agent, time.time()))

    def lessons(self, goal: Goal | None = None, run_id: int | None = None) -> list[dict[str, Any]]:
        """Lessons learned, oldest first: all, those of a goal (any run), or of one run."""
        sql = ("SELECT l.run_id, l.kind, l.text, l.evidence, l.agent, l.created_at FROM lessons l "
               "JOIN goals g ON g.id = l.goal_id")
        args: list[Any] = []
        if goal is not None:
            sql += " WHERE g.key = ?"
            args.append(goal_key(goal))
        elif run_id is not None:
            sql += " WHERE l.run_id = ?"
            args.append(run_id)
        with self._lock:
            rows = list(self.db.query(sql + " ORDER BY l.id", args))
        for r in rows:
            r["evidence"] = json.loads(r["evidence"])
        return rows

    def add_telemetry(self, run_id: int, device: str, readings: dict[str, float],
                      at: float | None = None) -> None:
        with self._tx() as c:
            c.execute("INSERT INTO telemetry (run_id, at, device, readings) VALUES (?, ?, ?, ?)",
                      (run_id, at or time.time(), device, _json(readings)))

    def telemetry(self, run_id: int) -> list[dict[str, Any]]:
        with self._lock:
            rows = list(self.db.query("SELECT at, device, readings FROM telemetry WHERE run_id = ? "
                                      "ORDER BY at", [run_id]))
        for r in rows:
            r["readings"] = json.loads(r["readings"])
        return rows

    def add_validation_case(self, goal: Goal | str, case: dict, origin: str = "") -> int:
        """Keep an input that broke verification (or a user's): every later candidate of the
        same goal (a Goal or its key) is checked against it too. Adding the same case twice
        keeps one. Returns its id."""
        key = goal if isinstance(goal, str) else goal_key(goal)
        with self._tx() as c:
            return cases.insert(c, key, case, origin)

    def add_validation_cases(self, key: str, cases_: list[dict], origin: str) -> list[int]:
        """Several cases of a goal (by key) in one transaction: all kept, or none."""
        with self._tx() as c:
            return [cases.insert(c, key, case, origin) for case in cases_]

    def add_run_case(self, run_id: int, case: dict, origin: str) -> int:
        """A case a run found, kept with the run's goal; its id."""
        _, key = self.run_goal(run_id)
        return self.add_validation_case(key, case, origin)

    def validation_cases(self, goal: Goal) -> list[dict]:
        return [r["case"] for r in self.validation_case_rows(goal_key(goal))]

    def validation_case_rows(self, key: str) -> list[dict[str, Any]]:
        """A goal's cases by its key, oldest first: id, case, origin, created_at."""
        with self._lock:
            return cases.rows(self.conn, key)

    # ---- LLM requests -------------------------------------------------------------------
    def record_llm_request(self, run_id: int | None, *, agent: str, model: str, status: str,
                           attempt: int, prompt_tokens: int = 0, completion_tokens: int = 0,
                           cost: float = 0.0, seconds: float = 0.0, finish_reason: str = "",
                           usage_estimated: bool = False, outcome: str = "", error: str = "",
                           at: float | None = None) -> None:
        """Commit one LLM request attempt: its tokens, cost, status and what the reply became.
        Never pass the API key (error texts are redacted by the client)."""
        row = {"run_id": run_id, "agent": agent, "model": model, "status": status,
               "attempt": attempt, "prompt_tokens": prompt_tokens,
               "completion_tokens": completion_tokens, "cost": cost, "seconds": seconds,
               "finish_reason": finish_reason, "usage_estimated": int(usage_estimated),
               "outcome": outcome, "error": error, "at": time.time() if at is None else at}
        with self._tx() as c:
            llm_usage.insert_request(c, row)

    def llm_usage(self, run_id: int) -> dict[str, Any]:
        """Requests, prompt/completion tokens and cost of a run, by status and by agent."""
        with self._lock:
            return llm_usage.run_totals(self.conn, run_id)

    # ---- prior knowledge: what earlier runs of a goal learned -----------------------------
    def goals(self) -> list[dict[str, Any]]:
        """Every goal as first seen: id, key, family (app.store.identity.goal_family), name,
        toml; oldest first."""
        with self._lock:
            return list(self.db.query("SELECT id, key, family, name, toml FROM goals ORDER BY id"))

    def goal_lessons(self, goal_id: int, kinds: tuple[str, ...] | None = None) -> list[str]:
        """Texts of the lessons any run of a goal learned (of `kinds`, when given), newest
        first."""
        sql, args = "SELECT text FROM lessons WHERE goal_id = ?", [goal_id]
        if kinds:
            sql += f" AND kind IN ({','.join('?' * len(kinds))})"
            args.extend(kinds)
        with self._lock:
            return [t for (t,) in self.conn.execute(sql + " ORDER BY id DESC", args).fetchall()]

    def best_kernels(self, goal_id: int, limit: int = 3) -> list[dict[str, Any]]:
        """The best verified candidates with source of a goal over all its runs, best first:
        source, config (decoded) and value, in the direction of the goal's latest run."""
        with self._lock:
            row = self.conn.execute("SELECT minimize FROM runs WHERE goal_id = ? ORDER BY id DESC",
                                    (goal_id,)).fetchone()
            ascending = row is None or bool(row[0])
            order, best = ("ASC", "MIN") if ascending else ("DESC", "MAX")
            rows = self.conn.execute(
                f"SELECT c.source, c.config, {best}(e.value) FROM evaluations e JOIN candidates c "
                "ON c.id = e.candidate_id WHERE c.goal_id = ? AND e.ok = 1 AND c.source IS NOT NULL "
                f"AND e.value IS NOT NULL GROUP BY c.id ORDER BY 3 {order} LIMIT ?",
                (goal_id, limit)).fetchall()
        return [{"source": source, "config": json.loads(config), "value": value}
                for source, config, value in rows]

    def runs_elsewhere(self, goal: Goal, kernel: str, device_name: str,
                       limit: int = 5, *, include_device: bool = False) -> list[dict[str, Any]]:
        """Runs of the same kernel on other devices (and on `device_name` too when
        `include_device`), newest first: id, device (decoded) and minimize. The same kernel is
        the same goal key, or the same `kernel` named in the run's device record (recorded
        spaces of one kernel on different GPUs); a custom kernel is only ever its own goal key
        (its recorded space names the function, which other kernels may share). Runs without
        evaluations are left out."""
        key_here = goal_key(goal)
        by_name = bool(kernel) and goal.kernel is None
        with self._lock:
            rows = self.conn.execute(
                "SELECT runs.id, runs.device, runs.minimize, goals.key, goals.family FROM runs "
                "JOIN goals ON goals.id = runs.goal_id "
                "WHERE EXISTS (SELECT 1 FROM evaluations e WHERE e.run_id = runs.id) "
                "ORDER BY runs.id DESC").fetchall()
        out = []
        for run_id, device_json, minimize, key, family in rows:
            device = json.loads(device_json or "{}")
            if device.get("name") == device_name and not include_device:
                continue
            if key == key_here or (by_name and device.get("kernel") == kernel
                                   and "/kernel:" not in family):
                out.append({"id": run_id, "device": device, "minimize": bool(minimize)})
                if len(out) >= limit:
                    break
        return out

    # ---- events -------------------------------------------------------------------------
    def subscriber(self, run_id: int) -> Callable[[Event], None]:
        """An event-bus subscriber recording `run_id`'s events (app.store.recorder); subscribe
        it as critical so a failed write stops the run instead of silently losing them."""
        return _subscriber(self, run_id)


# Every run with what the listing shows, in one statement. `chain` pairs each listed run with
# itself and every run it continues (UNION stops on a cycle); `own` totals each run's own
# evaluations once, so the join per chain member is one row.
_LIST_RUNS = """
WITH RECURSIVE
listed AS (SELECT id FROM runs ORDER BY id DESC LIMIT :limit),
chain(run_id, member) AS (
    SELECT id, id FROM listed
    UNION
    SELECT chain.run_id, runs.resumed_from FROM chain JOIN runs ON runs.id = chain.member
    WHERE runs.resumed_from IS NOT NULL
),
own AS (
    SELECT run_id, COUNT(*) AS n, SUM(ok) AS ok, MIN(value) AS lo, MAX(value) AS hi
    FROM evaluations GROUP BY run_id
),
totals AS (
    SELECT chain.run_id, SUM(own.n) AS n, SUM(own.ok) AS ok, MIN(own.lo) AS lo, MAX(own.hi) AS hi
    FROM chain JOIN own ON own.run_id = chain.member GROUP BY chain.run_id
)
SELECT runs.id, runs.name, runs.backend, runs.status, runs.reason, runs.seed, runs.started_at,
       runs.finished_at, runs.elapsed_s, runs.resumed_from, runs.minimize, runs.project_id,
       runs.goal_id, projects.name AS project, goals.key AS goal_key,
       json_extract(runs.device, '$.unit') AS unit,
       COALESCE((SELECT n FROM own WHERE own.run_id = runs.id), 0) AS own_evaluations,
       COALESCE(totals.n, 0) AS evaluations, COALESCE(totals.ok, 0) AS succeeded,
       CASE WHEN runs.minimize THEN totals.lo ELSE totals.hi END AS best_value
FROM listed
JOIN runs ON runs.id = listed.id
JOIN goals ON goals.id = runs.goal_id
JOIN projects ON projects.id = runs.project_id
LEFT JOIN totals ON totals.run_id = runs.id
ORDER BY runs.id DESC
"""


def _evaluation(row: dict[str, Any]) -> Evaluation:
    return Evaluation(
        key=row["key"], config=json.loads(row["config"]), ok=bool(row["ok"]), value=row["value"],
        reason=row["reason"], detail=row["detail"], agent=row["agent"], source=row["source"],
        parent_key=row["parent_key"], time_ms=row["time_ms"], samples_ms=json.loads(row["samples"]),
        p10_ms=row["p10_ms"], p90_ms=row["p90_ms"],
        stages=[Stage(**s) for s in json.loads(row["stages"])],
        resources=json.loads(row["resources"]), metrics=json.loads(row["metrics"]),
        log=row["log"], sim_seconds=row["sim_seconds"],
        failing_case=None if row["failing_case"] is None else json.loads(row["failing_case"]),
    )
