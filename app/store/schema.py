"""The history database's schema, as an ordered list of migrations.

`PRAGMA user_version` holds how many migrations a database has had. Opening a database runs the
missing ones in one transaction each; a database with a newer version than this app knows is
refused untouched (an older app must not write into a layout it does not understand). A
migration is SQL, or a Python step given the connection inside that transaction (where rows
must be recomputed, as goal keys are).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from app.store import cases, rekey

# Each entry moves the schema from version i to i + 1. Append only; never edit a released one.
MIGRATIONS: list[str | Callable[[sqlite3.Connection], None]] = [
    # 1: the first layout.
    """
    CREATE TABLE projects (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        created_at REAL NOT NULL
    );
    CREATE TABLE goals (
        id INTEGER PRIMARY KEY,
        project_id INTEGER NOT NULL REFERENCES projects(id),
        key TEXT NOT NULL UNIQUE,          -- same key = same problem (see app.store.goal_key)
        name TEXT NOT NULL,
        toml TEXT NOT NULL,                -- the goal as first seen
        created_at REAL NOT NULL
    );
    CREATE TABLE runs (
        id INTEGER PRIMARY KEY,
        project_id INTEGER NOT NULL REFERENCES projects(id),
        goal_id INTEGER NOT NULL REFERENCES goals(id),
        goal_toml TEXT NOT NULL,           -- the goal exactly as this run used it
        goal_path TEXT NOT NULL DEFAULT '',
        name TEXT NOT NULL,
        backend TEXT NOT NULL,
        minimize INTEGER NOT NULL DEFAULT 1,
        status TEXT NOT NULL,              -- running / finished / stopped / interrupted / failed
        reason TEXT,
        message TEXT NOT NULL DEFAULT '',
        seed INTEGER,
        device TEXT NOT NULL DEFAULT '{}', -- JSON
        started_at REAL NOT NULL,
        finished_at REAL,
        elapsed_s REAL,
        resumed_from INTEGER REFERENCES runs(id),
        pid INTEGER,
        host TEXT,
        baseline_value REAL,
        limit_value REAL,
        credits TEXT NOT NULL DEFAULT '{}', -- JSON: agent -> contribution
        app_version TEXT NOT NULL DEFAULT ''
    );
    CREATE TABLE candidates (
        id INTEGER PRIMARY KEY,
        goal_id INTEGER NOT NULL REFERENCES goals(id),
        key TEXT NOT NULL,
        config TEXT NOT NULL,              -- JSON
        source TEXT,
        agent TEXT NOT NULL DEFAULT '',
        parent_key TEXT,
        created_at REAL NOT NULL,
        UNIQUE (goal_id, key)
    );
    CREATE TABLE evaluations (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id),
        idx INTEGER NOT NULL,              -- 1-based position in the run
        candidate_id INTEGER NOT NULL REFERENCES candidates(id),
        key TEXT NOT NULL,
        agent TEXT NOT NULL DEFAULT '',
        ok INTEGER NOT NULL,
        value REAL,
        reason TEXT,
        detail TEXT NOT NULL DEFAULT '',
        time_ms REAL,
        p10_ms REAL,
        p90_ms REAL,
        samples TEXT NOT NULL DEFAULT '[]',
        stages TEXT NOT NULL DEFAULT '[]',
        resources TEXT NOT NULL DEFAULT '{}',
        metrics TEXT NOT NULL DEFAULT '{}',
        failing_case TEXT,
        log TEXT NOT NULL DEFAULT '',
        sim_seconds REAL NOT NULL DEFAULT 0,
        elapsed_s REAL NOT NULL,           -- run clock when it completed (convergence x axis)
        best_so_far REAL,                  -- convergence y axis
        created_at REAL NOT NULL,
        UNIQUE (run_id, idx)
    );
    CREATE INDEX evaluations_run_key ON evaluations(run_id, key);
    CREATE TABLE lessons (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id),
        goal_id INTEGER NOT NULL REFERENCES goals(id),
        kind TEXT NOT NULL,
        text TEXT NOT NULL,
        evidence TEXT NOT NULL DEFAULT '{}',
        agent TEXT NOT NULL DEFAULT '',
        created_at REAL NOT NULL
    );
    CREATE TABLE telemetry (
        id INTEGER PRIMARY KEY,
        run_id INTEGER NOT NULL REFERENCES runs(id),
        at REAL NOT NULL,
        device TEXT NOT NULL,
        readings TEXT NOT NULL             -- JSON
    );
    CREATE INDEX telemetry_run ON telemetry(run_id, at);
    CREATE TABLE validation_cases (
        id INTEGER PRIMARY KEY,
        goal_key TEXT NOT NULL,
        case_hash TEXT NOT NULL,
        "case" TEXT NOT NULL,              -- JSON: the input that once broke verification
        created_at REAL NOT NULL,
        UNIQUE (goal_key, case_hash)
    );
    INSERT INTO projects (name, created_at) VALUES ('default', strftime('%s', 'now'));
    """,
    # 2: token use and cost of every LLM request. Before this migration app/llm/usage.py created
    # the same table itself, on first use, in databases at version 1: IF NOT EXISTS keeps those
    # rows (the layout below is exactly the one it created).
    """
    CREATE TABLE IF NOT EXISTS llm_requests (
        id INTEGER PRIMARY KEY,
        run_id INTEGER,
        agent TEXT NOT NULL,
        model TEXT NOT NULL,
        status TEXT NOT NULL,          -- ok / truncated / rate_limited / timeout / ... (per attempt)
        attempt INTEGER NOT NULL,
        prompt_tokens INTEGER NOT NULL,
        completion_tokens INTEGER NOT NULL,
        cost REAL NOT NULL,
        seconds REAL NOT NULL,
        finish_reason TEXT NOT NULL DEFAULT '',
        usage_estimated INTEGER NOT NULL DEFAULT 0,
        outcome TEXT NOT NULL DEFAULT '',  -- what the reply became: candidate key / no_code: why
        error TEXT NOT NULL DEFAULT '',
        at REAL NOT NULL
    );
    CREATE INDEX IF NOT EXISTS llm_requests_run ON llm_requests(run_id);
    """,
    # 3: goals keyed by what a custom kernel computes (app.store.identity), goals.family added;
    # existing runs, candidates, lessons and validation cases regrouped (app.store.rekey).
    rekey.migrate,
    # 4: where each validation case came from (the adversary, a verification failure of a
    # candidate, a user's file); rows kept before say so (app.store.cases)
    cases.MIGRATION,
]

SCHEMA_VERSION = len(MIGRATIONS)
