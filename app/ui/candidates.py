"""Every candidate of a run: a sortable, filterable table (model/view) and a detail panel."""

from __future__ import annotations

import difflib
import html
import json
import math
from typing import Any

import numpy as np
import pyqtgraph as pg
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import CLexer, CudaLexer, DiffLexer
from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QSortFilterProxyModel,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QTableView,
    QTabWidget,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.swarm.types import Evaluation
from app.ui.theme import PlotTheme, agent_color, current_plot_theme, style_plot

SORT_ROLE = Qt.UserRole + 1
COLUMNS = ("#", "agent", "status", "objective", "speedup", "% of limit", "parameters",
           "registers", "shared mem")
REGISTER_KEYS = ("registers", "num_regs", "regs")
SHARED_KEYS = ("shared_memory_bytes", "shared_bytes", "shared_size_bytes", "smem_bytes")


def _first(d: dict, keys: tuple[str, ...]) -> Any:
    for k in keys:
        if d.get(k) is not None:
            return d[k]
    return None


def params_text(config: dict) -> str:
    return "  ".join(f"{k}={v}" for k, v in config.items())


class CandidateModel(QAbstractTableModel):
    """Rows are (index, Evaluation, elapsed_s) in run order."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.rows: list[tuple[int, Evaluation, float]] = []
        self.by_key: dict[str, Evaluation] = {}
        self.minimize = True
        self.baseline: float | None = None
        self.limit: float | None = None
        self.unit = "ms"
        self._first_ok: float | None = None
        self.best: Evaluation | None = None

    # ---- data in ------------------------------------------------------------------------
    def reset(self, minimize: bool = True, baseline: float | None = None, limit: float | None = None,
              unit: str = "ms") -> None:
        self.beginResetModel()
        self.rows, self.by_key = [], {}
        self.minimize, self.baseline, self.limit, self.unit = minimize, baseline, limit, unit
        self._first_ok = None
        self.best = None
        self.endResetModel()

    def set_references(self, baseline: float | None, limit: float | None) -> None:
        self.baseline, self.limit = baseline, limit
        if self.rows:
            self.dataChanged.emit(self.index(0, 4), self.index(len(self.rows) - 1, 5))

    def append(self, rows: list[tuple[int, Evaluation, float]]) -> None:
        if not rows:
            return
        start = len(self.rows)
        self.beginInsertRows(QModelIndex(), start, start + len(rows) - 1)
        for row in rows:
            ev = row[1]
            self.rows.append(row)
            self.by_key[ev.key] = ev
            if ev.ok and ev.value is not None:
                if self._first_ok is None:
                    self._first_ok = ev.value
                if self.best is None or (ev.value < self.best.value if self.minimize
                                         else ev.value > self.best.value):
                    self.best = ev
        self.endInsertRows()

    # ---- derived figures ----------------------------------------------------------------
    def speedup(self, ev: Evaluation) -> float | None:
        ref = self.baseline or self._first_ok
        if not ev.ok or not ev.value or not ref:
            return None
        return ref / ev.value if self.minimize else ev.value / ref

    def percent_of_limit(self, ev: Evaluation) -> float | None:
        if "percent_of_limit" in ev.metrics:
            return float(ev.metrics["percent_of_limit"])
        if not ev.ok or not ev.value or not self.limit:
            return None
        return 100.0 * (self.limit / ev.value if self.minimize else ev.value / self.limit)

    # ---- Qt model -----------------------------------------------------------------------
    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: QModelIndex = QModelIndex()) -> int:
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation, role=Qt.DisplayRole):
        if orientation == Qt.Horizontal and role == Qt.DisplayRole:
            return COLUMNS[section] if section != 3 else f"objective ({self.unit})"
        return None

    def evaluation(self, row: int) -> Evaluation:
        return self.rows[row][1]

    def data(self, index: QModelIndex, role=Qt.DisplayRole):
        if not index.isValid():
            return None
        i, ev, _elapsed = self.rows[index.row()]
        col = index.column()
        if role in (Qt.DisplayRole, SORT_ROLE, Qt.ToolTipRole):
            value = self._value(i, ev, col)
            if role == SORT_ROLE:
                if value is None:  # blanks sort last whatever the direction
                    return math.inf
                return value
            if role == Qt.ToolTipRole:
                if col == 2 and not ev.ok:
                    return ev.detail or ev.reason
                if col == 6:
                    return "\n".join(f"{k} = {v}" for k, v in ev.config.items())
                return None
            return self._display(ev, col, value)
        if role == Qt.ForegroundRole:
            if col == 2:
                return QColor("#2e9d4f") if ev.ok else QColor("#d9534f")
            if col == 1:
                return QColor(agent_color(ev.agent))
        if role == Qt.TextAlignmentRole and col in (0, 3, 4, 5, 7, 8):
            return int(Qt.AlignRight | Qt.AlignVCenter)
        if role == Qt.FontRole and self.best is not None and ev is self.best:
            from PySide6.QtGui import QFont

            f = QFont()
            f.setBold(True)
            return f
        return None

    def _value(self, i: int, ev: Evaluation, col: int):
        if col == 0:
            return i
        if col == 1:
            return ev.agent
        if col == 2:
            return "ok" if ev.ok else (ev.reason or "failed")
        if col == 3:
            return ev.value if ev.ok else None
        if col == 4:
            return self.speedup(ev)
        if col == 5:
            return self.percent_of_limit(ev)
        if col == 6:
            return params_text(ev.config)
        if col == 7:
            return _first(ev.resources, REGISTER_KEYS)
        if col == 8:
            return _first(ev.resources, SHARED_KEYS)
        return None

    @staticmethod
    def _display(ev: Evaluation, col: int, value):
        if value is None:
            return "—" if col in (3, 4, 5) else ""
        if col == 2:
            return value.replace("_", " ")
        if col == 3:
            return f"{value:.4g}"
        if col == 4:
            return f"{value:.2f}×"
        if col == 5:
            return f"{value:.1f}%"
        return str(value)


class CandidateFilter(QSortFilterProxyModel):
    """Free text over agent / status / parameters, plus a status choice (all, ok, failed)."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setSortRole(SORT_ROLE)
        self.setFilterCaseSensitivity(Qt.CaseInsensitive)
        self.setDynamicSortFilter(True)
        self.status = "all"
        self._needle = ""

    def set_text(self, text: str) -> None:
        self._needle = text.strip().lower()
        self.invalidateFilter()

    def set_status(self, status: str) -> None:
        self.status = status
        self.invalidateFilter()

    def filterAcceptsRow(self, row: int, parent: QModelIndex) -> bool:
        model: CandidateModel = self.sourceModel()
        ev = model.rows[row][1]
        if self.status == "ok" and not ev.ok:
            return False
        if self.status == "failed" and ev.ok:
            return False
        if not self._needle:
            return True
        hay = f"{ev.agent} {'ok' if ev.ok else ev.reason} {params_text(ev.config)} {ev.detail}".lower()
        return all(part in hay for part in self._needle.split())


