"""Discoverability and consistency in the window: the Examples menu lists the
your-own-kernel examples, Recent goals comes alive after Open and Save, a TOML syntax error
names its file, the goal form hides GPU-only limits for a CPU goal, and quitting mid-run asks."""

from __future__ import annotations

from PySide6.QtWidgets import QMessageBox

from app.goal import Goal
from app.paths import resources_dir


def test_examples_menu_lists_the_custom_kernels(qtbot, window):
    texts = {a.text(): a for a in window.examples_menu.actions()}
    assert "conv2d c (your own kernel)" in texts and "pnpoly c (your own kernel)" in texts
    assert "cpu softmax" in texts
    texts["conv2d c (your own kernel)"].trigger()
    assert window.form.goal().kernel.entry == "conv2d"
    labels = [window.form.example.itemText(i) for i in range(window.form.example.count())]
    assert any(t.startswith("pnpoly c (your own kernel)") for t in labels)


def test_recent_goals_enabled_after_open_and_save(qtbot, window, tmp_path):
    assert not window.recent_menu.menuAction().isEnabled()  # a first start: nothing yet
    assert window.open_goal(str(resources_dir() / "goals" / "cpu_softmax.toml"))
    assert window.recent_menu.menuAction().isEnabled()
    assert [a.text() for a in window.recent_menu.actions()] == ["cpu_softmax.toml"]
    window.settings.remove("recentGoals")
    window._rebuild_recent()
    assert not window.recent_menu.menuAction().isEnabled()
    window._save_to(str(tmp_path / "mine.toml"))
    assert window.recent_menu.menuAction().isEnabled()
    assert [a.text() for a in window.recent_menu.actions()] == ["mine.toml"]


def test_a_toml_syntax_error_names_the_file(qtbot, window, tmp_path):
    bad = tmp_path / "broken_goal.toml"
    bad.write_text('name = "x"\nbackend = \n')
    assert not window.open_goal(str(bad))
    message = window.statusBar().currentMessage()
    assert "broken_goal.toml" in message and "line 2" in message, message


def test_cpu_goal_hides_gpu_limits(qtbot, window):
    form = window.form
    form.set_goal(Goal.load(resources_dir() / "goals" / "cpu_softmax.toml"))
    assert not form.rows["constraints.max_registers"].isVisibleTo(form)
    assert not form.rows["constraints.max_shared_memory_bytes"].isVisibleTo(form)
    assert not form.rows["simulate_time"].isVisibleTo(form)  # no recorded times to charge
    form.set_goal(Goal.load(resources_dir() / "goals" / "cuda_softmax.toml"))
    assert form.rows["constraints.max_registers"].isVisibleTo(form)


def test_quitting_mid_run_asks(qtbot, window, replay_goal, monkeypatch):
    window.form.set_goal(replay_goal(max_evals=400))
    window.run_goal()
    qtbot.waitUntil(lambda: window.controller.state == "running", timeout=30_000)
    window.controller.pause()
    qtbot.waitUntil(lambda: window.controller.state == "paused", timeout=30_000)
    window.interactive = True
    asked = []
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: asked.append(a) or QMessageBox.No)
    window.act_quit.trigger()
    assert asked and window.isVisible() and window.controller.running  # "No": nothing stopped
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.Yes)
    window.act_quit.trigger()
    assert not window.isVisible() and not window.controller.running
    window.interactive = False
