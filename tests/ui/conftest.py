"""pytest-qt fixtures for the desktop app: offscreen, a throwaway database and settings file."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
from PySide6.QtCore import QSettings

from app.goal import Goal, StopRules, SwarmSettings

PNPOLY = "pnpoly_RTX_3090.json.gz"  # small recorded space with failures; resolved by name


@pytest.fixture
def settings(tmp_path) -> QSettings:
    return QSettings(str(tmp_path / "settings.ini"), QSettings.IniFormat)


@pytest.fixture
def window(qtbot, tmp_path, settings):
    from app.ui.main_window import MainWindow

    w = MainWindow(db_path=tmp_path / "history.sqlite", settings=settings)
    w.interactive = False  # no modal boxes in tests
    qtbot.addWidget(w)
    w.resize(1400, 900)
    w.show()
    yield w
    if w.controller.running:
        w.controller.stop_and_wait(10)
    w.close()


def _replay_goal(max_evals: int = 40, seed: int = 3, name: str = "pnpoly test") -> Goal:
    return Goal(name=name, space=PNPOLY, backend="replay", stop=StopRules(max_evals=max_evals),
                swarm=SwarmSettings(agents=["explorer", "local", "evolution"], workers=1, seed=seed))


def _run_headless(store, goal: Goal) -> int:
    """A real run recorded in `store`, without the GUI (to build history quickly)."""
    from app.session import RunSession

    session = RunSession(goal, store=store)
    session.run()
    return session.run_id


@pytest.fixture
def replay_goal():
    """Factory of small replay goals (three cheap agents, one worker: deterministic)."""
    return _replay_goal


@pytest.fixture
def run_headless():
    return _run_headless
