"""Recent goals after the new user's path: a goal saved to a file and handed
to the window by the "Your kernel…" page (File > Your kernel…) joins File > Recent goals, and
File > Save writes back to that file. File > Open and Save alone always lit the menu; the page's
goals were the ones that left it greyed."""

from __future__ import annotations

import sys
from pathlib import Path

from app.goal import Goal
from app.ui.custom_kernel import CustomKernelPage

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from screenshots import fill_page


def _your_kernel_action(window):
    file_menu = window.menuBar().actions()[0].menu()
    return next(a for a in file_menu.actions() if a.text().replace("&", "") == "Your kernel…")


def test_a_saved_goal_from_the_page_lights_recent_goals(qtbot, window, tmp_path):
    assert not window.recent_menu.menuAction().isEnabled()  # a first start: nothing yet
    saved = tmp_path / "my_kernel.toml"
    window.form.save(saved)  # a goal file on disk, as the page writes one
    _your_kernel_action(window).trigger()  # File > Your kernel…
    page = window.findChild(CustomKernelPage)
    assert page is not None and page.isVisible()
    page.goal_ready.emit(Goal.load(saved))  # "Use in the window" with the saved goal
    assert window.recent_menu.menuAction().isEnabled()
    assert [a.text() for a in window.recent_menu.actions()] == ["my_kernel.toml"]
    assert window.recent_goals() == [str(saved.resolve())]  # in the settings file

    window.form.name.setText("renamed in the window")
    window.act_save.trigger()  # File > Save: back to the page's file, no dialog
    assert Goal.load(saved).name == "renamed in the window"

    _your_kernel_action(window).trigger()  # shown again: one page, wired once
    page.goal_ready.emit(Goal.load(saved))
    assert [a.text() for a in window.recent_menu.actions()] == ["my_kernel.toml"]


def test_a_goal_the_page_did_not_save_leaves_recent_alone(qtbot, window):
    _your_kernel_action(window).trigger()
    page = window.findChild(CustomKernelPage)
    goal = Goal.load(window.recent_goals() and window.recent_goals()[0] or _example())
    goal.source_path = ""  # built on the page, never saved
    page.goal_ready.emit(goal)
    assert window.recent_goals() == []
    assert not window.recent_menu.menuAction().isEnabled()


def _example() -> str:
    from app.paths import resources_dir

    return str(resources_dir() / "goals" / "cpu_softmax.toml")


def test_save_as_toml_then_use_lights_recent_goals(qtbot, window, tmp_path):
    """The page's own Save as TOML… and Use in the window, no file written behind its back."""
    _your_kernel_action(window).trigger()
    page = window.findChild(CustomKernelPage)
    fill_page(page, "pnpoly", 2000, 12)
    saved = tmp_path / "my_pnpoly.toml"
    assert page.save(saved)  # what Save as TOML… does with the name the user chose
    assert window.recent_goals() == [str(saved.resolve())]
    assert window.recent_menu.menuAction().isEnabled()
    page.use_button.click()
    assert window.form.source_path == str(saved.resolve())
    window.form.name.setText("renamed in the window")
    window.act_save.trigger()
    assert Goal.load(saved).name == "renamed in the window"
