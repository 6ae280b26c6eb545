"""Run history in SQLite: goals, runs, candidates, evaluations, lessons, telemetry and the
validation cases that once broke a candidate."""

from app.store.db import STATUSES, Store, StoreError, UnknownRunError, goal_key
from app.store.schema import MIGRATIONS, SCHEMA_VERSION

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "STATUSES", "Store", "StoreError", "UnknownRunError",
           "goal_key"]
