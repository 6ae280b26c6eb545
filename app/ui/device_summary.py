"""A compact per-device table beside the candidates (done, failed and best on each device), and
the status bar's line about the device of the current run."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableWidget, QTableWidgetItem

from app.core.evaluator import DeviceInfo
from app.core.units import format_value
from app.ui.device_progress import DeviceTally

_RIGHT = Qt.AlignRight | Qt.AlignVCenter
HEADERS = ("device", "done", "failed", "best")


class DeviceSummary(QTableWidget):
    """A view of DeviceProgress.tallies(); redrawn whole (a cluster has tens of devices, not
    thousands), only when the figures changed."""

    def __init__(self, parent=None) -> None:
        super().__init__(0, len(HEADERS), parent)
        self.setHorizontalHeaderLabels(HEADERS)
        self.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.setSelectionMode(QAbstractItemView.NoSelection)
        self.setFocusPolicy(Qt.NoFocus)
        self.setAlternatingRowColors(True)
        self.setWordWrap(False)
        self.verticalHeader().hide()
        self.verticalHeader().setDefaultSectionSize(22)
        header = self.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.Stretch)  # the device name takes the rest
        for col in (1, 2, 3):
            header.setSectionResizeMode(col, QHeaderView.ResizeToContents)
        self.setToolTip("Evaluations per device: done (correct or failed), failed, and the "
                        "best objective measured there")
        self._shown: list[tuple] = []

    def show_tallies(self, tallies: list[DeviceTally], unit: str) -> None:
        texts = [(t.label, f"{t.done:,}", f"{t.failed:,}", format_value(t.best, unit))
                 for t in tallies]
        if texts == self._shown:
            return
        self._shown = texts
        self.setRowCount(len(texts))
        for row, (tally, cells) in enumerate(zip(tallies, texts)):
            for col, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if col:
                    item.setTextAlignment(_RIGHT)
                else:
                    item.setToolTip(tally.ident)  # host/gpu N/model, as the pool names it
                self.setItem(row, col, item)

    def rows_text(self) -> list[tuple[str, ...]]:
        """What the table shows, row by row (for tests and screenshots)."""
        return list(self._shown)


def device_text(device: DeviceInfo | None) -> str:
    """What the status bar says about the device of the current run."""
    if device is None:
        return "No device in use"
    d = device.details or {}
    if device.kind == "cuda":
        parts = [device.name]
        cc = d.get("compute_capability") or d.get("cc")
        if cc:
            parts.append(f"CC {cc}")
        mem = d.get("memory_gb") or d.get("memory")
        if mem:
            parts.append(f"{mem} GB" if isinstance(mem, (int, float)) else str(mem))
        if d.get("driver"):
            parts.append(f"driver {d['driver']}")
        return "GPU: " + " · ".join(str(p) for p in parts)
    if device.kind == "cpu":
        return f"CPU: {device.summary()}"
    if device.kind == "replay":
        return f"Replay — {device.summary().removeprefix('replay: ')}"
    return device.summary()
