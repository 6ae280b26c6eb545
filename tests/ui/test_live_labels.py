"""Labels of the Run view that need no decoding: the budget bar names both budgets,
the ETA holds still while paused, a transferred start's 1.00x says what it is measured against,
a replay's clock says it is simulated, the axis has no '(x0.001)' and the legend sits outside
the data."""

from __future__ import annotations

import time

from app.core.events import Evaluated, RunStarted
from app.core.types import Evaluation
from app.ui.live_view import LiveView, budget_text


def _events(values: list[float], start: int = 1) -> list[Evaluated]:
    return [Evaluated(index=start + i, evaluation=Evaluation(key=f"k{start + i}", config={"A": i}, ok=True,
                                                              value=v, agent="explorer"),
                      elapsed_s=0.5 * (start + i), best_value=min(values[: i + 1]))
            for i, v in enumerate(values)]


def _view(qtbot, **started) -> LiveView:
    view = LiveView()
    qtbot.addWidget(view)
    view.resize(640, 420)
    view.show()
    view.reset(unit="ms")
    view.on_run_started(RunStarted(goal_name="g", backend=started.pop("backend", "cpu"), agents=["explorer"],
                                   max_evals=30, time_budget_s=started.pop("time_budget_s", None), **started))
    return view


def test_budget_bar_names_its_budgets():
    assert budget_text(3, 60, 22.0, 120.0) == ("3 / 60 evaluations (5%) · 0:22 / 2:00 of the time budget "
                                               "(18%)")
    assert budget_text(3, None, 1.0, None) == "3 evaluations"
    assert "simulated time" in budget_text(3, 60, 12.2, 60.0, simulated=True)


def test_eta_holds_still_while_paused(qtbot):
    view = _view(qtbot)
    view._started_wall = time.monotonic() - 3.0  # three evaluations in three seconds
    view.on_evaluated(_events([3.0, 2.0, 1.5]))
    view.redraw()
    assert view.eta.text().startswith("ETA")
    view.set_paused(True)
    paused = view.eta.text()
    assert paused.endswith("(paused)")
    qtbot.wait(1300)  # before: the ETA grew with every second of the pause
    view.redraw()
    assert view.eta.text() == paused
    view.set_paused(False)
    view.redraw()
    assert view.eta.text() == paused.split(" (")[0]  # the pause was not counted as time spent


def test_transferred_start_says_what_its_speedup_is_over(qtbot):
    view = _view(qtbot, learned_from=[{"run_id": 4, "device": "cpu", "evaluations": 20}])
    view.on_evaluated(_events([2.0, 2.5]))
    view.redraw()
    assert view.counters["speedup"].text() == "1.00×"
    assert view.counter_names["speedup"].text() == "Speedup over the transferred start"
    assert "run 4" in view.counters["speedup"].toolTip()


def test_axis_legend_and_replay_clock(qtbot):
    view = _view(qtbot, backend="replay", time_budget_s=60.0)
    view.on_evaluated(_events([2.0, 1.0, 0.5]))
    view.redraw()
    item = view.convergence.getPlotItem()
    assert "x0.001" not in item.getAxis("left").labelString()
    view.set_use_time(True)
    assert "simulated" in item.getAxis("bottom").labelString()
    assert "simulated time" in view.progress.format()
    legend = view.convergence.legend.sceneBoundingRect()
    assert legend.height() > 0 and not legend.intersects(item.getViewBox().sceneBoundingRect())
