"""Schema migration 3 on a history written by the release before it: that release's own code
(taken from git at BEFORE and run in a child process) records two different custom kernels with
the same shapes, which it keys as one goal; today's Store must split them into two goals with
their runs, candidates, lessons and validation cases, and lose nothing."""

from __future__ import annotations

import io
import json
import shutil
import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from project_paths import ROOT
from test_goal_identity import _kernel_goal

from app.goal import Goal
from app.store import SCHEMA_VERSION, Store, goal_key

BEFORE = "5b6f5b1229ff99f4205e7ed344b19dd9ecd6f535"  # the last release keyed without [kernel]

WRITE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import app
assert app.__file__.startswith(sys.argv[1]), app.__file__
from app.core.types import Evaluation, Lesson
from app.goal import Goal
from app.store import Store, goal_key

db, scale, saxpy = sys.argv[2], Goal.load(sys.argv[3]), Goal.load(sys.argv[4])
assert goal_key(scale) == goal_key(saxpy)  # the bug this migration undoes


def ev(store, run, i, key, source, ok=True, case=None):
    store.record_evaluation(run, i, Evaluation(key=key, config={"CHUNK": i}, ok=ok,
                            value=float(i) if ok else None, source=source, agent="llm",
                            reason=None if ok else "wrong_result", failing_case=case), i, 1.0)


with Store(db) as s:
    r1 = s.create_run(scale, {"name": "cpu0"})
    ev(s, r1, 1, "shared", "// both start here")
    ev(s, r1, 2, "scale-best", "// scale best")
    ev(s, r1, 3, "scale-bad", "// scale bad", ok=False,
       case={"shape": [7], "seed": 11, "distribution": "normal", "check": "verify"})
    s.add_lesson(r1, Lesson("llm_transformation", "scale lesson", {}, "llm"))
    s.add_telemetry(r1, "cpu0", {"temp": 50.0}, 1.0)
    s.finish_run(r1, "max_evals")
    r2 = s.create_run(saxpy, {"name": "cpu0"})
    ev(s, r2, 1, "shared", "// both start here")
    ev(s, r2, 2, "saxpy-best", "// saxpy best")
    s.add_lesson(r2, Lesson("llm_transformation", "saxpy lesson", {}, "llm"))
    s.finish_run(r2, "max_evals")
    r3 = s.create_run(scale, {"name": "cpu0"}, resumed_from=r1)
    ev(s, r3, 1, "scale-more", "// scale more")
    s.finish_run(r3, "max_evals")
    s.add_validation_case(scale, {"shape": [9], "seed": 22, "distribution": "normal"})
