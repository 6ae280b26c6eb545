"""Schema migration 3: every goal keyed by what it computes (app.store.identity).

Before it, a custom kernel's key left out its [kernel] table, so different kernels of the same
backend, dtype and shapes shared one goal row (runs, candidates, lessons, validation cases). The
key of each run is recomputed from the goal it ran (runs.goal_toml, with its files found beside
runs.goal_path); a resumed chain keeps the key of its first run. Runs then regroup under one goal
row per key: a goal whose runs were different kernels splits (its row keeps the key of its first
run, the others get new rows); goals that now have one key merge. Candidates follow the runs that
evaluated them (copied where runs of two new goals evaluated one), lessons follow their run, and
validation cases follow the runs whose evaluations found them (the evaluation stores the same
JSON); a case no run claims goes to every goal its old one split into: a case is a (shape, seed)
drawn again from each goal's own fills, so it is valid input for all of them. Nothing is deleted
but goal rows left empty by a merge, and candidate rows merged into an identical one.

A run whose stored goal no longer loads keeps its old key; a reference that cannot be read
(files moved, or a goal run without a file) is keyed by its name (app.store.identity).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from app.goal import Goal, GoalError
from app.store.identity import goal_family, goal_key


def _keys(toml: str, path: str, cache: dict[tuple[str, str], tuple[str, str] | None]
          ) -> tuple[str, str] | None:
    """(key, family) of a stored goal, or None when it no longer loads."""
    if (toml, path) not in cache:
        try:
            goal = Goal.from_stored_toml(toml, source_path=path)
            cache[toml, path] = (goal_key(goal, read_files=bool(path)),
                                 goal_family(goal, read_files=bool(path)))
        except (GoalError, TypeError, ValueError, AttributeError, AssertionError):
            cache[toml, path] = None
    return cache[toml, path]


def migrate(conn: sqlite3.Connection) -> None:
    """Runs inside the migration's transaction (app.store.connection._migrate)."""
    conn.execute("ALTER TABLE goals ADD COLUMN family TEXT NOT NULL DEFAULT ''")
    cache: dict[tuple[str, str], tuple[str, str] | None] = {}
    goals = {gid: {"key": key, "toml": toml, "project": project}
             for gid, key, toml, project in conn.execute(
                 "SELECT id, key, toml, project_id FROM goals ORDER BY id")}
    runs = conn.execute("SELECT id, goal_id, goal_toml, goal_path, resumed_from, name, started_at "
                        "FROM runs ORDER BY id").fetchall()
    parent = {rid: prev for rid, _, _, _, prev, _, _ in runs}
    own: dict[int, tuple[str, str]] = {}
    for rid, gid, toml, path, _, _, _ in runs:
        own[rid] = _keys(toml, path or "", cache) or (goals[gid]["key"], "")

    def root(rid: int) -> int:
        seen = {rid}
        while parent.get(rid) is not None and parent[rid] in own and parent[rid] not in seen:
            rid = parent[rid]
            seen.add(rid)
        return rid

    run_key = {rid: own[root(rid)] for rid in own}
    # every old goal's new keys, in the order of their first run; a goal without runs by its toml
    keys_of: dict[int, list[tuple[str, str]]] = {gid: [] for gid in goals}
    first_run: dict[str, Any] = {}
    for row in runs:
        rid, gid = row[0], row[1]
        k = run_key[rid]
        if k not in keys_of[gid]:
            keys_of[gid].append(k)
        first_run.setdefault(k[0], row)
    for gid, g in goals.items():
        if not keys_of[gid]:
            keys_of[gid].append(_keys(g["toml"], "", cache) or (g["key"], ""))

    # one goal row per key: an old row keeps its id for its first key still unclaimed
    target: dict[str, int] = {}
    family: dict[int, str] = {}
    kept: set[int] = set()
    conn.execute("UPDATE goals SET key = 'migrating:' || id")  # no UNIQUE clash while re-keying
    for gid, g in goals.items():
        for key, fam in keys_of[gid]:
            if key in target:
                continue
            if gid not in kept:
                kept.add(gid)
                target[key] = gid
                conn.execute("UPDATE goals SET key = ?, family = ? WHERE id = ?", (key, fam, gid))
            else:
                _, _, toml, _, _, name, started = first_run[key]
                target[key] = conn.execute(
                    "INSERT INTO goals (project_id, key, name, toml, created_at, family) "
                    "VALUES (?, ?, ?, ?, ?, ?)", (g["project"], key, name, toml, started, fam)
                ).lastrowid
            family[target[key]] = fam
    goal_of_run = {rid: target[k[0]] for rid, k in run_key.items()}
    default_goal = {gid: target[keys_of[gid][0][0]] for gid in goals}  # for what no run claims

    conn.executemany("UPDATE runs SET goal_id = ? WHERE id = ?",
                     [(g, rid) for rid, g in goal_of_run.items()])
    conn.executemany("UPDATE lessons SET goal_id = ? WHERE run_id = ?",
                     [(g, rid) for rid, g in goal_of_run.items()])
    _move_candidates(conn, goal_of_run, default_goal)
    _move_cases(conn, goals, keys_of, run_key)
    # rows left without runs, candidates or lessons by a merge
    for gid in set(goals) - kept:
        conn.execute("DELETE FROM goals WHERE id = ? AND NOT EXISTS (SELECT 1 FROM runs WHERE "
                     "goal_id = ?) AND NOT EXISTS (SELECT 1 FROM candidates WHERE goal_id = ?) "
                     "AND NOT EXISTS (SELECT 1 FROM lessons WHERE goal_id = ?)",
                     (gid, gid, gid, gid))


