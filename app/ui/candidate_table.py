"""Every candidate of a run as a sortable, filterable table (model/view)."""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import math
import re
from pathlib import Path

import numpy as np
from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QColor, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QSplitter,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.core.types import SUSPECT, Evaluation
from app.core.units import format_value, gain, occupancy_text
from app.run_summary import broken_by, hardware_fraction, refusal_text
from app.ui.candidate_notes import device_note, measurement_note
from app.ui.device_progress import DeviceProgress, device_label
from app.ui.device_summary import DeviceSummary
from app.ui.theme import agent_color

log = logging.getLogger(__name__)

SORT_ROLE = Qt.UserRole + 1
COLUMNS = ("#", "agent", "status", "objective", "speedup", "% of roof", "parameters",
           "registers", "shared mem", "device")
RESOURCE_COLUMNS = (7, 8)  # registers, shared memory (CUDA)
DEVICE_COLUMN = 9  # where a cluster evaluation ran; hidden while no evaluation says


def shared_memory_bytes(resources: dict) -> int | None:
    """Shared memory per block as the CUDA backend records it (static + dynamic)."""
    parts = [resources.get(k) for k in ("static_shared_bytes", "dynamic_shared_bytes")]
    if all(p is None for p in parts):
        return None
    return sum(int(p or 0) for p in parts)


_ROOT = QModelIndex()
_OK_COLOR = QColor("#2e9d4f")
_FAIL_COLOR = QColor("#d9534f")
_REFUSED_COLOR = QColor("#e08a1e")  # refused as beyond the roof: not a wrong kernel
_RIGHT = int(Qt.AlignRight | Qt.AlignVCenter)
_BOLD = QFont()
_BOLD.setBold(True)
_AGENT_QCOLORS: dict[str, QColor] = {}


def _agent_qcolor(agent: str) -> QColor:
    c = _AGENT_QCOLORS.get(agent)
    if c is None:
        c = _AGENT_QCOLORS[agent] = QColor(agent_color(agent))
    return c


def params_text(config: dict) -> str:
    return "  ".join(f"{k}={v}" for k, v in config.items())


_TUNE_KEYS = re.compile(r'"tune_params_keys"\s*:\s*(\[[^\]]*\])')


def recorded_parameter_order(path: str | Path) -> list[str] | None:
    """The parameter order of a Kernel Tuner cache file, read from its header only (the whole
    file can take seconds to parse; its `tune_params_keys` come in the first few lines)."""
    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8", errors="replace") as f:
            head = f.read(64 * 1024)
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    m = _TUNE_KEYS.search(head)
    try:
        keys = json.loads(m.group(1)) if m else None
    except json.JSONDecodeError:
        return None
    return [str(k) for k in keys] if isinstance(keys, list) else None


def parameter_order(goal) -> list[str] | None:
    """The order of the goal's search-space parameters (the space's own order), the same
    for a live run and a reopened one (the store keeps configurations with sorted keys).
    None when the space cannot be read: then parameters are shown sorted by name."""
    if goal is None:
        return None
    try:
        if goal.operator:
            from app.catalog import get_operator

            return list(get_operator(goal.backend, goal.operator).space(goal.dtype).params)
        if goal.space:
            return recorded_parameter_order(goal.resolve_space_path())
    except Exception as exc:  # noqa: BLE001 - an operator renamed since, a space moved
        log.info("no parameter order for %s: %s", goal.name, exc)
    return None


def ordered_config(config: dict, order: list[str] | None) -> dict:
    """`config` with its keys in `order` (the space's), others after them by name."""
    order = order or []
    known = [k for k in order if k in config]
    rest = sorted(k for k in config if k not in set(order))
    return {k: config[k] for k in (*known, *rest)}