print(json.dumps([r1, r2, r3]))
"""


@pytest.fixture(scope="module")
def before_tree(tmp_path_factory) -> Path:
    """app/ as release BEFORE shipped it (skipped outside a git checkout with that commit)."""
    try:
        blob = subprocess.run(["git", "-C", str(ROOT), "archive", BEFORE, "app"], check=True,
                              capture_output=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        pytest.skip(f"needs the git history with commit {BEFORE[:7]}")
    out = tmp_path_factory.mktemp("before")
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(out, filter="data")
    return out


def _write_with_before(tree: Path, db: Path, scale: Goal, saxpy: Goal) -> list[int]:
    done = subprocess.run([sys.executable, "-c", WRITE, str(tree), str(db), scale.source_path,
                           saxpy.source_path], check=False, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _totals(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(db)
    try:
        return {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                for t in ("runs", "evaluations", "lessons", "telemetry")}
    finally:
        conn.close()


@pytest.mark.parametrize("files", ["present", "gone"])
def test_two_kernels_keyed_as_one_become_two_goals_losing_nothing(tmp_path, before_tree, files):
    scale = _kernel_goal(tmp_path / "scale", "scale", "2.0f * x[j]", "2 * x")
    saxpy = _kernel_goal(tmp_path / "saxpy", "saxpy", "2.0f * x[j] + 1.0f", "2 * x + 1")
    db = tmp_path / "history.sqlite"
    r1, r2, r3 = _write_with_before(before_tree, db, scale, saxpy)
    before = _totals(db)
    if files == "gone":  # the goal directories were moved away since: keyed by name
        shutil.rmtree(tmp_path / "scale")
        shutil.rmtree(tmp_path / "saxpy")

    with Store(db) as store:
        assert store.schema_version == SCHEMA_VERSION
        goals = store.goals()
        assert len(goals) == 2
        (g_scale, k_scale), (g_saxpy, k_saxpy) = store.run_goal(r1), store.run_goal(r2)
        assert g_scale != g_saxpy and store.run_goal(r3) == (g_scale, k_scale)  # chain stays
        if files == "present":
            assert (k_scale, k_saxpy) == (goal_key(scale), goal_key(saxpy))
        else:  # what today's code gives the stored goals now that their files are gone
            assert k_scale == goal_key(store.goal_of_run(r1))
            assert k_saxpy == goal_key(store.goal_of_run(r2))
        # every run's evaluations, with their candidates' sources
        assert [(e.key, e.source) for _, e, _ in store.load_evaluations(r1, own_only=True)] == [
            ("shared", "// both start here"), ("scale-best", "// scale best"),
            ("scale-bad", "// scale bad")]
        assert [(e.key, e.source) for _, e, _ in store.load_evaluations(r2)] == [
            ("shared", "// both start here"), ("saxpy-best", "// saxpy best")]
        assert [e.key for _, e, _ in store.load_evaluations(r3)] == [
            "shared", "scale-best", "scale-bad", "scale-more"]
        # the candidate both evaluated is in both goals; each goal's best are its own
        assert {k["source"] for k in store.best_kernels(g_scale, 10)} == {
            "// both start here", "// scale best", "// scale more"}
        assert {k["source"] for k in store.best_kernels(g_saxpy, 10)} == {
            "// both start here", "// saxpy best"}
        assert store.goal_lessons(g_scale) == ["scale lesson"]
        assert store.goal_lessons(g_saxpy) == ["saxpy lesson"]
        # the case scale's run found stays with scale; the one no run claims goes to both
        seeds = {}
        for key in (k_scale, k_saxpy):
            rows = store.conn.execute('SELECT "case" FROM validation_cases WHERE goal_key = ?',
                                      (key,)).fetchall()
            seeds[key] = sorted(json.loads(c)["seed"] for (c,) in rows)
        assert seeds == {k_scale: [11, 22], k_saxpy: [22]}
        if files == "present":
            assert [c["seed"] for c in store.validation_cases(saxpy)] == [22]
        assert store.conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert store.conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert _totals(db) == before  # nothing lost, nothing duplicated


def test_a_history_of_catalog_goals_keeps_its_keys(tmp_path, before_tree):
    """Catalog and recorded goals were keyed right before: the migration leaves them as they
    were (the writer's own goals here are the custom ones above, so check a plain one)."""
    scale = _kernel_goal(tmp_path / "scale", "scale", "2.0f * x[j]", "2 * x")
    db = tmp_path / "history.sqlite"
    _write_with_before(before_tree, db, scale, scale)
    conn = sqlite3.connect(db)
    plain = Goal(name="softmax", operator="softmax", backend="cpu", shapes=[[64, 64]])
    conn.execute("INSERT INTO goals (project_id, key, name, toml, created_at) VALUES "
                 "(1, ?, 'softmax', ?, 0)", (goal_key(plain), plain.to_toml()))
    conn.commit()
    conn.close()
    with Store(db) as store:
        keys = {g["name"]: (g["key"], g["family"]) for g in store.goals()}
    assert keys["softmax"] == (goal_key(plain), "cpu/operator:softmax")
    assert keys["scale"][0] == goal_key(scale)
