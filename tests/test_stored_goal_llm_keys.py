"""A run stored by an earlier version opens even when its goal's [llm] table holds a key a goal
file is now refused for (a misspelt setting, an API key): earlier versions judged [llm] only
when the LLM agent ran, so such a run ran without it. The key is dropped, never loaded; the
same table in a goal file is still refused. Real SQLite file, real Store."""

from __future__ import annotations

import sqlite3

import pytest

from app.goal import Goal, GoalError
from app.store import Store

GOAL = """name = "old transpose"
backend = "replay"
operator = "pnpoly"
space = "pnpoly_RTX_3090"

[llm]
model = "small-model"
max_requests = 7
api_key = "sk-old-secret"
"""


def _stored_run(tmp_path):
    """A run whose stored goal is the text above, as an earlier version could have written it."""
    path = tmp_path / "history.db"
    goal = Goal(name="old transpose", backend="replay", operator="pnpoly",
                space="pnpoly_RTX_3090", llm={"model": "small-model"})
    with Store(path) as store:
        run_id = store.create_run(goal, {"name": "replay"})
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE runs SET goal_toml = ? WHERE id = ?", (GOAL, run_id))
    return path, run_id


def test_a_stored_goal_with_keys_refused_today_still_opens_without_them(tmp_path):
    path, run_id = _stored_run(tmp_path)
    with Store(path) as store:
        goal = store.goal_of_run(run_id)
    assert dict(goal.llm) == {"model": "small-model"}
    assert "sk-old-secret" not in goal.to_toml()


def test_the_same_table_in_a_goal_file_is_refused(tmp_path):
    file = tmp_path / "old.toml"
    file.write_text(GOAL)
    with pytest.raises(GoalError, match="llm"):
        Goal.load(file)


def test_a_stored_goal_that_is_not_toml_is_named_not_raised(tmp_path):
    path, run_id = _stored_run(tmp_path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE runs SET goal_toml = 'name = [' WHERE id = ?", (run_id,))
    with Store(path) as store, pytest.raises(Exception, match=f"run {run_id}.*no longer loads"):
        store.goal_of_run(run_id)
