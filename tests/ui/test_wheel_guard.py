"""The mouse wheel over an unfocused combo or spin box scrolls; it never changes the value
(scrolling the Arguments table turned an input's fill from normal to zeros)."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication, QComboBox, QSpinBox

from app.ui.custom_kernel import CustomKernelPage


def _wheel(widget, steps: int = -1) -> None:
    pos = QPointF(widget.rect().center())
    event = QWheelEvent(pos, QPointF(widget.mapToGlobal(pos.toPoint())), QPoint(0, 0),
                        QPoint(0, 120 * steps), Qt.NoButton, Qt.NoModifier, Qt.NoScrollPhase, False)
    QApplication.sendEvent(widget, event)


def test_wheel_over_the_arguments_table_keeps_the_fill(qtbot):
    page = CustomKernelPage()
    qtbot.addWidget(page)
    page.show()
    for i in range(12):
        page.add_arg(f"x{i}", "input", "float32", "n")
    fill = page.args.cellWidget(0, 4)
    assert isinstance(fill, QComboBox) and fill.currentText() == "normal"
    page.name.setFocus()
    for _ in range(3):
        _wheel(fill)
    assert fill.currentText() == "normal"  # before the guard: 'zeros' after three notches
    assert fill.focusPolicy() != Qt.WheelFocus  # the wheel cannot give it the focus first


def test_wheel_changes_a_focused_combo_and_spares_unfocused_spin_boxes(qtbot):
    page = CustomKernelPage()
    qtbot.addWidget(page)
    page.show()
    evals = page.max_evals
    assert isinstance(evals, QSpinBox)
    before = evals.value()
    page.name.setFocus()
    _wheel(evals, 1)
    assert evals.value() == before
    page.add_arg("x", "input", "float32", "n")
    role = page.args.cellWidget(0, 1)
    role.setFocus()
    qtbot.waitUntil(role.hasFocus, timeout=1000)
    _wheel(role)  # the user clicked it: the wheel is theirs
    assert role.currentText() != "input"
