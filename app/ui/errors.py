"""Logging for the GUI: a rotating log file, Qt's own messages routed to it, and uncaught
exceptions shown in a dialog (continue or quit) instead of killing the window silently."""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from logging.handlers import RotatingFileHandler
from pathlib import Path

from PySide6.QtCore import QObject, Qt, QtMsgType, Signal, qInstallMessageHandler
from PySide6.QtWidgets import QApplication, QMessageBox

from app.paths import log_dir

LOG_NAME = "kernelswarm.log"
log = logging.getLogger("kernelswarm.ui")
qt_log = logging.getLogger("qt")

_QT_LEVELS = {
    QtMsgType.QtDebugMsg: logging.DEBUG,
    QtMsgType.QtInfoMsg: logging.INFO,
    QtMsgType.QtWarningMsg: logging.WARNING,
    QtMsgType.QtCriticalMsg: logging.ERROR,
    QtMsgType.QtFatalMsg: logging.CRITICAL,
}
# Harmless chatter of the offscreen platform (tests, screenshots).
_QT_NOISE = ("propagateSizeHints",)


def log_file_path() -> Path:
    return log_dir() / LOG_NAME


def setup_logging(level: int = logging.INFO) -> Path:
    """Send the app's log records to a rotating file (5 x 2 MB); returns its path."""
    path = log_file_path()
    root = logging.getLogger()
    if any(isinstance(h, RotatingFileHandler) and Path(h.baseFilename) == path for h in root.handlers):
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handler: logging.Handler = RotatingFileHandler(path, maxBytes=2_000_000, backupCount=5,
                                                       encoding="utf-8")
    except OSError as exc:  # a read-only home must not stop the app
        handler = logging.StreamHandler(sys.stderr)
        print(f"kernelswarm: cannot write log file {path}: {exc}", file=sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(threadName)s %(name)s: %(message)s"))
    root.addHandler(handler)
    if root.level > level or root.level == logging.NOTSET:
        root.setLevel(level)
    qInstallMessageHandler(_qt_message)
    return path


def _qt_message(mode: QtMsgType, context, message: str) -> None:
    if any(n in message for n in _QT_NOISE):
        return
    where = f" ({context.file}:{context.line})" if context is not None and context.file else ""
    qt_log.log(_QT_LEVELS.get(mode, logging.WARNING), "%s%s", message, where)


class ExceptionHandler(QObject):
    """Installed as sys.excepthook and threading.excepthook. Exceptions from other threads are
    forwarded to the GUI thread through a queued signal before the dialog is shown."""

    _raised = Signal(str, str)

    def __init__(self, parent: QObject | None = None, interactive: bool = True) -> None:
        super().__init__(parent)
        self.interactive = interactive
        self.seen: list[str] = []
        self._raised.connect(self._show, Qt.QueuedConnection)

    def install(self) -> None:
        sys.excepthook = self._hook
        threading.excepthook = lambda args: self._hook(args.exc_type, args.exc_value, args.exc_traceback)

    def _hook(self, exc_type, exc, tb) -> None:
        if issubclass(exc_type, KeyboardInterrupt):
            QApplication.quit()
            return
        text = "".join(traceback.format_exception(exc_type, exc, tb))
        log.error("uncaught exception:\n%s", text)
        self._raised.emit(f"{exc_type.__name__}: {exc}", text)

    def _show(self, summary: str, details: str) -> None:
        self.seen.append(summary)
        if not self.interactive:
            return
        box = QMessageBox(QMessageBox.Critical, "KernelSwarm — unexpected error",
                          f"<b>Something went wrong.</b><br>{summary}<br><br>"
                          f"The details are in the log:<br><code>{log_file_path()}</code>")
        box.setDetailedText(details)
        keep = box.addButton("Continue", QMessageBox.AcceptRole)
        quit_ = box.addButton("Quit", QMessageBox.DestructiveRole)
        box.setDefaultButton(keep)
        box.exec()
        if box.clickedButton() is quit_:
            QApplication.quit()
