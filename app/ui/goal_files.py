"""Goal files in the window: new, open, save, save as, and the recent goals menu."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtWidgets import QFileDialog, QMessageBox

from app.goal import GoalError
from app.paths import resources_dir
from app.ui.goal_form import default_goal

if TYPE_CHECKING:
    from app.ui.custom_kernel import CustomKernelPage

MAX_RECENT = 8


class GoalFilesMixin:
    """Expects `form`, `goal_dock`, `settings`, `recent_menu` and `_notify` on the window."""

    _page_wired = None  # the "Your kernel…" page whose goals reach Recent goals

    def recent_goals(self) -> list[str]:
        value = self.settings.value("recentGoals", [])
        if isinstance(value, str):
            value = [value]
        return [str(v) for v in (value or [])]

    def _remember_goal(self, path: str) -> None:
        recent = [p for p in self.recent_goals() if p != path]
        self.settings.setValue("recentGoals", [path, *recent][:MAX_RECENT])
        self._rebuild_recent()

    def remember_goal_file(self, path: str) -> None:
        """A goal file written or read outside File > Open and Save (the "Your kernel…" page's
        Save as TOML): it belongs in Recent goals too."""
        if path and Path(path).is_file():
            self._remember_goal(str(Path(path).resolve()))

    def show_custom_kernel_page(self):
        """File > Your kernel…: the page beside the window. A goal it hands over that was
        saved to a file joins Recent goals, and File > Save writes back to that file."""
        page = open_custom_kernel_page(self)
        if page is not self._page_wired:  # once: the page is kept and shown again
            page.goal_ready.connect(lambda goal: self.remember_goal_file(goal.source_path))
            page.saved.connect(self.remember_goal_file)
            self._page_wired = page
        return page

    def _rebuild_recent(self) -> None:
        self.recent_menu.clear()
        recent = self.recent_goals()
        for p in recent:
            a = self.recent_menu.addAction(Path(p).name)
            a.setToolTip(p)
            a.triggered.connect(lambda _c=False, path=p: self.open_goal(path))
        self.recent_menu.setEnabled(bool(recent))
        self.recent_menu.menuAction().setEnabled(bool(recent))  # the File menu's entry itself

    def new_goal(self) -> None:
        self.form.set_goal(default_goal())
        self.goal_dock.raise_()

    def open_goal_dialog(self) -> None:
        start = str(resources_dir() / "goals")
        path, _ = QFileDialog.getOpenFileName(self, "Open goal", start, "Goals (*.toml);;All files (*)")
        if path:
            self.open_goal(path)

    def open_goal(self, path: str) -> bool:
        try:
            self.form.load(path)
        except GoalError as exc:  # the first line names the file (the status bar shows only it)
            self._notify("Open goal", f"{Path(path).name}: {exc}\n\n{Path(path).resolve()}",
                         QMessageBox.Warning)
            return False
        self._remember_goal(str(Path(path).resolve()))
        self.goal_dock.raise_()
        self.statusBar().showMessage(f"Opened {path}", 4000)
        return True

    def save_goal(self) -> None:
        src = self.form.source_path
        if src and src.endswith(".toml") and not src.startswith(str(resources_dir())):
            self._save_to(src)
        else:
            self.save_goal_as()

    def save_goal_as(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save goal", "goal.toml", "Goals (*.toml)")
        if path:
            self._save_to(path)

    def _save_to(self, path: str) -> None:
        try:
            self.form.save(path)
        except (GoalError, OSError) as exc:
            self._notify("Save goal", str(exc), QMessageBox.Warning)
            return
        self._remember_goal(str(Path(path).resolve()))
        self.statusBar().showMessage(f"Saved {path}", 4000)


def open_custom_kernel_page(window: Any) -> CustomKernelPage:
    """The page beside the main window; its goal goes into the window's goal form."""
    from app.ui.custom_kernel import CustomKernelPage  # loaded when first opened

    page = getattr(window, "_custom_kernel_page", None)
    if page is None:
        page = window._custom_kernel_page = CustomKernelPage(window)
        page.goal_ready.connect(window.form.set_goal)
    page.show()
    page.raise_()
    return page
