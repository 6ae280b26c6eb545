"""A CPU goal built in the form runs end to end, with the engine in its own process as in the
app (the CPU backend starts worker processes from it), and a run that cannot start says why."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.gpu.cpu import find_compiler
from app.store import Store
from app.ui.candidates import COLUMNS, RESOURCE_COLUMNS

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")


def _fill_cpu_goal(qtbot, form, name: str) -> None:
    form.name.clear()
    qtbot.keyClicks(form.name, name)
    form.backend.setCurrentIndex(form.backend.findData("cpu"))
    form.kernel.setCurrentIndex(form.kernel.findData("softmax"))
    form.shapes.set_shapes([[16, 80]])  # tiny: compiled, verified and timed in seconds
    form.max_evals.lineEdit().selectAll()
    qtbot.keyClicks(form.max_evals, "4")
    form.time_budget.setValue(0.0)
    for name_, box in form.agent_boxes.items():
        box.setChecked(name_ == "explorer")


@pytest.mark.slow
def test_cpu_goal_runs_from_the_form(qtbot, window):
    window.device_label.setText("an earlier device")
    _fill_cpu_goal(qtbot, window.form, "cpu softmax from the form")
    qtbot.waitUntil(lambda: window.act_run.isEnabled(), timeout=3000)
    goal = window.form.goal()
    assert (goal.backend, goal.operator, goal.stop.max_evals) == ("cpu", "softmax", 4)

    run_button = window.toolbar_main.widgetForAction(window.act_run)
    results, failures = [], []
    window.controller.finished.connect(results.append)
    window.controller.failed.connect(failures.append)
    qtbot.mouseClick(run_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: bool(results or failures), timeout=120_000)
    assert failures == []
    result = results[0]
    window.table.flush()

    # the window: evaluations arrived, the title and the status bar name this run and device
    assert result.evaluations == 4 and len(window.live.data) == 4
    assert window.table.model.rowCount() == 4
    shown = [c for c in range(len(COLUMNS)) if not window.table.view.isColumnHidden(c)]
    assert not set(RESOURCE_COLUMNS) & set(shown)  # no empty CUDA-only columns on a CPU run
    assert "starting" not in window.live.title.text()
    assert "cpu softmax from the form" in window.windowTitle()
    assert window.device_label.text() not in ("an earlier device", "Preparing the device…")

    # the database: finished, with its evaluations
    with Store(window.db_path) as store:
        run = store.get_run(window.current_run_id)
        stored = [e.key for _, e, _ in store.load_evaluations(window.current_run_id)]
    assert run["status"] == "finished" and run["evaluations"] == 4 and run["backend"] == "cpu"
    assert stored == [ev.key for _, ev, _ in window.table.model.rows]


@pytest.mark.slow
def test_a_run_that_cannot_start_shows_why(qtbot, window):
    """The error reaches the window: the run title and the status bar say the run failed."""
    window.device_label.setText("an earlier device")
    _fill_cpu_goal(qtbot, window.form, "cpu softmax that cannot start")
    qtbot.waitUntil(lambda: window.act_run.isEnabled(), timeout=3000)
    goal = window.form.goal()
    goal.shapes = [[16, 0]]  # accepted by the form's parser, refused by the backend
    with qtbot.waitSignal(window.controller.failed, timeout=60_000) as failed:
        window._start(goal, None, f"{goal.name} — starting…")
    message = failed.args[0]
    assert message
    assert "failed" in window.live.title.text() and "starting" not in window.live.title.text()
    assert window.device_label.text() == "No device in use"
    assert "Run failed" in window.statusBar().currentMessage()
    assert window.controller.state == "idle"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:  # a zombie has ended
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except FileNotFoundError:
        return []


@pytest.mark.slow
def test_closing_the_window_ends_the_engine_and_its_workers(qtbot, window):
    """The engine is no daemon any more: closing the window must still end it (and the CPU
    worker processes it started), with the run stored as stopped, resumable."""
    _fill_cpu_goal(qtbot, window.form, "cpu softmax closed mid-run")
    window.form.max_evals.setValue(10_000)
    qtbot.waitUntil(lambda: window.act_run.isEnabled(), timeout=3000)
    window.run_goal()
    qtbot.waitUntil(lambda: len(window.live.data) >= 2, timeout=120_000)
    engine = window.controller._engine.process
    workers = _children(engine.pid)
    assert workers, "the CPU backend runs candidates in worker processes"
    run_id = window.current_run_id

    window.close()
    assert not _alive(engine.pid)
    qtbot.waitUntil(lambda: not any(_alive(p) for p in workers), timeout=10_000)
    with Store(window.db_path) as store:
        run = store.get_run(run_id)
    assert run["status"] == "stopped" and run["evaluations"] >= 2