class CandidateTable(QWidget):
    """Filter bar + table. Rows added through `add` are flushed on a timer in batches."""

    selected = Signal(object)  # Evaluation

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = CandidateModel(self)
        self.proxy = CandidateFilter(self)
        self.proxy.setSourceModel(self.model)
        self.filter = QLineEdit()
        self.filter.setPlaceholderText("Filter: agent, status, parameter=value …")
        self.filter.setClearButtonEnabled(True)
        self.filter.textChanged.connect(self.proxy.set_text)
        self.status = QComboBox()
        self.status.addItem("all candidates", "all")
        self.status.addItem("correct only", "ok")
        self.status.addItem("failures only", "failed")
        self.status.currentIndexChanged.connect(lambda _i: self.proxy.set_status(self.status.currentData()))
        self.count = QLabel("0 candidates")
        self.view = QTableView()
        self.view.setModel(self.proxy)
        self.view.setSortingEnabled(True)
        self.view.sortByColumn(0, Qt.AscendingOrder)
        self.view.setSelectionBehavior(QAbstractItemView.SelectRows)
        self.view.setSelectionMode(QAbstractItemView.SingleSelection)
        self.view.setAlternatingRowColors(True)
        self.view.verticalHeader().hide()
        self.view.verticalHeader().setDefaultSectionSize(22)
        self.view.setWordWrap(False)
        header = self.view.horizontalHeader()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(QHeaderView.Interactive)
        for col, width in enumerate((60, 80, 130, 110, 80, 90, 420, 80, 90)):
            self.view.setColumnWidth(col, width)
        self.view.selectionModel().currentRowChanged.connect(self._current_changed)

        bar = QHBoxLayout()
        bar.addWidget(self.filter, 1)
        bar.addWidget(self.status)
        bar.addWidget(self.count)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(bar)
        layout.addWidget(self.view)

        self._pending: list[tuple[int, Evaluation, float]] = []
        self._timer = QTimer(self)
        self._timer.setInterval(200)  # a table needs no more than 5 updates a second
        self._timer.timeout.connect(self.flush)
        self._timer.start()

    def reset(self, **kwargs) -> None:
        self._pending.clear()
        self.model.reset(**kwargs)
        self.count.setText("0 candidates")

    def add(self, rows: list[tuple[int, Evaluation, float]]) -> None:
        self._pending.extend(rows)

    def flush(self) -> None:
        if not self._pending:
            return
        rows, self._pending = self._pending, []
        self.model.append(rows)
        n, shown = self.model.rowCount(), self.proxy.rowCount()
        self.count.setText(f"{n:,} candidates" if n == shown else f"{shown:,} of {n:,} candidates")

    def _current_changed(self, current: QModelIndex, _previous: QModelIndex) -> None:
        if current.isValid():
            row = self.proxy.mapToSource(current).row()
            self.selected.emit(self.model.evaluation(row))

    def select_key(self, key: str) -> bool:
        for row, (_i, ev, _t) in enumerate(self.model.rows):
            if ev.key == key:
                index = self.proxy.mapFromSource(self.model.index(row, 0))
                if index.isValid():
                    self.view.setCurrentIndex(index)
                    self.view.scrollTo(index)
                    return True
        return False


