"""File > Import Kernel Tuner script… in the window: the real importer runs the script in its
sandbox cell on a worker thread (the window keeps drawing), the goal opens in the form and the
importer's notes are shown; a refusal is one line in the status bar and a warning."""

from __future__ import annotations

import shutil
import textwrap
import time

import pytest
from PySide6.QtWidgets import QMessageBox

needs_cc = pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("cc")), reason="needs a C compiler")

SCRIPT = '''
import time
import numpy as np
from kernel_tuner import tune_kernel
time.sleep(1.0)  # a slow script: the window must not wait for it
kernel = """
void scale(float *y, const float *x, int n) { for (int i = 0; i < n; i++) y[i] = 2.0f * x[i]; }
"""
x = np.random.randn(1000).astype(np.float32)
y = np.zeros_like(x)
tune_kernel("scale", kernel, 1000, [y, x, np.int32(1000)], {"block": [1, 2]}, lang="C")
'''


def _notes(window, monkeypatch) -> list[tuple[str, str, object]]:
    shown = []
    monkeypatch.setattr(window, "_notify", lambda title, text, icon=None: shown.append((title, text, icon)))
    return shown


@needs_cc
def test_a_script_imports_off_the_gui_thread_and_opens_in_the_form(qtbot, window, tmp_path, monkeypatch):
    script = tmp_path / "tune_scale.py"
    script.write_text(textwrap.dedent(SCRIPT))
    shown = _notes(window, monkeypatch)
    started = time.monotonic()
    assert window.import_kt(str(script))
    assert time.monotonic() - started < 0.5  # the window did not wait for the script
    assert "Importing tune_scale.py" in window.statusBar().currentMessage()
    other = tmp_path / "other.py"
    other.write_text("print('never run')\n")
    assert not window.import_kt(str(other))  # one import at a time, and it says so
    assert "other.py not imported: another import is running" in window.statusBar().currentMessage()
    qtbot.waitUntil(lambda: bool(shown), timeout=120_000)
    _title, text, icon = shown[0]
    assert icon == QMessageBox.Information, text
    goal_file = tmp_path / "tune_scale_goal" / "goal.toml"
    assert text.startswith("tune_scale.py became ")  # the script that ran, not the refused one
    assert str(goal_file) in text and "checked against this same kernel at block=1" in text
    assert not (tmp_path / "other_goal").exists()
    goal = window.form.goal()
    assert goal.kernel is not None and goal.kernel.entry == "scale"
    assert window.form.source_path == str(goal_file.resolve())
    assert str(goal_file.resolve()) in window.recent_goals()


def test_a_refused_script_is_one_line_and_nothing_opens(qtbot, window, tmp_path, monkeypatch):
    script = tmp_path / "no_tune.py"
    script.write_text("print('no tuning here')\n")
    shown = _notes(window, monkeypatch)
    before = window.form.goal().name
    assert window.import_kt(str(script))
    qtbot.waitUntil(lambda: bool(shown), timeout=120_000)
    _title, text, icon = shown[0]
    assert icon == QMessageBox.Warning
    assert text == "no_tune.py: the script never called kernel_tuner.tune_kernel"
    assert window.form.goal().name == before
    assert not (tmp_path / "no_tune_goal" / "goal.toml").exists()


def test_an_existing_import_is_not_replaced_unless_the_user_says_so(window, tmp_path):
    script = tmp_path / "tune.py"
    script.write_text("print('x')\n")
    (tmp_path / "tune_goal").mkdir()
    (tmp_path / "tune_goal" / "goal.toml").write_text("# mine\n")
    assert not window.import_kt(str(script))  # confirm() says no in tests
    assert (tmp_path / "tune_goal" / "goal.toml").read_text() == "# mine\n"
