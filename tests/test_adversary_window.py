"""The window and the adversary's events, pytest-qt offscreen: the bridge
hands on BestRechecked (a stored best re-checked on resume shows the figure measured now),
a best a validation case broke is shown "broken by case N" in the plot and the candidate
table, the case joins the lessons list, and the agent panel shows the adversary's time share."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from PySide6.QtCore import QSettings

from app.core.events import (
    AgentCredit,
    BestRechecked,
    BestRevoked,
    CaseFound,
    Evaluated,
    RunStarted,
)
from app.core.types import VERIFY_FAILED, Evaluation

pytest.importorskip("pytestqt")


@pytest.fixture
def window(qtbot, tmp_path):
    from app.ui.main_window import MainWindow

    w = MainWindow(db_path=tmp_path / "history.sqlite",
                   settings=QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat))
    w.interactive = False
    qtbot.addWidget(w)
    w.resize(1400, 900)
    w.show()
    yield w
    w.close()


def ok(key: str, value: float) -> Evaluation:
    return Evaluation(key=key, config={"TILE": 8}, ok=True, value=value, agent="explorer",
                      time_ms=value)


def feed(window, *events) -> None:
    for event in events:
        window.bridge(event)
    window.bridge.drain()
    window.table.flush()
    window.live.redraw()


def status_of(window, key: str) -> str:
    model = window.table.model
    for row in range(model.rowCount()):
        if model.data(model.index(row, 0)) is not None and \
                model.rows[model._view[row]][1].key == key:
            return model.data(model.index(row, 2))
    raise AssertionError(f"no row for {key}")


def test_rechecked_and_broken_bests_are_shown(window):
    feed(window, RunStarted(goal_name="t", backend="cpu", agents=["explorer"], max_evals=10,
                            time_budget_s=None, unit="ms"),
         *[Evaluated(index=i + 1, evaluation=ok(k, v), elapsed_s=float(i), best_value=None)
           for i, (k, v) in enumerate([("a", 3.0), ("b", 2.0), ("c", 1.0)])])
    data = window.live.data
    assert data.best_value == 1.0
    # a stored best re-checked on resume: the figure measured now, in the plot and the table
    fresh = ok("c", 1.5)
    fresh.detail = "re-checked on resume: the history said 1, measured 1.5 now"
    feed(window, BestRechecked(key="c", evaluation=fresh, stored_value=1.0))
    assert data.best_value == 1.5
    assert window.table.model.by_key["c"].value == 1.5
    assert "re-checked on resume" in window.statusBar().currentMessage()
    # the adversary's case broke it: dethroned, visibly
    broken = Evaluation(key="c", config={"TILE": 8}, ok=False, reason=VERIFY_FAILED,
                        agent="explorer", detail="broken by case 7: 1 of 23 outputs differ")
    feed(window, CaseFound(case={"shape": [23, 1], "seed": 3}, origin="adversary (broke "
                           "candidate c)", broke="c", case_id=7),
         BestRevoked(key="c", evaluation=broken, new_best_value=2.0, case_id=7, was_best=True))
    assert data.best_value == 2.0
    assert status_of(window, "c") == "broken by case 7"
    assert window.live.convergence.broken_drawn == ["broken by case 7"]
    lessons = [window.lessons.item(i).text() for i in range(window.lessons.count())]
    assert any(t.startswith("[case 7] kept with the goal: adversary") for t in lessons)
    assert any("best candidate c revoked: broken by case 7" in t for t in lessons)
    # the agent panel: the adversary's bar is its share of the run's time
    feed(window, AgentCredit(credits={
        "explorer": {"evaluated": 3, "improvements": 2, "share": 1.0},
        "adversary": {"time_share": 0.07, "cases": 1, "time_budget": 1.0, "share": 0.08}}))
    window.live.redraw()
    chart = window.live.agents
    chart.draw(window.live.data, window.live._theme)
    assert chart.shares["adversary (1 case)"][0] == pytest.approx(7.0)
