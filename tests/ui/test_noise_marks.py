"""Figures in the candidate table carry their spread, a busy machine's figures say so, and a
figure above the roof is never a plain percentage above 100."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.core.types import Evaluation
from app.ui.candidates import CandidateTable


def _ev(key: str, value: float, **metrics) -> Evaluation:
    return Evaluation(key=key, config={"A": 1}, ok=True, value=value, time_ms=value, p10_ms=value * 0.9,
                      p90_ms=value * 1.1, metrics={"spread": 0.2, "samples": 9, **metrics})


def test_spread_busy_and_above_roof_are_shown(qtbot):
    table = CandidateTable()
    qtbot.addWidget(table)
    table.model.reset(minimize=True, baseline=None, limit=1.0, unit="ms")
    table.add([(1, _ev("quiet", 2.0), 0.0), (2, _ev("busy", 3.0, noisy=1.0, load_before=3.0,
                                                    load_after=3.5, cpu_count=2), 0.0),
               (3, _ev("impossible", 0.5), 0.0)])
    table.flush()
    model = table.model
    text = {model.evaluation(r).key: [model.data(model.index(r, c)) for c in range(6)]
            for r in range(model.rowCount())}
    assert text["quiet"][3] == "2 ±10%"
    assert text["busy"][3].endswith("⚠ busy")
    assert text["impossible"][5] == "above roof ⚠"
    row = next(r for r in range(model.rowCount()) if model.evaluation(r).key == "busy")
    tip = model.data(model.index(row, 3), Qt.ToolTipRole)
    assert "machine was busy" in tip and "load 3 → 3.5 on 2 cores" in tip


def test_history_best_column_carries_the_runs_unit(qtbot, window, replay_goal, run_headless):
    run_id = run_headless(window.store(), replay_goal(max_evals=8))
    window.history.refresh()
    items = [it for it in window.history.tree.findItems("*", Qt.MatchWildcard | Qt.MatchRecursive)
             if it.text(0) == f"run {run_id}"]
    assert items and items[0].toolTip(3).endswith(" ms"), items[0].toolTip(3) if items else None


def test_objective_column_shows_the_spread_and_the_warning_whole(qtbot):
    """The column cut '1.815 ±84% ⚠…' and '12.35 ±1.1e+…' at 1366x768."""
    table = CandidateTable()
    qtbot.addWidget(table)
    table.resize(1300, 250)
    table.show()
    table.model.reset(minimize=True, baseline=None, limit=None, unit="ms")
    table.add([(1, _ev("noisy", 1.815, spread=1.68, noisy=1.0), 0.0),
               (2, _ev("wide", 12.35, spread=2.2, noisy=1.0), 0.0)])
    table.flush()
    model, view = table.model, table.view
    texts = [model.data(model.index(r, 3)) for r in range(model.rowCount())]
    assert sorted(texts) == ["1.815 ±84% ⚠ busy", "12.35 ±110% ⚠ busy"]
    margin = 2 * view.style().pixelMetric(view.style().PixelMetric.PM_FocusFrameHMargin) + 8
    for text in texts:
        assert view.fontMetrics().horizontalAdvance(text) + margin <= view.columnWidth(3), text