# ---- detail -----------------------------------------------------------------------------------
def _pygments_style(dark: bool) -> str:
    return "monokai" if dark else "default"


def highlight_source(source: str, dark: bool, language: str = "cuda") -> str:
    lexer = CudaLexer() if language == "cuda" else CLexer()
    formatter = HtmlFormatter(noclasses=True, style=_pygments_style(dark), linenos="table",
                              nobackground=False)
    return highlight(source, lexer, formatter)


def highlight_diff(diff: str, dark: bool) -> str:
    return highlight(diff, DiffLexer(), HtmlFormatter(noclasses=True, style=_pygments_style(dark)))


def config_diff_html(a: Evaluation, b: Evaluation, a_name: str, b_name: str) -> str:
    keys = list(dict.fromkeys([*a.config, *b.config]))
    rows = []
    for k in keys:
        va, vb = a.config.get(k, ""), b.config.get(k, "")
        mark = ' style="background:#f0ad4e33; font-weight:600"' if va != vb else ""
        rows.append(f"<tr{mark}><td>{html.escape(str(k))}</td><td>{html.escape(str(va))}</td>"
                    f"<td>{html.escape(str(vb))}</td></tr>")
    return (f"<table cellpadding=3 cellspacing=0 border=1 style='border-collapse:collapse'>"
            f"<tr><th>parameter</th><th>{html.escape(a_name)}</th><th>{html.escape(b_name)}</th></tr>"
            + "".join(rows) + "</table>")


