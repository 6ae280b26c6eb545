"""Fill the goal form as a user would, run it, and check charts, table and database agree."""

from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import Qt

from app.store import Store


def test_form_run_updates_chart_table_and_database(qtbot, window):
    form = window.form
    form.name.clear()
    qtbot.keyClicks(form.name, "pnpoly from the form")
    form.backend.setFocus()
    form.backend.setCurrentIndex(form.backend.findData("replay"))
    form.kernel.setCurrentIndex(form.kernel.findData("pnpoly_RTX_3090.json.gz"))
    form.max_evals.lineEdit().selectAll()
    qtbot.keyClicks(form.max_evals, "45")
    form.workers.lineEdit().selectAll()
    qtbot.keyClicks(form.workers, "1")
    form.seed.lineEdit().selectAll()
    qtbot.keyClicks(form.seed, "11")
    form.agent_boxes["model"].setChecked(False)  # keep the test fast: three cheap agents
    qtbot.waitUntil(lambda: window.act_run.isEnabled(), timeout=3000)

    goal = form.goal()
    assert (goal.name, goal.space, goal.stop.max_evals, goal.swarm.seed) == (
        "pnpoly from the form", "pnpoly_RTX_3090.json.gz", 45, 11)

    toolbar = window.findChild(type(window.toolbar_main), "toolbar:main")
    run_button = toolbar.widgetForAction(window.act_run)
    with qtbot.waitSignal(window.controller.finished, timeout=60000) as finished:
        qtbot.mouseClick(run_button, Qt.LeftButton)
    result = finished.args[0]
    window.live.redraw()
    window.table.flush()

    # chart buffers: every evaluation, best-so-far is the running minimum of correct values
    data = window.live.data
    assert len(data) == result.evaluations == 45
    values = data.value.view()
    ok = values[~np.isnan(values)]
    assert data.best_value == ok.min() == result.best.value
    running = np.fmin.accumulate(np.where(np.isnan(values), np.inf, values))
    assert np.allclose(data.best.view()[np.isfinite(running)], running[np.isfinite(running)])
    # what is on screen: points per agent add up to the correct candidates, staircase ends at best
    scattered = window.live.convergence.point_count()
    assert scattered == len(ok)
    x, y = window.live.convergence._best.getData()
    assert y[-1] == data.best_value and x[-1] == 45

    # table: one row per evaluation; sorting by objective puts the best first
    assert window.table.model.rowCount() == 45
    window.table.view.sortByColumn(3, Qt.AscendingOrder)
    top = window.table.model.index(0, 3)
    assert math.isclose(float(top.data().split()[0]), data.best_value, rel_tol=1e-3)  # "8.714 ±1%"

    # database: the same run, committed
    store = Store(window.db_path)
    run = store.get_run(window.current_run_id)
    assert run["status"] == "finished" and run["evaluations"] == 45
    assert run["best_value"] == data.best_value
    stored = [e.key for _, e, _ in store.load_evaluations(window.current_run_id)]
    assert stored == [ev.key for _, ev, _ in window.table.model.rows]
    store.close()


def test_invalid_input_keeps_run_disabled_with_message(qtbot, window):
    form = window.form
    qtbot.waitUntil(lambda: window.act_run.isEnabled(), timeout=3000)

    form.name.clear()
    qtbot.waitUntil(lambda: not window.act_run.isEnabled(), timeout=3000)
    label = form.errors["name"]
    assert label.isVisible() and "non-empty" in label.text()

    qtbot.keyClicks(form.name, "ok again")
    qtbot.waitUntil(lambda: window.act_run.isEnabled(), timeout=3000)
    assert not label.isVisible()

    form.shapes.add_shape_text("128 x abc")
    qtbot.waitUntil(lambda: not window.act_run.isEnabled(), timeout=3000)
    assert form.errors["shapes"].isVisible() and "'abc' is not an integer" in form.errors["shapes"].text()
    form.shapes.list.takeItem(0)
    form.shapes.changed.emit()
    qtbot.waitUntil(lambda: window.act_run.isEnabled(), timeout=3000)

    form.target_kind.setCurrentIndex(form.target_kind.findData("fraction_of_limit"))
    form.target_value.setValue(1.5)
    qtbot.waitUntil(lambda: not window.act_run.isEnabled(), timeout=3000)
    assert "at most 1.0" in form.errors["target.value"].text()

    for box in form.agent_boxes.values():
        box.setChecked(False)
    form.target_value.setValue(0.8)
    qtbot.waitUntil(lambda: form.errors["swarm.agents"].isVisible(), timeout=3000)
    assert not window.act_run.isEnabled()
    # Run via the shortcut path does nothing while invalid
    window.run_goal()
    assert window.controller.state == "idle"
