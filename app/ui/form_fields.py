"""The goal form's small editors: the list of shapes ('4096 × 4096', edited in place) and the
optional number fields, each turning bad text into a GoalError naming its field."""

from __future__ import annotations

import re

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.goal import GoalError


def parse_shape(text: str) -> list[int]:
    """'4096 x 4096', '4096, 4096' or '4096 4096' -> [4096, 4096]. Raises ValueError."""
    parts = [p for p in re.split(r"[x×,*\s]+", text.strip()) if p]
    if not parts:
        raise ValueError("empty shape")
    out = []
    for p in parts:
        try:
            out.append(int(p.replace("_", "")))
        except ValueError:
            raise ValueError(f"{p!r} is not an integer") from None
    return out


def format_shape(shape: list[int]) -> str:
    return " × ".join(str(d) for d in shape)


class ShapeEditor(QWidget):
    """A list of shapes, each edited in place ('4096 × 4096'), with add / remove buttons."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.list = QListWidget()
        self.list.setMaximumHeight(96)
        self.list.setToolTip("One shape per row, e.g. 4096 × 4096. Double-click to edit.")
        self.add_button = QToolButton(text="+")
        self.add_button.setToolTip("Add a shape")
        self.remove_button = QToolButton(text="−")
        self.remove_button.setToolTip("Remove the selected shape")
        self.add_button.clicked.connect(self._add)
        self.remove_button.clicked.connect(self._remove)
        self.list.itemChanged.connect(lambda _item: self.changed.emit())
        buttons = QVBoxLayout()
        buttons.addWidget(self.add_button)
        buttons.addWidget(self.remove_button)
        buttons.addStretch(1)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.list, 1)
        layout.addLayout(buttons)

    def _new_item(self, text: str) -> QListWidgetItem:
        item = QListWidgetItem(text)
        item.setFlags(item.flags() | Qt.ItemIsEditable)
        return item

    def _add(self) -> None:
        last = self.list.item(self.list.count() - 1)
        item = self._new_item(last.text() if last else "1024 × 1024")
        self.list.addItem(item)
        self.list.setCurrentItem(item)
        self.list.editItem(item)
        self.changed.emit()

    def _remove(self) -> None:
        row = self.list.currentRow()
        if row >= 0:
            self.list.takeItem(row)
            self.changed.emit()

    def add_shape_text(self, text: str) -> None:
        self.list.addItem(self._new_item(text))
        self.changed.emit()

    def set_shapes(self, shapes: list[list[int]]) -> None:
        self.list.blockSignals(True)
        self.list.clear()
        for s in shapes:
            self.list.addItem(self._new_item(format_shape(s)))
        self.list.blockSignals(False)
        self.changed.emit()

    def shapes(self) -> list[list[int]]:
        out = []
        for i in range(self.list.count()):
            try:
                out.append(parse_shape(self.list.item(i).text()))
            except ValueError as exc:
                raise GoalError(f"shapes[{i}]", f"row {i + 1}: {exc}") from None
        return out


def optional_float(edit: QLineEdit, field: str) -> float | None:
    text = edit.text().strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise GoalError(field, f"{text!r} is not a number") from None


def optional_int(edit: QLineEdit, field: str) -> int | None:
    text = edit.text().strip().replace("_", "")
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        raise GoalError(field, f"{text!r} is not an integer") from None