def _move_candidates(conn: sqlite3.Connection, goal_of_run: dict[int, int],
                     default_goal: dict[int, int]) -> None:
    """Each candidate to the goal(s) of the runs that evaluated it."""
    uses: dict[int, dict[int, list[int]]] = {}  # candidate -> goal -> evaluation ids
    for eid, rid, cid in conn.execute("SELECT id, run_id, candidate_id FROM evaluations"):
        uses.setdefault(cid, {}).setdefault(goal_of_run.get(rid, -1), []).append(eid)
    cands = conn.execute("SELECT id, goal_id, key, config, source, agent, parent_key, created_at "
                         "FROM candidates ORDER BY id").fetchall()
    for cid, gid, ckey, *rest in cands:
        wanted = {g: e for g, e in uses.get(cid, {}).items() if g != -1}
        if not wanted:
            wanted = {default_goal.get(gid, gid): []}
        if list(wanted) == [gid]:
            continue  # the common case: its goal kept its row
        stays = gid in wanted
        for g, evaluations in wanted.items():
            if g == gid:
                continue
            row = conn.execute("SELECT id FROM candidates WHERE goal_id = ? AND key = ?",
                               (g, ckey)).fetchone()
            if row is None and not stays:
                conn.execute("UPDATE candidates SET goal_id = ? WHERE id = ?", (g, cid))
                stays = True  # moved whole: its evaluations already point at it
                gid = g
                continue
            other = row[0] if row else conn.execute(
                "INSERT INTO candidates (goal_id, key, config, source, agent, parent_key, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?, ?)", (g, ckey, *rest)).lastrowid
            conn.executemany("UPDATE evaluations SET candidate_id = ? WHERE id = ?",
                             [(other, e) for e in evaluations])
        if not stays:  # merged into identical rows of its new goals
            conn.execute("DELETE FROM candidates WHERE id = ? AND NOT EXISTS (SELECT 1 FROM "
                         "evaluations WHERE candidate_id = ?)", (cid, cid))


def _move_cases(conn: sqlite3.Connection, goals: dict[int, dict[str, Any]],
                keys_of: dict[int, list[tuple[str, str]]], run_key: dict[int, tuple[str, str]]
                ) -> None:
    """Validation cases follow the runs that found them (validation_cases.goal_key is text)."""
    new_keys = {g["key"]: [k for k, _ in keys_of[gid]] for gid, g in goals.items()}
    found: dict[str, set[str]] = {}  # case JSON -> keys of the runs that stored it
    for rid, case in conn.execute("SELECT run_id, failing_case FROM evaluations "
                                  "WHERE failing_case IS NOT NULL"):
        if rid in run_key:
            found.setdefault(case, set()).add(run_key[rid][0])
    rows = conn.execute('SELECT id, goal_key, case_hash, "case", created_at FROM validation_cases '
                        "ORDER BY id").fetchall()
    for cid, old, case_hash, case, created in rows:
        keys = new_keys.get(old)
        if not keys or keys == [old]:
            continue  # not a goal's key (kept as it is), or unchanged
        claimed = [k for k in keys if k in found.get(case, ())]
        for k in claimed or keys:
            conn.execute('INSERT OR IGNORE INTO validation_cases (goal_key, case_hash, "case", '
                         "created_at) VALUES (?, ?, ?, ?)", (k, case_hash, case, created))
        if old not in (claimed or keys):
            conn.execute("DELETE FROM validation_cases WHERE id = ?", (cid,))