class CandidateModel(QAbstractTableModel):
    """Rows are (index, Evaluation, elapsed_s) in run order; the model sorts and filters itself.

    A QSortFilterProxyModel over 50,000 streaming rows spends tens of milliseconds per insert
    calling back into Python; here display strings and sort keys are computed once per row,
    the view order is a list of source rows, and appends in run order are plain inserts."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.rows: list[tuple[int, Evaluation, float]] = []
        self.by_key: dict[str, Evaluation] = {}
        self.minimize = True
        self.baseline: float | None = None
        self.limit: float | None = None
        self.baseline_name = ""  # which library the baseline is (numpy, cuBLAS …)
        self.unit = "ms"
        self._first_ok: float | None = None
        self.best: Evaluation | None = None
        self._cache: list[tuple[list, list]] = []
        self._accepted: list[bool] = []
        self._view: list[int] = []  # view row -> source row
        self.sort_column, self.sort_order = 0, Qt.AscendingOrder
        self.status = "all"
        self._needle = ""
        self.param_order: list[str] | None = None  # the space's order (parameter_order)
        self.progress = DeviceProgress()  # per-device tallies of a cluster run

    # ---- data in ------------------------------------------------------------------------
    def set_unit(self, unit: str) -> None:
        """The run's objective unit (RunStarted.unit), shown in the objective column's header."""
        if unit and unit != self.unit:
            self.unit = unit
            self.headerDataChanged.emit(Qt.Horizontal, 3, 3)

    def ordered(self, ev: Evaluation) -> Evaluation:
        """The evaluation with its configuration in the run's parameter order."""
        config = ordered_config(ev.config, self.param_order)
        return ev if list(config) == list(ev.config) else dataclasses.replace(ev, config=config)

    def parameter_names(self, ev: Evaluation) -> list[str]:
        return list(ordered_config(ev.config, self.param_order))

    def reset(self, minimize: bool = True, baseline: float | None = None, limit: float | None = None,
              unit: str = "ms", param_order: list[str] | None = None) -> None:
        self.beginResetModel()
        self.param_order = list(param_order) if param_order else None
        self.rows, self.by_key = [], {}
        self.minimize, self.baseline, self.limit, self.unit = minimize, baseline, limit, unit
        self._first_ok = None
        self.best = None
        self.progress.reset(minimize)
        self._cache, self._accepted, self._view = [], [], []
        self.endResetModel()

    def set_references(self, baseline: float | None, limit: float | None,
                       baseline_name: str = "") -> None:
        self.baseline, self.limit, self.baseline_name = baseline, limit, baseline_name
        self._recache()
        self._relayout()

    def append(self, rows: list[tuple[int, Evaluation, float]]) -> None:
        if not rows:
            return
        first_new = len(self.rows)
        for row in rows:
            ev = row[1]
            self.rows.append(row)
            self.by_key[ev.key] = ev
            self.progress.add(ev)
            if ev.ok and ev.value is not None:
                if self._first_ok is None:
                    self._first_ok = ev.value
                if self.best is None or (ev.value < self.best.value if self.minimize
                                         else ev.value > self.best.value):
                    self.best = ev
            self._cache.append(self._row_cache(row))
            self._accepted.append(self._accepts(ev))
        new = [i for i in range(first_new, len(self.rows)) if self._accepted[i]]
        if not new:
            return
        if self.sort_column == 0 and self.sort_order == Qt.AscendingOrder:
            start = len(self._view)  # run order: new rows go at the end
            self.beginInsertRows(_ROOT, start, start + len(new) - 1)
            self._view.extend(new)
            self.endInsertRows()
        else:
            self._relayout()

    def replace(self, evaluation: Evaluation) -> bool:
        """Show a candidate's new outcome (a best revoked by re-verification)."""
        for src, (index, ev, elapsed) in enumerate(self.rows):
            if ev.key != evaluation.key:
                continue
            self.rows[src] = (index, evaluation, elapsed)
            self.by_key[evaluation.key] = evaluation
            self._cache[src] = self._row_cache(self.rows[src])
            self._accepted[src] = self._accepts(evaluation)
            ok = [e for _, e, _ in self.rows if e.ok and e.value is not None]
            pick = min if self.minimize else max
            self.best = pick(ok, key=lambda e: e.value) if ok else None
            self.progress.rebuild(e for _, e, _ in self.rows)
            self._relayout()
            return True
        return False

    def _recache(self) -> None:
        self._cache = [self._row_cache(r) for r in self.rows]

    # ---- sorting and filtering -----------------------------------------------------------
    def sort(self, column: int, order=Qt.AscendingOrder) -> None:
        self.sort_column, self.sort_order = column, order
        self._relayout()

    def set_text(self, text: str) -> None:
        self._needle = text.strip().lower()
        self._refilter()

    def set_status(self, status: str) -> None:
        self.status = status
        self._refilter()

    def _accepts(self, ev: Evaluation) -> bool:
        if self.status == "ok" and not ev.ok:
            return False
        if self.status == "failed" and ev.ok:
            return False
        if self.status == "refused" and ev.reason != SUSPECT:
            return False
        if not self._needle:
            return True
        hay = (f"{ev.agent} {'ok' if ev.ok else ev.reason} {params_text(ev.config)} {ev.detail} "
               f"{ev.resources.get('device_id') or device_label(ev)}").lower()
        return all(part in hay for part in self._needle.split())

    def _refilter(self) -> None:
        self._accepted = [self._accepts(r[1]) for r in self.rows]
        self._relayout()

    def _relayout(self) -> None:
        """Recompute the view order, keeping the selection on the same rows."""
        self.layoutAboutToBeChanged.emit()
        old_persistent = self.persistentIndexList()
        old_sources = [self._view[i.row()] if i.row() < len(self._view) else None
                       for i in old_persistent]
        col = self.sort_column
        rows = [i for i, ok in enumerate(self._accepted) if ok]
        keys = [self._cache[i][1][col] for i in rows]
        if keys and all(isinstance(k, (int, float)) for k in keys):
            order = np.argsort(np.asarray(keys, dtype=float), kind="stable")
            if self.sort_order == Qt.DescendingOrder:  # blanks (inf) stay last
                arr = np.asarray(keys, dtype=float)[order]
                finite = np.isfinite(arr)
                order = np.concatenate([order[finite][::-1], order[~finite]])
            rows = [rows[i] for i in order]
        else:
            rows = [r for _, r in sorted(zip((str(k) for k in keys), rows),
                                         reverse=self.sort_order == Qt.DescendingOrder)]
        self._view = rows
        position = {src: i for i, src in enumerate(rows)}
        new_persistent = []
        for idx, src in zip(old_persistent, old_sources):
            pos = position.get(src)
            new_persistent.append(_ROOT if pos is None else self.index(pos, idx.column()))
        self.changePersistentIndexList(old_persistent, new_persistent)
        self.layoutChanged.emit()

    def view_row_of(self, key: str) -> int | None:
        for pos, src in enumerate(self._view):
            if self.rows[src][1].key == key:
                return pos
        return None

    def _row_cache(self, row: tuple[int, Evaluation, float]) -> tuple[list, list]:
        """Display strings and sort keys of a row, computed once: views ask for them
        thousands of times a second while a run streams."""
        i, ev, _ = row
        values = [self._value(i, ev, col) for col in range(len(COLUMNS))]
        display = [self._display(ev, col, v) for col, v in enumerate(values)]
        sort = [math.inf if v is None else v for v in values]
        return display, sort

    # ---- derived figures ----------------------------------------------------------------
    def speedup(self, ev: Evaluation) -> float | None:
        if not ev.ok:
            return None
        return gain(ev.value, self.baseline or self._first_ok, self.minimize)

    def reference_label(self) -> str:
        """What a row's speedup is against: the run's start baseline, or its first success
        (rows are never rescaled by a later measurement; the run's own figure is in the
        run summary with its basis)."""
        if self.baseline:
            return f"vs {self.baseline_name or 'the baseline'} {format_value(self.baseline, self.unit)}"
        return "vs the first success" if self._first_ok is not None else ""

    def hardware(self, ev: Evaluation) -> tuple[float, str] | None:
        """The candidate's one fraction of the hardware and the roof it is against."""
        if not ev.ok:
            return None
        return hardware_fraction(ev.metrics, ev.resources, value=ev.value, limit=self.limit,
                                 minimize=self.minimize)

    def percent_of_limit(self, ev: Evaluation) -> float | None:
        hw = self.hardware(ev)
        return None if hw is None else 100.0 * hw[0]

    # ---- Qt model -----------------------------------------------------------------------
    def rowCount(self, parent: QModelIndex = _ROOT) -> int:
        return 0 if parent.isValid() else len(self._view)

    def columnCount(self, parent: QModelIndex = _ROOT) -> int:
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation, role=Qt.DisplayRole):
        if orientation == Qt.Horizontal and role == Qt.DisplayRole:
            return COLUMNS[section] if section != 3 else f"objective ({self.unit})"
        return None

    def evaluation(self, row: int) -> Evaluation:
        """The evaluation shown in view row `row`."""
        return self.rows[self._view[row]][1]

    def data(self, index: QModelIndex, role=Qt.DisplayRole):
        if not index.isValid():
            return None
        row, col = self._view[index.row()], index.column()
        if role == Qt.DisplayRole:
            return self._cache[row][0][col]
        if role == SORT_ROLE:
            return self._cache[row][1][col]
        ev = self.rows[row][1]
        if role == Qt.ForegroundRole:
            if col == 2:
                return _OK_COLOR if ev.ok else _REFUSED_COLOR if ev.reason == SUSPECT else _FAIL_COLOR
            if col == 1:
                return _agent_qcolor(ev.agent)
        elif role == Qt.TextAlignmentRole:
            return _RIGHT if col in (0, 3, 4, 5, 7, 8) else None
        elif role == Qt.FontRole:
            return _BOLD if ev is self.best else None
        elif role == Qt.ToolTipRole:
            if col == 2 and not ev.ok:
                return (ev.reason == SUSPECT and refusal_text(ev.metrics, ev.resources)) \
                    or ev.detail or ev.reason
            if col == 5:
                hw = self.hardware(ev)
                return f"{100 * hw[0]:.3g} % of the {hw[1]}" if hw else None
            if col == 6:
                return "\n".join(f"{k} = {v}" for k, v in
                                 ordered_config(ev.config, self.param_order).items())
            if col == 3 and ev.ok:
                return measurement_note(ev)
            if col == DEVICE_COLUMN:
                return device_note(ev)
            if col in RESOURCE_COLUMNS:  # the occupancy they allow
                return occupancy_text(ev.resources) or None
        return None

    def _value(self, i: int, ev: Evaluation, col: int):
        if col == 0:
            return i
        if col == 1:
            return ev.agent
        if col == 2:
            return "ok" if ev.ok else "refused: beyond roof" if ev.reason == SUSPECT \
                else (broken_by(ev.detail) or ev.reason or "failed")
        if col == 3:
            return ev.value if ev.ok else None
        if col == 4:
            return self.speedup(ev)
        if col == 5:
            return self.percent_of_limit(ev)
        if col == 6:
            return params_text(ordered_config(ev.config, self.param_order))
        if col == 7:
            return ev.resources.get("registers")
        if col == 8:
            return shared_memory_bytes(ev.resources)
        if col == DEVICE_COLUMN:
            return device_label(ev)  # '' when not recorded: sorts as text with the others
        return None

    @staticmethod
    def _display(ev: Evaluation, col: int, value):
        if value is None:
            if col == 5 and ev.reason == SUSPECT:  # both figures are in the tooltip and summary
                return "refused ⚠"
            return "—" if col in (3, 4, 5) else ""
        if col == 2:
            return value.replace("_", " ")
        if col == 3:  # every figure with its spread; a busy machine's figures say so
            spread = ev.metrics.get("spread")
            text = f"{value:.4g}" + (f" ±{spread_percent(spread)}" if spread else "")
            return text + (" ⚠ busy" if ev.metrics.get("noisy") else "")
        if col == 4:
            return f"{value:.2f}×"
        if col == 5:  # above the roof is a suspect measurement, never a plain percentage
            if value > 100.0:
                return "above roof ⚠"
            return f"{value:.1f}%" if value >= 10 else f"{value:.2g}%"  # 0.049%, not 0.0%
        return str(value)