class TimingHistogram(pg.PlotWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.getPlotItem().setLabel("bottom", "sample time (ms)")
        self.getPlotItem().setLabel("left", "samples")
        self._bars = pg.BarGraphItem(x0=[], x1=[], height=[], brush="#4e79a7")
        self.addItem(self._bars)
        self._lines: list[pg.InfiniteLine] = []
        self.counts: np.ndarray = np.empty(0)

    def show_samples(self, ev: Evaluation, theme: PlotTheme) -> None:
        for line in self._lines:
            self.removeItem(line)
        self._lines = []
        samples = np.asarray(ev.samples_ms, dtype=float)
        if not len(samples):
            self._bars.setOpts(x0=[], x1=[], height=[])
            self.getPlotItem().setTitle("no timing samples", size="9pt")
            self.counts = np.empty(0)
            return
        bins = min(40, max(5, len(samples) // 2))
        counts, edges = np.histogram(samples, bins=bins)
        self.counts = counts
        self._bars.setOpts(x0=edges[:-1], x1=edges[1:], height=counts, brush="#4e79a7",
                           pen=pg.mkPen(theme.background))
        p10, med, p90 = np.percentile(samples, [10, 50, 90])
        for value, name in ((p10, "p10"), (med, "median"), (p90, "p90")):
            line = pg.InfiniteLine(value, angle=90, pen=pg.mkPen(theme.foreground, style=Qt.DashLine),
                                   label=name, labelOpts={"position": 0.9, "color": theme.foreground})
            self.addItem(line)
            self._lines.append(line)
        spread = (p90 - p10) / med * 100 if med else 0.0
        self.getPlotItem().setTitle(f"{len(samples)} samples · median {med:.4g} ms · "
                                    f"p10–p90 spread {spread:.1f}%", size="9pt")
        self.getPlotItem().autoRange()


class CandidateDetail(QWidget):
    """Source, diffs, compile log, verification and timing of one candidate."""

    def __init__(self, model: CandidateModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.language = "cuda"
        self.current: Evaluation | None = None
        self.header = QLabel("Select a candidate")
        self.header.setStyleSheet("font-weight: 600;")
        self.header.setWordWrap(True)
        self.header.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.tabs = QTabWidget()
        self.summary = QTextBrowser()
        self.source = QTextBrowser()
        self.diff = QTextBrowser()
        self.log = QTextBrowser()
        self.verification = QTextBrowser()
        self.timing = TimingHistogram()
        for w in (self.source, self.diff, self.log):
            w.setLineWrapMode(QTextBrowser.NoWrap)
        self.tabs.addTab(self.summary, "Summary")
        self.tabs.addTab(self.source, "Source")
        self.tabs.addTab(self.diff, "Diff")
        self.tabs.addTab(self.log, "Compile log")
        self.tabs.addTab(self.verification, "Verification")
        self.tabs.addTab(self.timing, "Timing")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.header)
        layout.addWidget(self.tabs)

    def apply_theme(self, theme: PlotTheme) -> None:
        style_plot(self.timing, theme)
        if self.current is not None:
            self.show_evaluation(self.current)

    def show_evaluation(self, ev: Evaluation) -> None:
        self.current = ev
        theme = current_plot_theme()
        status = "correct" if ev.ok else f"failed: {(ev.reason or '').replace('_', ' ')}"
        value = f"{ev.value:.4g} {self.model.unit}" if ev.ok and ev.value is not None else "—"
        speed = self.model.speedup(ev)
        self.header.setText(f"{ev.key[:12]} · {ev.agent} · {status} · {value}"
                            + (f" · {speed:.2f}× speedup" if speed else ""))
        self.summary.setHtml(self._summary_html(ev))
        if ev.source:
            self.source.setHtml(highlight_source(ev.source, theme.dark, self.language))
        else:
            self.source.setHtml("<p><i>This candidate has no source of its own: it is a configuration "
                                "of the operator's template (recorded spaces have no source).</i></p>"
                                + config_diff_html(ev, ev, "value", "value").replace(
                                    "<th>value</th><th>value</th>", "<th>value</th><th></th>"))
        self.diff.setHtml(self._diff_html(ev, theme.dark))
        self.log.setPlainText(self._log_text(ev))
        self.verification.setHtml(self._verification_html(ev))
        self.timing.show_samples(ev, theme)

    def _summary_html(self, ev: Evaluation) -> str:
        rows = [("key", ev.key), ("agent", ev.agent), ("parent", ev.parent_key or "—"),
                ("status", "ok" if ev.ok else ev.reason), ("detail", ev.detail or "—"),
                ("median / p10 / p90 (ms)", " / ".join("—" if v is None else f"{v:.4g}"
                                                        for v in (ev.time_ms, ev.p10_ms, ev.p90_ms)))]
        rows += [(k, f"{v:.4g}" if isinstance(v, float) else v) for k, v in ev.metrics.items()]
        rows += [(f"resource: {k}", v) for k, v in ev.resources.items()]
        rows += [(f"param: {k}", v) for k, v in ev.config.items()]
        return ("<table cellpadding=2>" + "".join(
            f"<tr><td><b>{html.escape(str(k))}</b></td><td>{html.escape(str(v))}</td></tr>"
            for k, v in rows) + "</table>")

    def _diff_html(self, ev: Evaluation, dark: bool) -> str:
        parts = []
        for name, other in (("best", self.model.best),
                            ("parent", self.model.by_key.get(ev.parent_key or ""))):
            if other is None:
                parts.append(f"<h4>vs {name}</h4><p><i>no {name} candidate</i></p>")
                continue
            if other is ev:
                parts.append(f"<h4>vs {name}</h4><p><i>this candidate is the {name}</i></p>")
                continue
            if ev.source and other.source:
                diff = "".join(difflib.unified_diff(
                    other.source.splitlines(True), ev.source.splitlines(True),
                    fromfile=f"{name} {other.key[:10]}", tofile=f"this {ev.key[:10]}"))
                parts.append(f"<h4>vs {name}</h4>" + (highlight_diff(diff, dark) if diff
                                                      else "<p><i>identical source</i></p>"))
            else:
                parts.append(f"<h4>vs {name} ({other.key[:10]})</h4>"
                             + config_diff_html(other, ev, name, "this"))
        return "".join(parts)

    @staticmethod
    def _log_text(ev: Evaluation) -> str:
        lines = [f"{'✔' if s.ok else '✘'} {s.name:<14} {s.seconds * 1000:9.1f} ms  {s.detail}"
                 for s in ev.stages]
        if ev.log:
            lines += ["", ev.log]
        return "\n".join(lines) or "No compile log for this candidate."

    @staticmethod
    def _verification_html(ev: Evaluation) -> str:
        verify = [s for s in ev.stages if "verif" in s.name]
        parts = []
        if verify:
            parts.append("<table cellpadding=3>" + "".join(
                f"<tr><td>{'✔' if s.ok else '✘'}</td><td>{html.escape(s.name)}</td>"
                f"<td>{html.escape(s.detail)}</td></tr>" for s in verify) + "</table>")
        errors = {k: v for k, v in ev.metrics.items() if "err" in k}
        if errors:
            parts.append("<p>" + ", ".join(f"{html.escape(k)} = {v:.3g}" for k, v in errors.items())
                         + "</p>")
        if ev.failing_case:
            parts.append("<h4>Failing input (kept in the goal's validation set)</h4><pre>"
                         + html.escape(json.dumps(ev.failing_case, indent=2)) + "</pre>")
        if not ev.ok and ev.reason == "verification_failed" and ev.detail:
            parts.append(f"<p>{html.escape(ev.detail)}</p>")
        if not parts:
            return ("<p><i>No verification report: " + ("the candidate failed before verification."
                    if not ev.ok else "recorded measurements were verified when they were recorded.")
                    + "</i></p>")
        return "".join(parts)
