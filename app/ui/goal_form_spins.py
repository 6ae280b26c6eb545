"""Spin boxes for numeric goal fields, their range and default read from the goal's one table
(app.goal.ranges): the goal form and the custom-kernel page can never allow a value the goal
refuses, nor start from another default."""

from __future__ import annotations

from PySide6.QtWidgets import QDoubleSpinBox, QSpinBox

from app.goal.ranges import FIELDS

NONE_VALUE = -1  # an optional integer field (device) shows "automatic" one below its range


def int_spin(name: str, special: str = "") -> QSpinBox:
    """The field's QSpinBox. A field without a default (optional) gets one extra step below
    its range, shown as `special`, that stands for "not set"."""
    rng = FIELDS[name]
    box = QSpinBox()
    low = int(rng.low) - (1 if rng.default is None else 0)
    box.setRange(low, int(rng.high))
    if special:
        box.setSpecialValueText(special)
    box.setValue(low if rng.default is None else int(rng.default))
    if rng.high >= 10_000:
        box.setGroupSeparatorShown(True)
    return box


def float_spin(name: str, special: str = "", decimals: int = 2) -> QDoubleSpinBox:
    rng = FIELDS[name]
    box = QDoubleSpinBox()
    box.setDecimals(decimals)
    box.setRange(float(rng.low), float(rng.high))
    if special:
        box.setSpecialValueText(special)
    box.setValue(float(rng.default or 0.0))
    return box
