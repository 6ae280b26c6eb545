"""The "Your kernel" page (pytest-qt, offscreen): the entry offered from the source, parameters
pasted as Python lists, restrictions checked as typed, a real compile of one configuration in a
subprocess, save as TOML, and a C kernel built on the page tuned end to end from the window."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from test_custom_kernel import REFERENCE_PY, SCALE_C

from app.goal import Goal
from app.session import check_goal
from app.store import Store
from app.ui.custom_kernel import CustomKernelPage
from app.ui.goal_files import open_custom_kernel_page

pytestmark = pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("cc")), reason="needs a C compiler")


def _fill(qtbot, page: CustomKernelPage, tmp_path: Path) -> None:
    (tmp_path / "scale_add.c").write_text(SCALE_C)
    (tmp_path / "reference.py").write_text(REFERENCE_PY)
    page.name.setText("scale_add from the page")
    page.set_source(str(tmp_path / "scale_add.c"))
    assert [page.entry.itemText(i) for i in range(page.entry.count())] == ["scale_add"]
    page.shapes.setText("1001")
    page.add_param("UNROLL", "[1, 2, 4, 8]")  # pasted Python lists
    page.add_param("THREADS", "1, 2")
    page.add_param("BUG", "[0]")
    # the arguments are offered from the parsed signature: names, pointer or scalar, dtype
    rows = [tuple(page._text(page.args, r, c) for c in range(5)) for r in range(page.args.rowCount())]
    assert rows == [("out", "output", "float32", "n", "normal"), ("x", "input", "float32", "n", "normal"),
                    ("b", "input", "float32", "n", "normal"), ("a", "scalar", "float32", "a", "normal"),
                    ("n", "scalar", "int32", "n", "normal")]
    page.args.item(2, 3).setText("8")
    page.args.cellWidget(2, 4).setCurrentText("uniform")
    page.args.item(3, 3).setText("2.5")
    page.set_reference(str(tmp_path / "reference.py"))
    assert page.reference_function.currentText() == "scale_add"
    page.max_evals.setValue(4)


def test_page_builds_checks_compiles_and_saves(qtbot, tmp_path):
    page = CustomKernelPage()
    qtbot.addWidget(page)
    _fill(qtbot, page, tmp_path)
    assert not page.geometry.isVisibleTo(page)  # a C kernel has no launch geometry

    qtbot.keyClicks(page.restrictions, "UNROLL * THREADS <")
    assert "not a valid expression" in page.restriction_status.text()
    page.restrictions.setPlainText("UNROLL * THREADS <= 8\nBOGUS > 1")
    assert "line 2" in page.restriction_status.text() and "BOGUS" in page.restriction_status.text()
    page.restrictions.setPlainText("UNROLL * THREADS <= 8")
    assert page.restriction_status.text().startswith("✓")

    with qtbot.waitSignal(page.preview_done, timeout=60_000) as done:
        assert page.compile_preview()
    ok, text = done.args
    assert ok, text
    assert "configuration: UNROLL=" in text and "compiled with" in text
    assert page.preview_output.toPlainText() == text

    page.params.item(0, 1).setText("[1, 2, 4")  # a broken list is named
    with qtbot.waitSignal(page.preview_done, timeout=1000, raising=False):
        assert not page.compile_preview()
    assert "kernel.tune_params.UNROLL" in page.problem.text()
    page.params.item(0, 1).setText("[1, 2, 4, 8]")

    out = tmp_path / "saved" / "goal.toml"
    out.parent.mkdir()
    assert page.save(out)
    goal = Goal.load(out)
    assert goal.kernel.source == "../scale_add.c"  # relative to the goal file
    assert goal.kernel.tune_params == {"UNROLL": [1, 2, 4, 8], "THREADS": [1, 2], "BUG": [0]}
    assert goal.kernel.restrictions == ["UNROLL * THREADS <= 8"]
    assert check_goal(goal).name == "cpu"


def test_a_wrong_page_names_the_field(qtbot, tmp_path):
    page = CustomKernelPage()
    qtbot.addWidget(page)
    _fill(qtbot, page, tmp_path)
    page.args.item(0, 3).setText("n * m")
    assert page.use_goal() is None
    assert "kernel.args[0].shape" in page.problem.text() and "'m'" in page.problem.text()


def test_cuda_source_shows_the_launch_geometry(qtbot, tmp_path):
    page = CustomKernelPage()
    qtbot.addWidget(page)
    src = tmp_path / "k.cu"
    src.write_text("__global__ void first(float *x) {}\n__global__ void second(float *y) {}\n")
    page.set_source(str(src))
    assert page.language.currentData() == "cuda" and page.geometry.isVisibleTo(page)
    assert [page.entry.itemText(i) for i in range(page.entry.count())] == ["first", "second"]


@pytest.mark.slow
def test_c_kernel_from_the_page_is_tuned_from_the_window(qtbot, window, tmp_path):
    page = open_custom_kernel_page(window)
    _fill(qtbot, page, tmp_path)
    assert page.use_goal() is not None
    goal = window.form.goal()  # the window's form now holds the custom goal
    assert goal.kernel is not None and goal.kernel.entry == "scale_add" and goal.stop.max_evals == 4
    for name, box in window.form.agent_boxes.items():
        box.setChecked(name == "explorer")
    qtbot.waitUntil(lambda: window.act_run.isEnabled(), timeout=3000)
    results, failures = [], []
    window.controller.finished.connect(results.append)
    window.controller.failed.connect(failures.append)
    qtbot.mouseClick(window.toolbar_main.widgetForAction(window.act_run), Qt.LeftButton)
    qtbot.waitUntil(lambda: bool(results or failures), timeout=180_000)
    assert failures == []
    result = results[0]
    assert result.evaluations == 4
    with Store(window.db_path) as store:
        run = store.get_run(window.current_run_id)
        stored = [e for _, e, _ in store.load_evaluations(window.current_run_id)]
    assert run["status"] == "finished" and run["backend"] == "cpu"
    with Store(window.db_path) as store:
        stored_goal = store.goal_of_run(window.current_run_id)
    assert stored_goal.kernel.entry == "scale_add" and stored_goal.operator == ""
    assert len(stored) == 4 and all(e.ok for e in stored), [e.detail for e in stored]
