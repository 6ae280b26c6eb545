"""A hardware limit far beyond every result (a CPU transpose at 2 GB/s under a 28.9 GB/s L3
roof) is named in the plot's corner instead of drawn to scale: drawn, it squeezed the results
into a flat line at the bottom of the Run view (seen when a stored run was opened at
1366x768). A limit near the results stays a line."""

from __future__ import annotations

from app.core.events import Evaluated, RunStarted
from app.core.types import Evaluation
from app.ui.live_view import LiveView


def _view(qtbot, limit: float) -> LiveView:
    view = LiveView()
    qtbot.addWidget(view)
    view.resize(640, 420)
    view.show()
    view.reset(minimize=False, unit="GB/s")
    view.on_run_started(RunStarted(goal_name="transpose", backend="cpu", agents=["explorer"],
                                   max_evals=8, time_budget_s=None, baseline_value=0.4623,
                                   limit_value=limit,
                                   unit="GB/s"))
    values = [1.58, 1.32, 0.40, 1.34, 0.98, 1.22, 2.02, 1.13]
    view.on_evaluated([Evaluated(index=i + 1, evaluation=Evaluation(
        key=f"k{i}", config={"A": i}, ok=True, value=v, agent="explorer"), elapsed_s=i + 1.0,
        best_value=max(values[: i + 1])) for i, v in enumerate(values)])
    view.redraw()
    view.convergence.getPlotItem().getViewBox().autoRange()
    return view


def test_a_far_limit_is_named_not_drawn(qtbot):
    view = _view(qtbot, 28.9)
    plot = view.convergence
    top = plot.getPlotItem().getViewBox().viewRange()[1][1]
    assert top < 5.0, top  # the results fill the plot (the 28.9 line took it to 30)
    assert "limit" not in plot._lines or not plot._lines["limit"].isVisible()
    notes = [item.toPlainText() for item in plot._far.values()]
    assert notes == ["hardware limit 28.9 GB/s ↑ off the plot, above"]
    assert plot._far["limit"].isVisible()


def test_a_near_limit_stays_a_line(qtbot):
    view = _view(qtbot, 2.5)
    plot = view.convergence
    assert plot._lines["limit"].isVisible() and not plot._far
    assert plot.getPlotItem().getViewBox().viewRange()[1][1] >= 2.5
