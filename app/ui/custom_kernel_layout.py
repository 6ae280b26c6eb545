"""Small layout pieces of the "Your kernel" page: two fields on one row, a table's Add and
Remove buttons."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QTableWidget, QWidget


def pair(first: QWidget, label: str, second: QWidget) -> QHBoxLayout:
    """Two fields that belong together on one form row, the second with its own label."""
    row = QHBoxLayout()
    row.addWidget(first, 1)
    row.addWidget(QLabel(label))
    row.addWidget(second, 1)
    return row


def row_buttons(table: QTableWidget, add: Callable[[], object]) -> QHBoxLayout:
    """Add a row (through `add`), remove the current one."""
    row = QHBoxLayout()
    plus, minus = QPushButton("Add"), QPushButton("Remove")
    plus.clicked.connect(add)
    minus.clicked.connect(lambda: table.removeRow(max(0, table.currentRow()))
                          if table.rowCount() else None)
    row.addWidget(plus)
    row.addWidget(minus)
    row.addStretch(1)
    return row
