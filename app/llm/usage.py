"""Token use and cost of every LLM request, kept in the history database beside the run.

The rows live in the store's `llm_requests` table (a schema migration); they are committed one
at a time like evaluations. Never holds the API key: the records carry model, counts, outcome
and a redacted error text only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.llm.client import RequestRecord
from app.store import Store


class UsageLog:
    """Records a run's LLM requests into the history database at `db`: a path (the log opens
    and closes its own Store on it) or an open Store (left open)."""

    def __init__(self, db: str | Path | Store, run_id: int | None) -> None:
        self._owned = not isinstance(db, Store)
        self.store = Store(db) if self._owned else db
        self.path = self.store.path
        self.run_id = run_id

    def record(self, rec: RequestRecord, outcome: str = "") -> None:
        self.store.record_llm_request(
            self.run_id, agent=rec.agent, model=rec.model, status=rec.status,
            attempt=rec.attempt, prompt_tokens=rec.prompt_tokens,
            completion_tokens=rec.completion_tokens, cost=rec.cost, seconds=rec.seconds,
            finish_reason=rec.finish_reason, usage_estimated=rec.usage_estimated,
            outcome=outcome[:500], error=rec.error[:1000], at=rec.at)

    def close(self) -> None:
        if self._owned:
            self.store.close()


def run_usage(db: str | Path | Store, run_id: int) -> dict[str, Any]:
    """Per-run totals and per-agent split, for the GUI and `show`. `db` is an open Store or
    the path of a history database."""
    if isinstance(db, Store):
        return db.llm_usage(run_id)
    with Store(db) as store:
        return store.llm_usage(run_id)
