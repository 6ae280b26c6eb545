"""Token use and cost of every LLM request, kept in the history database beside the run.

Its own table (created on first use) in the same SQLite file the Store writes, through its own
connection: rows are committed one at a time like evaluations. Never holds the API key: the
records carry model, counts, outcome and a redacted error text only.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

from app.llm.client import RequestRecord

SCHEMA = """
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
"""


class UsageLog:
    def __init__(self, db_path: str | Path, run_id: int | None) -> None:
        self.path = Path(db_path)
        self.run_id = run_id
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30.0,
                                     isolation_level=None)
        self._conn.executescript(SCHEMA)

    def record(self, rec: RequestRecord, outcome: str = "") -> None:
        with self._lock:
            self._conn.execute(
                "INSERT INTO llm_requests (run_id, agent, model, status, attempt, prompt_tokens, "
                "completion_tokens, cost, seconds, finish_reason, usage_estimated, outcome, error,"
                " at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (self.run_id, rec.agent, rec.model, rec.status, rec.attempt, rec.prompt_tokens,
                 rec.completion_tokens, rec.cost, rec.seconds, rec.finish_reason,
                 int(rec.usage_estimated), outcome[:500], rec.error[:1000], rec.at))

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def run_usage(db_path: str | Path, run_id: int) -> dict[str, Any]:
    """Per-run totals and per-agent split, for the GUI and `show`."""
    conn = sqlite3.connect(str(db_path), timeout=30.0)
    try:
        have = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'llm_requests'").fetchone()
        if not have:
            return {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost": 0.0,
                    "by_status": {}, "by_agent": {}}
        q = ("SELECT COUNT(*), COALESCE(SUM(prompt_tokens), 0), COALESCE(SUM(completion_tokens), 0),"
             " COALESCE(SUM(cost), 0) FROM llm_requests WHERE run_id = ?")
        n, p, c, cost = conn.execute(q, (run_id,)).fetchone()
        by_status = dict(conn.execute("SELECT status, COUNT(*) FROM llm_requests WHERE run_id = ? "
                                      "GROUP BY status", (run_id,)).fetchall())
        by_agent = {a: {"requests": k, "tokens": t, "cost": co} for a, k, t, co in conn.execute(
            "SELECT agent, COUNT(*), SUM(prompt_tokens + completion_tokens), SUM(cost) "
            "FROM llm_requests WHERE run_id = ? GROUP BY agent", (run_id,)).fetchall()}
        return {"requests": n, "prompt_tokens": p, "completion_tokens": c, "cost": cost,
                "by_status": by_status, "by_agent": by_agent}
    finally:
        conn.close()
