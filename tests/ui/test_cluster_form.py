"""The run settings' cluster field: the goal's [cluster] address in and out of the
form; empty means this machine (no [cluster] table, no Ray)."""

from __future__ import annotations

from app.goal import Goal


def test_the_cluster_field_round_trips_and_empty_means_here(qtbot, tmp_path):
    from app.ui.goal_form import GoalForm

    form = GoalForm()
    qtbot.addWidget(form)
    goal = Goal(name="on ray", space="pnpoly_RTX_3090.json.gz",
                cluster={"address": "ray://head:10001", "devices": "model:A100"})
    form.set_goal(goal)
    assert form.cluster.text() == "ray://head:10001"
    assert form.build_goal().cluster == {"address": "ray://head:10001", "devices": "model:A100"}
    form.cluster.setText("10.0.0.5:6379")
    saved = tmp_path / "goal.toml"
    form.save(saved)
    assert Goal.load(saved).cluster["address"] == "10.0.0.5:6379"
    form.cluster.setText("")
    assert form.build_goal().cluster == {}
    form.set_goal(Goal(name="here", space="pnpoly_RTX_3090.json.gz"))
    assert form.cluster.text() == "" and form.build_goal().cluster == {}
