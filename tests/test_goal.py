"""Goal: TOML round trip, validation errors that name their field, the example goals."""

from __future__ import annotations

import pytest
from project_paths import GOALS

from app.goal import Goal, GoalError
from app.session import check_goal

# cpu goals are only checked here, never compiled: no roofs to measure (tests/conftest.py)
COMPILES = False


def _replay_goal(**overrides) -> Goal:
    goal = Goal(name="g", space="pnpoly_RTX_3090.json.gz", backend="replay")
    for dotted, value in overrides.items():
        obj = goal
        *parents, last = dotted.split("__")
        for p in parents:
            obj = getattr(obj, p)
        setattr(obj, last, value)
    return goal


def test_toml_round_trip_keeps_every_field(tmp_path):
    goal = _replay_goal(dtype="float16", shapes=[[64, 32], [7]], objective__metric="throughput",
                        target__kind="speedup", target__value=1.5, stop__max_evals=77,
                        stop__time_budget_s=12.5, stop__plateau_patience=9, tolerance__rtol=1e-3,
                        constraints__restrictions=["block_size_x <= 256"],
                        swarm__agents=["local", "model"], swarm__workers=2, swarm__seed=42)
    path = tmp_path / "g.toml"
    goal.save(path)
    loaded = Goal.load(path)
    assert loaded.to_dict() == goal.to_dict()
    assert loaded.source_path == str(path.resolve())
    assert loaded.objective.minimize is False  # throughput maximises by default
    assert not list(tmp_path.glob("*.tmp"))  # saved atomically


@pytest.mark.parametrize("overrides, field", [
    ({"name": " "}, "name"),
    ({"backend": "opencl"}, "backend"),
    ({"space": ""}, "space"),
    ({"dtype": "float8"}, "dtype"),
    ({"shapes": [[0, 3]]}, "shapes[0]"),
    ({"shapes": [[4], "x"]}, "shapes[1]"),
    ({"device": -1}, "device"),
    ({"objective__metric": "speed"}, "objective.metric"),
    ({"objective__direction": "up"}, "objective.direction"),
    ({"target__kind": "fast"}, "target.kind"),
    ({"target__kind": "speedup", "target__value": 0}, "target.value"),
    ({"target__kind": "fraction_of_limit", "target__value": 1.5}, "target.value"),
    ({"stop__max_evals": 0}, "stop.max_evals"),
    ({"stop__time_budget_s": -1}, "stop.time_budget_s"),
    ({"stop__plateau_patience": -2}, "stop.plateau_patience"),
    ({"tolerance__rtol": -1e-3}, "tolerance.rtol"),
    ({"constraints__max_registers": 0}, "constraints.max_registers"),
    ({"constraints__restrictions": "x < 3"}, "constraints.restrictions"),
    ({"swarm__agents": []}, "swarm.agents"),
    ({"swarm__agents": ["oracle"]}, "swarm.agents"),
    ({"swarm__workers": 0}, "swarm.workers"),
    ({"swarm__seed": "one"}, "swarm.seed"),
])
def test_each_validation_error_names_its_field(overrides, field):
    """Through the run's check: the goal's own fields, then the backend and agent registries."""
    with pytest.raises(GoalError) as err:
        check_goal(_replay_goal(**overrides))
    assert err.value.field == field
    assert str(err.value).startswith(field + ":")


@pytest.mark.parametrize("overrides, field", [
    ({"backend": "opencl"}, "backend"), ({"space": ""}, "space"),
    ({"swarm__agents": ["oracle"]}, "swarm.agents"), ({"llm": {"colour": "red"}}, "llm.colour"),
])
def test_a_goal_validates_only_its_own_fields(overrides, field):
    """Registry names (backends, agents, LLM settings) are judged by the registries, not by
    Goal.validate, which imports none of them."""
    goal = _replay_goal(**overrides)
    assert goal.validate() is goal
    with pytest.raises(GoalError) as err:
        check_goal(goal)
    assert err.value.field == field


def test_unknown_operator_is_named_by_the_backend():
    goal = Goal(name="g", backend="cpu", operator="no_such_op", shapes=[[8]])
    goal.validate()  # a name the catalog does not know is not the goal's business
    with pytest.raises(GoalError) as err:
        check_goal(goal)
    assert err.value.field == "operator" and "no_such_op" in err.value.problem
    assert str(err.value).startswith("operator: unknown operator 'no_such_op' for backend cpu; known: ")
    with pytest.raises(GoalError) as err:
        check_goal(Goal(name="g", backend="cpu", operator="softmax"))
    assert err.value.field == "shapes"


def test_goal_module_imports_no_registry():
    """Goal stands below the registries: importing it pulls in neither the catalog, the
    backends, the swarm nor the LLM package (a fresh interpreter, so nothing is cached)."""
    import subprocess
    import sys

    code = ("import sys, app.goal; bad = [m for m in sys.modules if m.startswith(("
            "'app.catalog', 'app.gpu', 'app.swarm', 'app.llm', 'app.store'))]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_unknown_fields_and_malformed_toml_are_named():
    with pytest.raises(GoalError) as err:
        Goal.from_toml('name = "x"\n[stop]\nmax_eval = 3\n')
    assert err.value.field == "stop.max_eval"
    with pytest.raises(GoalError) as err:
        Goal.from_toml('name = "x"\ncolour = "red"\n')
    assert err.value.field == "colour"
    with pytest.raises(GoalError) as err:
        Goal.from_toml('name = "x\n')
    assert err.value.field == "toml" and "malformed TOML" in str(err.value)


def test_missing_goal_file_is_named(tmp_path):
    with pytest.raises(GoalError) as err:
        Goal.load(tmp_path / "nope.toml")
    assert err.value.field == "file" and "nope.toml" in err.value.problem


@pytest.mark.parametrize("path", sorted(GOALS.glob("*.toml")), ids=lambda p: p.name)
def test_example_goals_are_valid_and_find_their_space(path):
    goal = Goal.load(path)
    check_goal(goal)
    if goal.backend != "replay":
        assert goal.operator and goal.shapes  # catalog goals name an operator and shapes
        return
    try:
        space = goal.resolve_space_path()
    except FileNotFoundError:
        pytest.skip(f"{goal.space} is not on this machine (only the bundled spaces always are)")
    assert space.name == goal.space


def test_a_malformed_goal_file_is_named_in_its_error(tmp_path):
    bad = tmp_path / "my-goal.toml"
    bad.write_text('name = "x\n')
    with pytest.raises(GoalError) as err:
        Goal.load(bad)
    assert "malformed TOML in 'my-goal.toml'" in str(err.value)
