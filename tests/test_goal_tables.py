"""The goal's sub-tables in one style (app.goal.tables): each reads its TOML table with
from_table (an unknown key or a table that is not one: one line naming the file and the key)
and judges its values with check(), which Goal.validate calls."""

from __future__ import annotations

import pytest

from app.goal import SECTIONS, Goal, GoalError

HEAD = 'name = "g"\nspace = "pnpoly_RTX_3090.json.gz"\n'


def _load(tmp_path, text: str) -> Goal:
    path = tmp_path / "mine.toml"
    path.write_text(HEAD + text)
    return Goal.load(path)


@pytest.mark.parametrize("table", sorted(SECTIONS))
def test_an_unknown_key_names_the_file_and_the_key(tmp_path, table):
    with pytest.raises(GoalError) as err:
        _load(tmp_path, f"[{table}]\ncolour = 1\n")
    message = str(err.value)
    assert err.value.field == f"{table}.colour" and message.startswith(f"{table}.colour:")
    assert "'mine.toml'" in message and "unknown field" in message and "\n" not in message


@pytest.mark.parametrize("table", sorted(SECTIONS))
def test_a_table_given_as_a_value_names_the_file(tmp_path, table):
    with pytest.raises(GoalError) as err:
        _load(tmp_path, f"{table} = 3\n")
    assert err.value.field == table
    assert f"must be a table, e.g. [{table}] in 'mine.toml'" in str(err.value)


def test_a_value_out_of_range_loads_and_the_check_refuses_it(tmp_path):
    """Structure on load (a stored goal, or a file the form opens to fix, still reads);
    values once per run, by each table's check()."""
    goal = _load(tmp_path, "[stop]\nmax_evals = 0\n")
    assert goal.stop.max_evals == 0
    with pytest.raises(GoalError) as err:
        goal.validate()
    assert err.value.field == "stop.max_evals" and "between 1 and" in str(err.value)
    with pytest.raises(GoalError) as err:
        goal.stop.check()
    assert err.value.field == "stop.max_evals"


def test_a_goal_built_in_code_names_no_file():
    with pytest.raises(GoalError) as err:
        Goal.from_dict({"swarm": {"colour": 1}})
    assert str(err.value).startswith("swarm.colour: unknown field; known: ")


def test_an_unknown_llm_key_is_refused_on_load_naming_the_file(tmp_path):
    """[llm] is read like the other tables: a misspelt setting stops the file from opening
    (it used to load and be refused only when a run started, without the file's name)."""
    with pytest.raises(GoalError) as err:
        _load(tmp_path, '[llm]\nmodel = "m"\nmax_request = 7\n')
    assert err.value.field == "llm.max_request"
    assert str(err.value).startswith("llm.max_request: unknown field in 'mine.toml'; known: ")


def test_the_api_key_is_never_read_from_a_goal(tmp_path):
    for key in ("api_key", "key"):
        with pytest.raises(GoalError) as err:
            _load(tmp_path, f'[llm]\n{key} = "sk-secret"\n')
        assert err.value.field == f"llm.{key}" and "never kept" in str(err.value)
        assert "sk-secret" not in str(err.value)


def test_the_llm_and_cluster_tables_declare_their_settings_fields():
    """A goal may set every endpoint or cluster setting, and only those (app.llm.settings and
    app.core.cluster_settings judge them)."""
    from dataclasses import fields

    from app.core.cluster_settings import KNOWN, ClusterSettings
    from app.goal import ClusterTable, LLMTable
    from app.llm.settings import LLMSettings

    assert LLMTable.KEYS == tuple(f.name for f in fields(LLMSettings))
    assert ClusterTable.KEYS == KNOWN == tuple(f.name for f in fields(ClusterSettings))
    assert sorted(SECTIONS) == ["cluster", "constraints", "kernel", "llm", "objective", "stop",
                                "swarm", "target", "tolerance"]


def test_the_llm_table_reads_as_what_the_goal_sets_in_the_files_order(tmp_path):
    text = '[llm]\nmodel = "m"\nroles = ["memory"]\nbase_url = "http://127.0.0.1:9/v1"\n'
    goal = _load(tmp_path, text)
    assert goal.llm == {"model": "m", "roles": ["memory"], "base_url": "http://127.0.0.1:9/v1"}
    assert goal.to_toml().endswith(text.replace('["memory"]', '[\n    "memory",\n]'))
    assert not Goal().llm and "[llm]" in Goal().to_toml()
    goal.llm["max_tokens"] = 64
    assert Goal.from_toml(goal.to_toml()).llm["max_tokens"] == 64
    with pytest.raises(GoalError) as err:
        goal.llm["colour"] = 1
    assert err.value.field == "llm.colour"


def test_the_cluster_table_keeps_its_order_and_a_local_goal_writes_none(tmp_path):
    text = '[cluster]\nfallback = "local"\naddress = "auto"\n'
    goal = _load(tmp_path, text)
    assert goal.cluster == {"fallback": "local", "address": "auto"} and goal.to_toml().endswith(text)
    assert goal.validate().cluster["address"] == "auto"
    assert not Goal().cluster and "[cluster]" not in Goal().to_toml()
    with pytest.raises(GoalError) as err:
        _load(tmp_path, "[cluster]\nactors = 3\n").validate()
    assert err.value.field == "cluster.address"
