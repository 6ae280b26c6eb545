"""A goal that brings its own kernel shows it in the Operator box (not the first catalog
operator), keeps its [kernel] table through the form, and loses it when an operator is picked."""

from __future__ import annotations

from project_paths import GOALS

from app.goal import Goal


def test_the_operator_box_names_the_goals_own_kernel(qtbot):
    from app.ui.goal_form import GoalForm

    form = GoalForm()
    qtbot.addWidget(form)
    form.set_goal(Goal.load(GOALS / "custom" / "pnpoly_cuda" / "goal.toml"))
    assert form.kernel.currentText() == "your own kernel: pnpoly"
    goal = form.goal()
    assert goal.operator == "" and goal.kernel is not None and goal.kernel.entry == "pnpoly"

    form.kernel.setCurrentIndex(form.kernel.findData("softmax"))
    picked = form.build_goal()
    assert picked.operator == "softmax" and picked.kernel is None

    form.set_goal(Goal(name="catalog", backend="cuda", operator="softmax"))  # no own kernel
    assert all("own kernel" not in form.kernel.itemText(i) for i in range(form.kernel.count()))
    assert form.kernel.currentText() == "softmax"
