"""An unusable history file (not SQLite, a directory, a newer schema): the window says so once,
naming the file and the problem, offers another file, and a run never sticks in "Starting…"."""

from __future__ import annotations

import sqlite3

import pytest
from PySide6.QtCore import QSettings, Qt

from app.store import Store


def _text_file(path):
    path.write_text("these are my notes, not a database\n")
    return "not a SQLite database"


def _directory(path):
    path.mkdir()
    return "is a directory"


def _newer_schema(path):
    with sqlite3.connect(path) as conn:  # what a later KernelSwarm would have written
        conn.execute("CREATE TABLE runs (id INTEGER PRIMARY KEY)")
        conn.execute("PRAGMA user_version = 999")
    conn.close()
    return "newer than"


BAD = {"text file": _text_file, "directory": _directory, "newer schema": _newer_schema}


@pytest.fixture(params=list(BAD))
def bad_window(request, qtbot, tmp_path, settings):
    from app.ui.main_window import MainWindow

    path = tmp_path / "history.sqlite"
    problem = BAD[request.param](path)
    w = MainWindow(db_path=path, settings=settings)
    w.interactive = False
    qtbot.addWidget(w)
    w.resize(1366, 768)
    w.show()
    # the start's check has run: a problem said, or (old code) a tree item
    qtbot.waitUntil(lambda: bool(getattr(w, "history_problem", "")
                                 or w.history.tree.topLevelItemCount()), timeout=3000)
    yield w, path, problem
    w.close()


def test_the_problem_is_said_once_with_the_file(bad_window):
    window, path, problem = bad_window
    panel = window.history
    # whole and wrapped in the panel, not a tree cell cut to "History un…"
    assert panel.problem.isVisible() and panel.problem.wordWrap()
    assert str(path) in panel.problem.text() and problem in panel.problem.text()
    assert not panel.tree.isVisible()
    assert panel.choose_button.isVisible()
    assert problem in window.statusBar().currentMessage()
    assert "unusable" in window.db_label.text() and problem in window.db_label.toolTip()


def test_run_with_an_unusable_history_stays_idle_and_says_why(qtbot, bad_window, replay_goal):
    window, path, problem = bad_window
    window.form.set_goal(replay_goal(max_evals=5))
    qtbot.waitUntil(window.act_run.isEnabled, timeout=3000)
    window.act_run.trigger()
    assert window.controller.state == "idle"
    assert window.state_label.text() == "Idle"
    assert window.act_run.isEnabled() and not window.act_stop.isEnabled()
    assert window.device_label.text() == "No device in use"
    message = window.statusBar().currentMessage()
    assert str(path) in message and problem in message
    if problem == "not a SQLite database":  # the user's file is left as it was
        assert path.read_text() == "these are my notes, not a database\n"


def test_choose_another_history_file_and_remember_it(qtbot, bad_window, tmp_path, monkeypatch,
                                                     run_headless, replay_goal):
    window, path, _problem = bad_window
    # A file that cannot be used either: named, and the window keeps what it had.
    assert not window.use_history_file(tmp_path)
    assert window.db_path == path and str(tmp_path) in window.statusBar().currentMessage()

    new = tmp_path / "other" / "mine.sqlite"
    new.parent.mkdir()
    with Store(new) as store:
        run_id = run_headless(store, replay_goal(max_evals=5, name="in the other file"))
    # the file dialog is native and modal: its answer is given here (the rest is real)
    monkeypatch.setattr(window, "_ask_history_path", lambda: str(new))
    qtbot.mouseClick(window.history.choose_button, Qt.LeftButton)

    assert window.db_path == new and window.history_problem == ""
    assert window.history.tree.isVisible() and not window.history.problem.isVisible()
    assert window.history.item_for_run(run_id) is not None
    assert window.db_label.text() == "History: mine.sqlite"
    window.settings.sync()

    # the next start uses the chosen file (no --db, no $KERNELSWARM_DB)
    from app.ui.main_window import MainWindow

    monkeypatch.delenv("KERNELSWARM_DB", raising=False)
    again = MainWindow(settings=QSettings(window.settings.fileName(), QSettings.IniFormat))
    qtbot.addWidget(again)
    assert again.db_path == new.resolve()
    again.close()


def test_a_new_history_file_is_created(bad_window, tmp_path):
    window, _path, _problem = bad_window
    new = tmp_path / "fresh.sqlite"
    assert window.use_history_file(new)
    assert new.is_file() and window.store().list_runs() == []
    assert not window.history.problem.isVisible()


def test_a_controller_that_cannot_start_goes_back_to_idle(qtbot, replay_goal):
    from app.ui.bridge import EventBridge
    from app.ui.run_controller import RunController

    def broken_store():
        raise OSError("disk full")

    controller = RunController(EventBridge(), broken_store)
    states, failures = [], []
    controller.stateChanged.connect(states.append)
    controller.failed.connect(failures.append)
    assert controller.start(replay_goal(max_evals=5)) is False
    assert controller.state == "idle" and states[-1] == "idle"
    assert failures == ["OSError: disk full"]
    # and a Stop with nothing behind a stale state gets out of it
    controller._set_state("starting")
    controller.stop()
    assert controller.state == "idle"
