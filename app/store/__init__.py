"""Run history in SQLite: goals, runs, candidates, evaluations, lessons, telemetry, LLM request
usage and the validation cases that once broke a candidate. The only package that speaks SQL."""

from app.store.db import (
    STATUSES,
    DatabaseError,
    Store,
    StoreError,
    UnknownRunError,
    check_file,
    goal_family,
    goal_key,
)
from app.store.schema import MIGRATIONS, SCHEMA_VERSION

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "STATUSES", "DatabaseError", "Store", "StoreError",
           "UnknownRunError", "check_file", "goal_family", "goal_key"]
