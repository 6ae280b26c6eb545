"""The mouse wheel never changes a value the user did not pick: combo boxes, spin boxes and
sliders take the wheel only while they have the keyboard focus; otherwise the wheel scrolls
whatever holds them (a table, a form's scroll area). Installed once on the application."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import QAbstractSlider, QAbstractSpinBox, QApplication, QComboBox, QScrollBar

_GUARD: WheelGuard | None = None
GUARDED = (QComboBox, QAbstractSpinBox, QAbstractSlider)


def _guarded(obj: QObject) -> bool:
    return isinstance(obj, GUARDED) and not isinstance(obj, QScrollBar)


class WheelGuard(QObject):
    def eventFilter(self, obj: QObject, event: QEvent) -> bool:
        kind = event.type()
        if kind == QEvent.Polish and _guarded(obj) and obj.focusPolicy() == Qt.WheelFocus:
            # WheelFocus would hand the focus to the widget under the pointer before this
            # filter sees the wheel, and the value would change after all
            obj.setFocusPolicy(Qt.StrongFocus)
        elif kind == QEvent.Wheel and _guarded(obj) and not obj.hasFocus():
            event.ignore()  # ignored and filtered: Qt passes the wheel on to the parent
            return True
        return False


def install_wheel_guard(app: QApplication | None = None) -> WheelGuard:
    """Install the guard on the application (once; later calls return the same guard)."""
    global _GUARD
    app = app or QApplication.instance()
    if _GUARD is None or _GUARD.parent() is not app:
        _GUARD = WheelGuard(app)
        app.installEventFilter(_GUARD)
    return _GUARD
