"""The goal's validation cases in SQL: inputs that once broke a kernel, kept by goal identity
with where each came from (origin) and when."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from typing import Any

# origin of rows kept before migration 4 recorded it (they all came from verification failures)
OLD_ORIGIN = "verification failure (kept before origins were recorded)"

MIGRATION = f"""
ALTER TABLE validation_cases ADD COLUMN origin TEXT NOT NULL DEFAULT '';
UPDATE validation_cases SET origin = '{OLD_ORIGIN}' WHERE origin = '';
"""


IDENTITY = ("shape", "distribution", "seed", "dtype", "craft")


def blob_of(case: dict[str, Any]) -> str:
    return json.dumps(case, sort_keys=True, default=str)


def insert(c: sqlite3.Connection, goal_key: str, case: dict[str, Any], origin: str) -> int:
    """Keep a case (the same case twice keeps one, with its first origin); its row id."""
    blob = blob_of(case)
    # one row per input: what reproduces it, not what each kernel it broke did with it
    ident = {k: case[k] for k in IDENTITY if k in case}
    digest = hashlib.sha256(blob_of(ident).encode()).hexdigest()[:20]
    c.execute('INSERT OR IGNORE INTO validation_cases (goal_key, case_hash, "case", created_at, '
              "origin) VALUES (?, ?, ?, ?, ?)", (goal_key, digest, blob, time.time(), origin))
    return int(c.execute("SELECT id FROM validation_cases WHERE goal_key = ? AND case_hash = ?",
                         (goal_key, digest)).fetchone()[0])


def rows(conn: sqlite3.Connection, goal_key: str) -> list[dict[str, Any]]:
    """A goal's cases, oldest first: id, case (decoded), origin, created_at."""
    out = []
    for cid, blob, origin, created in conn.execute(
            'SELECT id, "case", origin, created_at FROM validation_cases WHERE goal_key = ? '
            "ORDER BY id", (goal_key,)).fetchall():
        try:
            case = json.loads(blob)
        except ValueError:
            continue  # a damaged row is skipped, never fatal
        out.append({"id": cid, "case": case, "origin": origin, "created_at": created})
    return out
