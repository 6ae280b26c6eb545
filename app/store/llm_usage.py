"""SQL for the `llm_requests` table: one row per LLM request attempt, and per-run totals.

Rows never hold the API key: model, token counts, cost, outcome and a redacted error only.
The Store calls these under its lock; nothing else touches the table.
"""

from __future__ import annotations

import sqlite3
from typing import Any

COLUMNS = ("run_id", "agent", "model", "status", "attempt", "prompt_tokens", "completion_tokens",
           "cost", "seconds", "finish_reason", "usage_estimated", "outcome", "error", "at")


def insert_request(c: sqlite3.Connection, row: dict[str, Any]) -> None:
    c.execute(f"INSERT INTO llm_requests ({', '.join(COLUMNS)}) "
              f"VALUES ({', '.join('?' * len(COLUMNS))})", [row[k] for k in COLUMNS])


def run_totals(c: sqlite3.Connection, run_id: int) -> dict[str, Any]:
    """Requests, tokens and cost of one run, split by status and by agent."""
    n, prompt, completion, cost = c.execute(
        "SELECT COUNT(*), COALESCE(SUM(prompt_tokens), 0), COALESCE(SUM(completion_tokens), 0), "
        "COALESCE(SUM(cost), 0) FROM llm_requests WHERE run_id = ?", (run_id,)).fetchone()
    # tokens the server did not state (timeouts, replies without usage): estimated, marked so
    estimated = c.execute("SELECT COALESCE(SUM(prompt_tokens + completion_tokens), 0) FROM "
                          "llm_requests WHERE run_id = ? AND usage_estimated = 1",
                          (run_id,)).fetchone()[0]
    by_status = dict(c.execute("SELECT status, COUNT(*) FROM llm_requests WHERE run_id = ? "
                               "GROUP BY status", (run_id,)).fetchall())
    by_agent = {agent: {"requests": k, "tokens": tokens, "cost": agent_cost}
                for agent, k, tokens, agent_cost in c.execute(
                    "SELECT agent, COUNT(*), SUM(prompt_tokens + completion_tokens), SUM(cost) "
                    "FROM llm_requests WHERE run_id = ? GROUP BY agent", (run_id,)).fetchall()}
    return {"requests": n, "prompt_tokens": prompt, "completion_tokens": completion,
            "cost": cost, "estimated_tokens": estimated, "by_status": by_status,
            "by_agent": by_agent}