def spread_percent(spread: float) -> str:
    """Half the p10-p90 spread as a percentage of the median: '84%', '110%', '3.5%' (never
    '1.1e+02%')."""
    pct = 50 * spread
    return f"{pct:.0f}%" if pct >= 10 else f"{pct:.2g}%"


# the widest objective the column must show whole: a figure, its spread and the busy mark
OBJECTIVE_SAMPLE = "12345.6 ±100% ⚠ busy"


class CandidateTable(QWidget):
    """Filter bar + table. Rows added through `add` are flushed on a timer in batches."""

    selected = Signal(object)  # Evaluation

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = CandidateModel(self)
        self.filter = QLineEdit()
        self.filter.setPlaceholderText("Filter: agent, status, parameter=value …")
        self.filter.setClearButtonEnabled(True)
        self.filter.textChanged.connect(self._filter_changed)
        self.status = QComboBox()
        self.status.addItem("all candidates", "all")
        self.status.addItem("correct only", "ok")
        self.status.addItem("failures only", "failed")
        self.status.addItem("refused as beyond the roof", "refused")
        self.status.currentIndexChanged.connect(
            lambda _i: (self.model.set_status(self.status.currentData()), self._update_count()))
        self.count = QLabel("0 candidates")
        self.view = QTableView()
        self.view.setModel(self.model)
        self.view.setSortingEnabled(True)
        self.view.sortByColumn(0, Qt.AscendingOrder)
        self.view.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.view.setSelectionMode(QAbstractItemView.SingleSelection)
        self.view.setAlternatingRowColors(True)
        self.view.verticalHeader().hide()
        self.view.verticalHeader().setDefaultSectionSize(22)
        self.view.setWordWrap(False)
        header = self.view.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.Interactive)
        for col, width in enumerate((60, 80, 130, 110, 80, 90, 420, 80, 90, 140)):
            self.view.setColumnWidth(col, width)
        self.fit_objective_column()
        header.moveSection(6, len(COLUMNS) - 1)  # parameters last: it takes the spare width
        header.moveSection(header.visualIndex(DEVICE_COLUMN), 2)  # device beside the agent
        header.setStretchLastSection(True)
        self.view.setColumnHidden(DEVICE_COLUMN, True)  # until an evaluation names its device
        self.view.selectionModel().currentRowChanged.connect(self._current_changed)
        # Per-device progress beside the table, shown when evaluations come from several devices.
        self.devices = DeviceSummary()
        self.devices.setVisible(False)
        self.split = QSplitter(Qt.Horizontal)
        self.split.setChildrenCollapsible(False)
        self.split.addWidget(self.view)
        self.split.addWidget(self.devices)
        self.split.setStretchFactor(0, 1)
        self.split.setStretchFactor(1, 0)
        self.split.setSizes([1000, 290])  # the summary: short device names and three figures
        # a revoked best (model.replace) or the run's unit arriving changes the tallies' text
        self.model.layoutChanged.connect(lambda *_: self._update_devices())
        self.model.headerDataChanged.connect(lambda *_: self._update_devices())

        bar = QHBoxLayout()
        bar.addWidget(self.filter, 1)
        bar.addWidget(self.status)
        bar.addWidget(self.count)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(bar)
        layout.addWidget(self.split, 1)  # the table takes the height, never the filter row

        self._pending: list[tuple[int, Evaluation, float]] = []
        self.backend: str | None = None  # the run's, from reset
        self._run_shown = False  # no run yet: the goal form's backend decides (follow_form)
        self._timer = QTimer(self)
        self._timer.setInterval(400)  # a table needs no more than a few updates a second
        self._timer.timeout.connect(self._tick)
        self._timer.start()

    def fit_objective_column(self) -> None:
        """The objective column wide enough for a figure with its spread and noise warning
        (the parameters column, last, takes what is left)."""
        needed = self.view.fontMetrics().horizontalAdvance(OBJECTIVE_SAMPLE) + 20
        if self.view.columnWidth(3) < needed:
            self.view.setColumnWidth(3, needed)

    def reset(self, backend: str | None = None, **kwargs) -> None:
        """A new run; registers and shared memory are CUDA's figures, hidden for any other
        backend (None: not known, shown)."""
        self._pending.clear()
        self.backend = backend
        self._run_shown = True  # the run's backend decides the columns from now on
        self._show_resources(backend)
        self.model.reset(**kwargs)
        self.count.setText("0 candidates")
        self._update_devices()

    def _show_resources(self, backend: str | None) -> None:
        for col in RESOURCE_COLUMNS:
            self.view.setColumnHidden(col, backend not in (None, "cuda"))

    def follow_form(self, backend: str | None) -> None:
        """Before any run the empty table's columns follow the goal form's backend; once a
        run is started or reopened, that run's backend wins."""
        if not self._run_shown:
            self._show_resources(backend)

    def add(self, rows: list[tuple[int, Evaluation, float]]) -> None:
        self._pending.extend(rows)

    def _tick(self) -> None:
        if self.isVisible():  # a hidden table catches up when it is shown
            self.flush()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        rows, self._pending = self._pending, []
        self.model.append(rows)
        self._update_count()

    def _filter_changed(self, text: str) -> None:
        self.model.set_text(text)
        self._update_count()

    def _update_count(self) -> None:
        n, shown = len(self.model.rows), self.model.rowCount()
        self.count.setText(f"{n:,} candidates" if n == shown else f"{shown:,} of {n:,} candidates")
        self._update_devices()

    def _update_devices(self) -> None:
        """The device column once an evaluation names its device; the per-device summary
        once there are several devices (a local run shows neither)."""
        progress = self.model.progress
        self.view.setColumnHidden(DEVICE_COLUMN, not progress.devices)
        self.devices.setVisible(progress.several)
        if progress.several:
            self.devices.show_tallies(progress.tallies(), self.model.unit)

    def _current_changed(self, current: QModelIndex, _previous: QModelIndex) -> None:
        if current.isValid():
            self.selected.emit(self.model.evaluation(current.row()))

    def select_key(self, key: str) -> bool:
        self.flush()
        pos = self.model.view_row_of(key)
        if pos is None:
            return False
        index = self.model.index(pos, 0)
        self.view.setCurrentIndex(index)
        self.view.scrollTo(index)
        return True
