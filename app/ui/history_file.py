"""Which history database the window uses: the one Store of the window, a clear message when
the file cannot be used (not SQLite, a directory, a newer schema), and choosing or creating
another file, remembered in the app's settings."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QFileDialog, QMessageBox

from app.paths import DB_ENV, default_db_path
from app.store import StoreError

log = logging.getLogger(__name__)

SETTING = "historyFile"


def initial_history_path(db_path: str | Path | None, settings: QSettings) -> Path:
    """--db first, then $KERNELSWARM_DB, then the file the user chose last, then the default."""
    if db_path:
        return Path(db_path).expanduser()
    if not os.environ.get(DB_ENV):
        chosen = str(settings.value(SETTING, "") or "")
        if chosen:
            return Path(chosen).expanduser()
    return default_db_path()


class HistoryFileMixin:
    """The window's side of the history file. Expects `db_path`, `_store`, `settings`,
    `history` (HistoryPanel), `db_label`, `controller`, `interactive` and `_notify`."""

    history_problem: str = ""  # why the history file cannot be used ('' when it can)

    def store(self):
        """The one Store of this window (opened on first use). Raises StoreError with a
        one-line message naming the file when it cannot be used."""
        if self._store is None:
            from app.store import Store

            try:
                self._store = Store(self.db_path)
            except StoreError as exc:
                self._set_history_problem(str(exc))
                raise
            self._set_history_problem("")
        return self._store

    def history_usable(self) -> bool:
        try:
            self.store()
        except StoreError:
            return False
        return True

    def _set_history_problem(self, problem: str) -> None:
        self.history_problem = problem
        self.history.set_problem(problem)
        name = self.db_path.name or str(self.db_path)
        self.db_label.setText(f"History: {name}" + (" — unusable" if problem else ""))
        self.db_label.setToolTip(problem or str(self.db_path))

    def check_history(self) -> None:
        """At start: list the history, or say once why the file cannot be used and offer
        another one (the window stays usable for goals either way)."""
        if self.history_usable():
            self.history.refresh()
            return
        log.warning("history unusable: %s", self.history_problem)
        self.offer_other_history("History file", "Runs cannot be recorded until another "
                                 "history file is chosen (File ▸ History file…).")

    def offer_other_history(self, title: str, what_now: str) -> None:
        """Say why the history cannot be used, with the way out as a button."""
        self.statusBar().showMessage(f"{title}: {self.history_problem}", 30000)
        if not self.interactive:
            return
        box = QMessageBox(QMessageBox.Warning, title, f"{self.history_problem}\n\n{what_now}",
                          QMessageBox.NoButton, self)
        box.setAttribute(Qt.WA_DeleteOnClose)
        choose = box.addButton("Choose or create another…", QMessageBox.AcceptRole)
        box.addButton("Not now", QMessageBox.RejectRole)
        # not exec(): the window keeps drawing; the answer comes as a signal
        box.buttonClicked.connect(lambda b: b is choose and self.choose_history_file())
        box.open()

    def _ask_history_path(self) -> str:
        start = str(self.db_path.parent if self.db_path.parent.is_dir() else default_db_path().parent)
        # a save dialog: it both picks an existing history and names a new one ("Use", not
        # "Save": nothing is overwritten)
        dialog = QFileDialog(self, "Choose or create a history file", start,
                             "History (*.sqlite *.db *.sqlite3);;All files (*)")
        dialog.setAcceptMode(QFileDialog.AcceptSave)
        dialog.setOption(QFileDialog.DontConfirmOverwrite)
        dialog.setLabelText(QFileDialog.Accept, "Use")
        if not dialog.exec() or not dialog.selectedFiles():
            return ""
        return dialog.selectedFiles()[0]

    def choose_history_file(self) -> bool:
        if self.controller.state != "idle":
            self._notify("History file", "Stop the current run first.")
            return False
        path = self._ask_history_path()
        return bool(path) and self.use_history_file(path)

    def use_history_file(self, path: str | Path) -> bool:
        """Switch to another history file (created when it does not exist) and remember it.
        A file that cannot be used is named with its problem; the current one stays."""
        from app.store import Store

        path = Path(path).expanduser()
        try:
            store = Store(path)
        except StoreError as exc:
            self._notify("History file", str(exc), QMessageBox.Warning)
            return False
        if self._store is not None:
            self._store.close()
        self._store, self.db_path = store, path
        self.settings.setValue(SETTING, str(path.resolve()))
        self._set_history_problem("")
        self.current_run_id = None  # a run id of the old file means nothing in this one
        self.history.refresh()
        self._update_actions()
        self.statusBar().showMessage(f"History: {path}", 6000)
        return True
