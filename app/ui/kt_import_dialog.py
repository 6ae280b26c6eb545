"""File > Import Kernel Tuner script…: `kernelswarm import-kt` from the window. The script runs
in its sandbox cell on a worker thread (it may take minutes: the GUI stays live); the goal it
becomes opens in the goal form, with the importer's notes shown. A refusal is one line; where
this machine cannot build the cell, the user is asked before the script runs with their rights,
as --trust-script asks on the command line."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QFileDialog, QMessageBox

NO_CELL = "cannot run the script in a sandbox cell"


class KtImport(QObject):
    """One import at a time, off the GUI thread; `finished` carries (script, Imported | None,
    error). `running` is cleared by the receiver, on the GUI thread, once it has the result."""

    finished = Signal(str, object, str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.running = False

    def start(self, script: str, out: str, trust: bool = False) -> bool:
        if self.running:
            return False
        self.running = True
        threading.Thread(target=self._run, args=(script, out, trust), daemon=True,
                         name="kt-import").start()
        return True

    def _run(self, script: str, out: str, trust: bool) -> None:
        from app.kt_import.importer import ImportRefused, import_script

        try:
            done, error = import_script(script, out, trust=trust), ""
        except ImportRefused as exc:
            done, error = None, str(exc)
        except Exception as exc:  # noqa: BLE001 - one line for the user, never a dead thread
            done, error = None, f"{type(exc).__name__}: {exc}"
        try:
            self.finished.emit(script, done, error)  # queued to the GUI thread
        except RuntimeError:  # the window, and this object with it, is gone
            pass


class KtImportMixin:
    """Expects `open_goal`, `confirm`, `statusBar` and `_notify` on the window."""

    _kt_import: KtImport | None = None

    def import_kt_dialog(self) -> None:
        script, _ = QFileDialog.getOpenFileName(self, "Import Kernel Tuner script", str(Path.home()),
                                                "Python scripts (*.py);;All files (*)")
        if script:
            self.import_kt(script)

    def import_kt(self, script: str, trust: bool = False) -> bool:
        """Import `script` into SCRIPT_goal beside it (asked first when that holds a goal)."""
        path = Path(script)
        out = path.parent / f"{path.stem}_goal"
        if not trust and (out / "goal.toml").exists() and not self.confirm(
                f"{out / 'goal.toml'} exists. Replace it with a new import of {path.name}?"):
            return False
        if self._kt_import is None:
            self._kt_import = KtImport(self)
            self._kt_import.finished.connect(self._kt_imported)
        if not self._kt_import.start(str(path), str(out), trust):
            self.statusBar().showMessage(f"{path.name} not imported: another import is running", 6000)
            return False
        self.statusBar().showMessage(f"Importing {path.name} in its sandbox cell…"
                                     if not trust else f"Importing {path.name} with your rights…")
        return True

    def _kt_imported(self, script: str, done: Any, error: str) -> None:
        self._kt_import.running = False
        name = Path(script).name
        if done is None:
            self.statusBar().showMessage(f"{name} not imported", 6000)
            if NO_CELL in error and self.confirm(
                    f"{error}\n\nRun {name} with your rights (your files, API keys and the network)?"):
                self.import_kt(script, trust=True)
                return
            self._notify("Import Kernel Tuner script", f"{name}: {error}", QMessageBox.Warning)
            return
        if not self.open_goal(str(done.goal_path)):
            return
        notes = "\n".join(f"• {n}" for n in done.notes)
        self._notify("Import Kernel Tuner script",
                     f"{name} became {done.goal_path}" + (f"\n\n{notes}" if notes else ""),
                     QMessageBox.Information)
