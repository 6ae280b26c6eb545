"""Each numeric goal field has one range and one default (app.goal.ranges): the loader refuses
a value outside it with one line naming the field and the range, and the goal form and the
custom-kernel page offer exactly that range and start from that default."""

from __future__ import annotations

import pytest

from app.goal import Goal, GoalError
from app.goal.ranges import FIELDS

GOAL = 'name = "g"\nspace = "pnpoly_RTX_3090.json.gz"\n'


def _toml(name: str, value: object) -> str:
    table, _, key = name.rpartition(".")
    line = f"{key} = {value!r}\n".replace("'", '"')
    return GOAL + line if not table else f"{GOAL}[{table}]\n{line}"


def _outside(rng) -> list:
    below = rng.low - (1 if rng.integer else 0.5)
    return [below] if rng.high == float("inf") else [below, rng.high + 1]


@pytest.mark.parametrize("name", sorted(FIELDS))
def test_the_loader_refuses_a_value_outside_the_range_in_one_line(tmp_path, name):
    rng = FIELDS[name]
    for value in _outside(rng):
        path = tmp_path / "g.toml"
        text = _toml(name, value)
        if name == "target.value":
            text = text.replace("[target]\n", '[target]\nkind = "absolute"\n')
        path.write_text(text)
        with pytest.raises(GoalError) as err:
            Goal.load(path).validate()
        message = str(err.value)
        assert err.value.field == name and message.startswith(name + ":")
        assert "\n" not in message and ("between" in message or ">=" in message), message
    inside = rng.low if rng.default is None else rng.default
    path = tmp_path / "ok.toml"
    path.write_text(_toml(name, inside).replace("[target]\n", '[target]\nkind = "absolute"\n')
                    .replace("value = 0.0", "value = 1.0"))
    Goal.load(path).validate()


def test_goal_defaults_are_the_tables():
    goal = Goal()
    assert goal.stop.max_evals == FIELDS["stop.max_evals"].default
    assert goal.stop.time_budget_s == FIELDS["stop.time_budget_s"].default
    assert goal.stop.plateau_patience == FIELDS["stop.plateau_patience"].default
    assert goal.swarm.workers == FIELDS["swarm.workers"].default
    assert goal.swarm.seed == FIELDS["swarm.seed"].default


FORM_SPINS = {"max_evals": "stop.max_evals", "time_budget": "stop.time_budget_s",
              "plateau": "stop.plateau_patience", "workers": "swarm.workers",
              "seed": "swarm.seed", "target_value": "target.value"}


def test_the_forms_spin_boxes_offer_the_goals_ranges(qtbot):
    pytest.importorskip("PySide6")
    from app.ui.custom_kernel import CustomKernelPage
    from app.ui.goal_form import GoalForm

    form = GoalForm()
    qtbot.addWidget(form)
    for attr, name in FORM_SPINS.items():
        box, rng = getattr(form, attr), FIELDS[name]
        assert (box.minimum(), box.maximum()) == (rng.low, rng.high), name
    device = FIELDS["device"]  # optional: one step below the range reads "automatic"
    assert (form.device.minimum(), form.device.maximum()) == (device.low - 1, device.high)
    form.set_goal(Goal(name="defaults", space="pnpoly_RTX_3090.json.gz"))
    assert form.max_evals.value() == FIELDS["stop.max_evals"].default
    assert form.workers.value() == FIELDS["swarm.workers"].default

    page = CustomKernelPage()
    qtbot.addWidget(page)
    rng = FIELDS["stop.max_evals"]
    assert (page.max_evals.minimum(), page.max_evals.maximum()) == (rng.low, rng.high)
    assert page.max_evals.value() == rng.default
