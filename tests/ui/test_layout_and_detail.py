"""The desktop app as a new user finds it: the layout fits a 1600×1000 screen, the
dark theme is legible, the candidate dock shows the code that ran and follows the run that is
open, parameters keep one order, the goal form keeps what it does not show (the [llm] table,
the agents' order) so a run from the form is the run `kernelswarm run` makes, and the example
list says what this machine can run."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QRect
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QApplication, QScrollArea

from app.core.types import Evaluation, Stage
from app.goal import Goal, StopRules, SwarmSettings

GEMM = "gemm_RTX_3090.json.gz"  # its parameters are not in name order (MWG, NWG, KWG, ...)


def _settle(qtbot, ms: int = 50) -> None:
    QApplication.processEvents()
    qtbot.wait(ms)


def _at_size(window, qtbot, width: int, height: int) -> None:
    window.resize(width, height)
    _settle(qtbot)


def _run_from_window(qtbot, window, timeout_ms: int = 90000) -> None:
    with qtbot.waitSignal(window.controller.finished, timeout=timeout_ms):
        window.run_goal()
    window.table.flush()


# ---- the layout fits ---------------------------------------------------------------
def test_long_run_title_keeps_the_window_on_a_1600_screen(qtbot, window):
    _at_size(window, qtbot, 1600, 1000)
    long_name = "a goal with a very long name " * 10 + "x" * 10  # 300 characters
    window.live.reset(title=f"{long_name} — starting…")
    _settle(qtbot)
    assert window.width() <= 1600
    assert window.minimumSizeHint().width() <= 1600
    assert window.live.title.text().startswith(long_name)  # the whole text is kept (tooltip)
    # the Candidate dock stays readable and on screen
    assert window.detail_dock.width() >= 300
    assert window.detail_dock.geometry().right() <= window.width()


@pytest.mark.parametrize("size", [(1600, 1000), (1366, 768)])
def test_form_buttons_are_in_view_without_scrolling_sideways(qtbot, window, size):
    _at_size(window, qtbot, *size)
    window.goal_dock.raise_()
    form = window.form
    form.backend.setCurrentIndex(form.backend.findData("replay"))  # shows the browse button
    _settle(qtbot)
    scroll = form.findChild(QScrollArea)
    viewport = scroll.viewport()
    assert scroll.horizontalScrollBar().maximum() == 0  # nothing hidden to the right
    for button in (form.shapes.add_button, form.shapes.remove_button, form.browse):
        assert button.isVisible()
        top_left = button.mapTo(viewport, QPoint(0, 0))
        rect = QRect(top_left, button.size())
        assert rect.right() <= viewport.width(), (button.text(), rect, viewport.size())
        assert rect.left() >= 0


@pytest.mark.parametrize("size", [(1600, 1000), (1366, 768)])
def test_candidate_tabs_fit_the_dock_without_scroll_arrows(qtbot, window, size):
    _at_size(window, qtbot, *size)
    tabs = window.detail.tabs
    assert tabs.tabBar().sizeHint().width() <= tabs.width()


def test_candidate_detail_fills_its_dock(qtbot, window):
    _at_size(window, qtbot, 1600, 1000)
    window.detail.tabs.setCurrentWidget(window.detail.timing)
    _settle(qtbot)
    assert window.detail_dock.width() >= 300
    assert window.detail.timing.width() >= window.detail_dock.width() - 40


# ---- dark theme -------------------------------------------------------------------------
def luminance(color: QColor) -> float:
    """Relative luminance (WCAG 2), 0 (black) to 1 (white)."""
    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    return (0.2126 * channel(color.redF()) + 0.7152 * channel(color.greenF())
            + 0.0722 * channel(color.blueF()))


def contrast_ratio(a: QColor, b: QColor) -> float:
    """WCAG contrast ratio (1 to 21; 4.5 is enough for body text)."""
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def _text_contrast(window, widget) -> float:
    """Contrast between a label's background (its commonest pixel) and its text (the pixel
    farthest from it) as drawn in the window (a label draws no background of its own)."""
    image = window.grab(QRect(widget.mapTo(window, QPoint(0, 0)), widget.size())).toImage()
    counts: dict[int, int] = {}
    for y in range(image.height()):
        for x in range(image.width()):
            rgb = image.pixel(x, y)
            counts[rgb] = counts.get(rgb, 0) + 1
    background = QColor.fromRgb(max(counts, key=counts.get))
    text = max((QColor.fromRgb(c) for c in counts),
               key=lambda c: abs(luminance(c) - luminance(background)))
    return contrast_ratio(text, background)


def test_dark_theme_draws_title_and_numbers_legibly(qtbot, window):
    from app.ui.theme import ThemeManager

    window.theme = ThemeManager(QApplication.instance())
    window.theme.changed.connect(window._theme_changed)
    window.set_theme("dark")
    try:
        window.live.reset(title="pnpoly — replay, agents: explorer")
        window.live.counters["evaluated"].setText("1,234")
        _settle(qtbot)
        for label in (window.live.title, window.live.counters["evaluated"]):
            assert _text_contrast(window, label) >= 4.5
        # and the label's own background is the dark theme's, not a stale light one
        window_bg = window.palette().color(window.backgroundRole())
        assert window_bg.lightness() < 80
        # the plot legends follow too ("best so far" was drawn in the light theme's grey)
        from app.ui.theme import DARK

        for _sample, label in window.live.convergence.legend.items:
            assert QColor(label.opts["color"]).name() == DARK.foreground
    finally:
        window.set_theme("light")


# ---- the code that ran ----------------------------------------------------------------
def _cpu_goal() -> Goal:
    return Goal(name="cpu softmax", backend="cpu", operator="softmax", shapes=[[64, 256]])


def test_source_tab_shows_the_cpu_template_with_the_configuration(qtbot):
    from app.ui.candidates import CandidateDetail, CandidateModel

    model = CandidateModel()
    detail = CandidateDetail(model)
    qtbot.addWidget(detail)
    detail.set_run(_cpu_goal(), "c")
    ev = Evaluation(key="k1", config={"VEC": 8, "ACC": 2, "ONLINE": 1, "CHUNK": 4,
                                      "EXP_IMPL": 0, "THREADS": 2},
                    ok=True, value=0.1, agent="explorer",
                    resources={"compile_command": "cc -O3 -fopenmp -DVEC=8 kernel.c"},
                    log="kernel.c: warning: unused variable 'x'",
                    stages=[Stage("compile", True, 0.2, "")])
    detail.show_evaluation(ev)
    source = detail.source.toPlainText()
    # the file the compiler got (its line numbers are the compiler's), under its -D parameters
    params = source.split("Parameters:")[1].splitlines()[0]
    assert "ks_kernel" in source and "-DVEC=8" in params and "-DACC=2" in params
    log = detail.log.toPlainText()
    assert "cc -O3 -fopenmp -DVEC=8 kernel.c" in log and "unused variable" in log

    detail.show_evaluation(Evaluation(key="k2", config={"VEC": 4}, ok=True, value=0.2,
                                      agent="local"))
    assert detail.log.toPlainText().count("not recorded") == 2  # command and output


def test_source_tab_shows_a_candidates_own_source(qtbot):
    from app.ui.candidates import CandidateDetail, CandidateModel

    detail = CandidateDetail(CandidateModel())
    qtbot.addWidget(detail)
    detail.set_run(_cpu_goal(), "c")
    own = "void ks_kernel(const float *x, float *y) { /* rewritten by the llm agent */ }"
    detail.show_evaluation(Evaluation(key="k3", config={"VEC": 4}, ok=True, value=0.2,
                                      agent="llm", source=own))
    text = detail.source.toPlainText()
    assert "rewritten by the llm agent" in text and "-DVEC=4" in text


# ---- the dock follows the open run; one parameter order -----------------------------------
def test_opening_another_run_clears_the_candidate_dock(qtbot, window, replay_goal, run_headless):
    store = window.store()
    a = run_headless(store, replay_goal(max_evals=15, seed=1, name="run A"))
    b = run_headless(store, replay_goal(max_evals=15, seed=2, name="run B"))
    window.open_run(a)
    window.table.select_key(window.table.model.rows[0][1].key)
    assert window.detail.current is not None
    window.open_run(b)
    assert window.detail.current is None
    assert window.detail.header.text() == "Select a candidate"
    assert window.detail.summary.toPlainText() == ""


def test_parameter_order_is_the_same_live_and_reopened(qtbot, window):
    goal = Goal(name="gemm order", space=GEMM, stop=StopRules(max_evals=12),
                swarm=SwarmSettings(agents=["explorer"], workers=1, seed=4))
    window.form.set_goal(goal)
    _run_from_window(qtbot, window)
    run_id = window.current_run_id
    model = window.table.model
    live_text = [model.index(r, 6).data() for r in range(model.rowCount())]
    first = model.evaluation(0)
    window.table.select_key(first.key)
    live_summary = window.detail.summary.toPlainText()
    live_diff = window.detail.diff.toPlainText()
    names = model.parameter_names(first)
    assert names[:3] == ["MWG", "NWG", "KWG"]  # the space's order, not the names' order

    window.open_run(run_id)
    model = window.table.model
    assert [model.index(r, 6).data() for r in range(model.rowCount())] == live_text
    window.table.select_key(first.key)
    assert window.detail.summary.toPlainText() == live_summary
    assert window.detail.diff.toPlainText() == live_diff
    window.table.select_key(model.best.key)
    assert "this candidate is the best" in window.detail.diff.toPlainText()
    assert model.parameter_names(model.evaluation(0)) == names


# ---- items 8 and 11: the form keeps what it does not show -------------------------------------------
def test_a_goals_llm_table_survives_the_form(qtbot, tmp_path):
    from app.ui.goal_form import GoalForm

    form = GoalForm()
    qtbot.addWidget(form)
    llm = {"base_url": "http://127.0.0.1:9/v1", "model": "tiny-coder", "max_retries": 7}
    goal = Goal(name="with llm", space="pnpoly_RTX_3090.json.gz", llm=dict(llm))
    form.set_goal(goal)
    assert form.build_goal().llm == llm
    form.name.setText("renamed")
    saved = tmp_path / "goal.toml"
    form.save(saved)
    again = Goal.load(saved)
    assert again.llm == llm and again.name == "renamed"
    form.load(saved)
    assert form.build_goal().llm == llm


def test_the_form_keeps_the_goals_agent_order(qtbot):
    from app.ui.goal_form import GoalForm

    form = GoalForm()
    qtbot.addWidget(form)
    form.set_goal(Goal(name="order", space="pnpoly_RTX_3090.json.gz",
                       swarm=SwarmSettings(agents=["evolution", "local", "explorer"])))
    assert form.build_goal().swarm.agents == ["evolution", "local", "explorer"]
    form.agent_boxes["local"].setChecked(False)
    form.agent_boxes["model"].setChecked(True)
    assert form.build_goal().swarm.agents == ["evolution", "explorer", "model"]


def test_a_goal_runs_the_same_from_the_form_as_headless(qtbot, window, tmp_path):
    from app.session import RunSession
    from app.store import Store

    path = tmp_path / "same.toml"
    path.write_text('name = "pnpoly same"\nspace = "pnpoly_RTX_3090.json.gz"\nbackend = "replay"\n'
                    "[stop]\nmax_evals = 40\n"
                    '[swarm]\nagents = ["evolution", "local", "explorer"]\nworkers = 1\nseed = 5\n')
    store = Store(tmp_path / "headless.sqlite")
    session = RunSession(Goal.load(path), store=store)
    session.run()
    headless = [e.key for _, e, _ in store.load_evaluations(session.run_id)]
    store.close()

    assert window.open_goal(str(path))
    qtbot.waitUntil(lambda: window.act_run.isEnabled(), timeout=3000)
    _run_from_window(qtbot, window)
    from_form = [e.key for _, e, _ in window.store().load_evaluations(window.current_run_id)]
    assert len(from_form) == 40
    assert from_form == headless


# ---- the example list says what runs here -------------------------------------------------
def test_examples_say_whether_this_machine_can_run_them(qtbot):
    from app.ui.goal_form import EXAMPLE_STATUS_ROLE, GoalForm, backend_usable, example_goals

    started = time.monotonic()
    form = GoalForm()
    qtbot.addWidget(form)
    combo = form.example
    assert combo.count() == len(example_goals()) + 1
    cuda_here = backend_usable("cuda")[0]
    for i in range(1, combo.count()):
        ok, why = combo.itemData(i, EXAMPLE_STATUS_ROLE)
        name = Path(combo.itemData(i)).stem
        text = combo.itemText(i)
        if name.startswith("cuda_"):
            assert ok == cuda_here
            if not cuda_here:
                assert "needs an NVIDIA GPU" in text and "needs an NVIDIA GPU" in why
        if name.startswith(("cpu_", "pnpoly_", "gemm_")):
            assert ok, (name, why)  # a C compiler and these spaces are on every test machine
        assert ok == ("cannot run here" not in text)
    # the probes ran once: a second form asks the cache
    started = time.monotonic()
    second = GoalForm()
    qtbot.addWidget(second)
    assert time.monotonic() - started < 2.0


def test_compare_plot_names_the_unit(qtbot, window, replay_goal, run_headless):
    store = window.store()
    a = run_headless(store, replay_goal(max_evals=10, seed=1, name="run A"))
    b = run_headless(store, replay_goal(max_evals=10, seed=2, name="run A"))
    window.compare_runs([a, b])
    assert window.compare.getPlotItem().getAxis("left").labelText == "best so far (ms)"


def test_reference_line_labels_sit_apart(qtbot):
    """Baseline and hardware limit close together (a CPU run's 0.12 ms and 0.002 ms) must not
    print their labels on top of each other."""
    from app.ui.live_view import ConvergencePlot

    plot = ConvergencePlot()
    qtbot.addWidget(plot)
    plot.set_reference("baseline", 0.1229, "#7f7f7f", "baseline 0.1229 ms")
    plot.set_reference("limit", 0.0018, "#c0392b", "hardware limit 0.0018 ms")
    plot.set_reference("target", 0.06, "#2e9d4f", "target 0.06 ms")
    positions = [plot._lines[n].label.orthoPos for n in ("baseline", "target", "limit")]
    assert len(set(positions)) == 3
    # and each label stays inside a narrow plot (the limit's used to run off its right edge)
    plot.resize(360, 300)
    plot.show()
    plot.getPlotItem().setRange(xRange=(1, 8), yRange=(0, 12), padding=0)
    qtbot.wait(50)
    view = plot.getPlotItem().vb.sceneBoundingRect()
    for name in ("baseline", "target", "limit"):
        label = plot._lines[name].label.sceneBoundingRect()
        assert view.left() - 1 <= label.left() and label.right() <= view.right() + 1, name


def test_settings_the_form_does_not_show_survive_inside_its_tables(qtbot):
    """A field added to a table the form edits (say [swarm] transfer = false) is kept too:
    the form changes only the fields it shows."""
    from dataclasses import dataclass

    from app.goal import Constraints
    from app.ui.goal_form import GoalForm

    @dataclass
    class SwarmPlus(SwarmSettings):
        not_in_the_form: int = 0

    @dataclass
    class ConstraintsPlus(Constraints):
        also_not_in_the_form: str = ""

    form = GoalForm()
    qtbot.addWidget(form)
    goal = Goal(name="extra", space="pnpoly_RTX_3090.json.gz",
                swarm=SwarmPlus(agents=["explorer"], workers=2, seed=9, not_in_the_form=7),
                constraints=ConstraintsPlus(restrictions=["tile_size <= 8"],
                                            also_not_in_the_form="kept"))
    form.set_goal(goal)
    form.seed.setValue(10)
    built = form.build_goal()
    assert built.swarm.not_in_the_form == 7 and built.swarm.seed == 10
    assert built.constraints.also_not_in_the_form == "kept"
    assert built.constraints.restrictions == ["tile_size <= 8"]


def test_history_columns_fit_the_dock(qtbot, window, replay_goal, run_headless):
    _at_size(window, qtbot, 1366, 768)
    store = window.store()
    for seed in (1, 2):
        run_headless(store, replay_goal(max_evals=10, seed=seed, name="pnpoly with a long goal name"))
    window.history.refresh()
    window.history_dock.raise_()
    _settle(qtbot, 100)
    tree = window.history.tree
    assert tree.horizontalScrollBar().maximum() == 0  # Best and Started are in view
    goal_item = window.history.item_for_run(min(window.history.runs)).parent()
    assert goal_item.isFirstColumnSpanned()  # the goal's name is not cut at the first column
    # a run's label ("run 123") is whole after three levels of indentation
    text_room = tree.columnWidth(0) - 3 * tree.indentation() - 6
    assert tree.fontMetrics().horizontalAdvance("run 123") <= text_room
    assert tree.header().sectionViewportPosition(4) + tree.header().sectionSize(4) \
        <= tree.viewport().width()
