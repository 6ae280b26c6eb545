"""Closing the window mid-run stops the run cleanly and leaves it resumable."""

from __future__ import annotations

from PySide6.QtCore import QSettings

from app.store import Store


def test_closing_mid_run_leaves_a_resumable_run(qtbot, tmp_path, settings, replay_goal):
    from app.ui.history import RESUMABLE
    from app.ui.main_window import MainWindow

    db = tmp_path / "history.sqlite"
    window = MainWindow(db_path=db, settings=settings)
    window.interactive = False
    qtbot.addWidget(window)
    window.show()
    window.form.set_goal(replay_goal(max_evals=3000))  # far more than we let it do
    qtbot.waitUntil(lambda: window.act_run.isEnabled(), timeout=3000)
    window.run_goal()
    qtbot.waitUntil(lambda: len(window.live.data) >= 20, timeout=30000)
    run_id = window.current_run_id
    window.close()
    assert not window.controller.running

    store = Store(db)
    run = store.get_run(run_id)
    first = run["evaluations"]
    assert run["status"] in RESUMABLE and run["reason"] == "stopped"
    assert 20 <= first < 3000
    store.close()

    # Resume it from the history of a new window, let it go a little further, close again.
    again = MainWindow(db_path=db, settings=QSettings(str(tmp_path / "s2.ini"), QSettings.IniFormat))
    again.interactive = False
    qtbot.addWidget(again)
    again.show()
    again.history.refresh()
    again.history.select_runs([run_id])
    assert again.history.resume_button.isEnabled()
    again.history.resume_button.click()
    assert len(again.live.data) == first  # the stored evaluations are drawn before new ones
    qtbot.waitUntil(lambda: len(again.live.data) >= first + 10, timeout=30000)
    again.close()

    store = Store(db)
    rows = store.load_evaluations(run_id)
    keys = [e.key for _, e, _ in rows]
    assert len(rows) > first and len(keys) == len(set(keys))  # continued, nothing repeated
    assert [i for i, _, _ in rows] == list(range(1, len(rows) + 1))
    store.close()
