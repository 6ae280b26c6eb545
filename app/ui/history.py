"""History: projects -> goals -> runs from the SQLite store, with open / compare / resume /
re-run / delete."""

from __future__ import annotations

import datetime as dt
import logging

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QGridLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.store import DatabaseError, StoreError
from app.ui.theme import OVERLAY_COLORS, PlotTheme, current_plot_theme, style_plot

log = logging.getLogger(__name__)

RUN_ROLE = Qt.UserRole + 1
RESUMABLE = ("stopped", "interrupted", "failed")


def _when(ts: float | None) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M") if ts else ""


def _when_short(ts: float | None) -> str:
    """'18:59' today, '30 Nov' this year, '2025-11-30' before: the column fits a narrow dock
    (the full date and time are in the tooltip)."""
    if not ts:
        return ""
    when, now = dt.datetime.fromtimestamp(ts), dt.datetime.now()
    if when.date() == now.date():
        return when.strftime("%H:%M")
    return when.strftime("%d %b") if when.year == now.year else when.strftime("%Y-%m-%d")


class HistoryPanel(QWidget):
    openRun = Signal(int)
    compareRuns = Signal(list)
    resumeRun = Signal(int)
    rerunGoal = Signal(int)  # a run id whose goal to run again
    deleted = Signal(int)
    chooseFile = Signal()  # the user asks for another history file

    def __init__(self, store_factory, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._store_factory = store_factory
        self.tree = QTreeWidget()
        self.tree.setColumnCount(5)
        self.tree.setHeaderLabels(["Run", "Status", "Evals", "Best", "Started"])
        self.tree.setSelectionMode(QAbstractItemView.ExtendedSelection)
        self.tree.setAlternatingRowColors(True)
        self.tree.setUniformRowHeights(True)
        self.tree.itemDoubleClicked.connect(self._double_clicked)
        self.tree.itemSelectionChanged.connect(self._update_buttons)
        # Runs are short labels ("run 12"): the figures keep to their contents so every
        # column shows in a dock of ~340 px; goal rows span the row, names stay whole.
        self.tree.setIndentation(12)
        self.tree.setColumnWidth(0, 92)
        header = self.tree.header()
        for col in range(1, 5):
            header.setSectionResizeMode(col, QHeaderView.ResizeToContents)
        self.open_button = QPushButton("Open")
        self.compare_button = QPushButton("Compare")
        self.resume_button = QPushButton("Resume")
        self.rerun_button = QPushButton("Re-run")
        self.delete_button = QPushButton("Delete…")
        self.refresh_button = QPushButton("↻ Reload")
        self.refresh_button.setToolTip("Reload the history")
        self.open_button.clicked.connect(lambda: self._emit_one(self.openRun))
        self.compare_button.clicked.connect(lambda: self.compareRuns.emit(self.selected_runs()))
        self.resume_button.clicked.connect(lambda: self._emit_one(self.resumeRun))
        self.rerun_button.clicked.connect(lambda: self._emit_one(self.rerunGoal))
        self.delete_button.clicked.connect(lambda: self.delete_selected())
        self.refresh_button.clicked.connect(self.refresh)
        # Two rows of buttons: one row of five is wider than the dock it shares with the form.
        buttons = QGridLayout()
        buttons.setContentsMargins(0, 0, 0, 0)
        for i, b in enumerate((self.open_button, self.compare_button, self.resume_button,
                               self.rerun_button, self.delete_button, self.refresh_button)):
            buttons.addWidget(b, i // 3, i % 3)
        # Why the history file cannot be used, whole (a tree cell cut it to "History un…"),
        # with the way out beside it.
        self.problem = QLabel()
        self.problem.setObjectName("label:history-problem")
        self.problem.setWordWrap(True)
        self.problem.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.choose_button = QPushButton("Choose or create a history file…")
        self.choose_button.setToolTip("Use another history database (remembered)")
        self.choose_button.clicked.connect(self.chooseFile)
        # in the tree's place while the file cannot be used: the reason, the way out under it
        self.problem_box = QWidget()
        box = QVBoxLayout(self.problem_box)
        box.setContentsMargins(0, 0, 0, 0)
        box.addWidget(self.problem)
        box.addWidget(self.choose_button)
        box.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.problem_box, 1)
        layout.addWidget(self.tree, 1)
        layout.addLayout(buttons)
        self.set_problem("")
        self.runs: dict[int, dict] = {}
        self._update_buttons()

    # ---- contents -------------------------------------------------------------------------
    def set_problem(self, problem: str) -> None:
        """'' when the history can be read; else the one-line reason, shown in place of the tree."""
        self.problem.setText(f"History unavailable: {problem}" if problem else "")
        self.problem_box.setVisible(bool(problem))
        self.tree.setVisible(not problem)

    def refresh(self) -> None:
        selected = set(self.selected_runs())
        self.tree.clear()
        self.runs = {}
        try:
            store = self._store_factory()
            runs = store.list_runs()  # one query, with each run's project and best value
        except Exception as exc:  # noqa: BLE001 - any reason: said in the panel, never a crash
            log.warning("cannot read the history: %s", exc)
            self.set_problem(str(exc))
            self._update_buttons()
            return
        self.set_problem("")
        project_items: dict[str, QTreeWidgetItem] = {}
        goal_items: dict[str, QTreeWidgetItem] = {}
        for run in sorted(runs, key=lambda r: r["id"]):
            self.runs[run["id"]] = run
            pname = run.get("project") or "default"
            pitem = project_items.get(pname)
            if pitem is None:
                pitem = QTreeWidgetItem([pname])
                pitem.setFirstColumnSpanned(True)
                f = pitem.font(0)
                f.setBold(True)
                pitem.setFont(0, f)
                self.tree.addTopLevelItem(pitem)
                project_items[pname] = pitem
            gkey = f"{pname}/{run['goal_key']}"
            gitem = goal_items.get(gkey)
            if gitem is None:
                gitem = QTreeWidgetItem([run["name"]])
                gitem.setToolTip(0, f"goal {run['goal_key']} · {run['backend']}")
                pitem.addChild(gitem)
                gitem.setFirstColumnSpanned(True)  # (only takes once the item is in the tree)
                goal_items[gkey] = gitem
            best = run.get("best_value")
            label = f"run {run['id']}" + (f" (continues {run['resumed_from']})"
                                          if run.get("resumed_from") else "")
            item = QTreeWidgetItem([label, run["status"], str(run.get("evaluations") or 0),
                                    "—" if best is None else f"{best:.4g}",
                                    _when_short(run["started_at"])])
            item.setToolTip(4, _when(run["started_at"]))
            if best is not None:  # the column stays narrow; the unit is one hover away
                item.setToolTip(3, f"best {best:.6g} {run.get('unit') or ''}".rstrip())
            item.setData(0, RUN_ROLE, run["id"])
            item.setToolTip(1, run.get("reason") or "")
            gitem.addChild(item)
            if run["id"] in selected:
                item.setSelected(True)
        self.tree.expandAll()
        self._update_buttons()

    def item_for_run(self, run_id: int) -> QTreeWidgetItem | None:
        it = self.tree.invisibleRootItem()
        stack = [it.child(i) for i in range(it.childCount())]
        while stack:
            item = stack.pop()
            if item.data(0, RUN_ROLE) == run_id:
                return item
            stack.extend(item.child(i) for i in range(item.childCount()))
        return None

    def select_runs(self, run_ids: list[int]) -> None:
        self.tree.clearSelection()
        for rid in run_ids:
            item = self.item_for_run(rid)
            if item is not None:
                item.setSelected(True)

    def selected_runs(self) -> list[int]:
        out = []
        for item in self.tree.selectedItems():
            rid = item.data(0, RUN_ROLE)
            if rid is not None:
                out.append(int(rid))
        return sorted(out)

    # ---- actions ----------------------------------------------------------------------------
    def _emit_one(self, signal) -> None:
        runs = self.selected_runs()
        if runs:
            signal.emit(runs[-1])

    def _double_clicked(self, item: QTreeWidgetItem, _col: int) -> None:
        rid = item.data(0, RUN_ROLE)
        if rid is not None:
            self.openRun.emit(int(rid))

    def _update_buttons(self) -> None:
        runs = self.selected_runs()
        one = len(runs) == 1
        self.open_button.setEnabled(one)
        self.compare_button.setEnabled(len(runs) >= 2)
        self.rerun_button.setEnabled(one)
        self.delete_button.setEnabled(bool(runs))
        self.resume_button.setEnabled(one and self.runs.get(runs[0], {}).get("status") in RESUMABLE)

    def delete_selected(self, confirm: bool = True) -> None:
        runs = self.selected_runs()
        if not runs:
            return
        if confirm:
            answer = QMessageBox.question(
                self, "Delete runs",
                f"Delete {'run ' + str(runs[0]) if len(runs) == 1 else f'{len(runs)} runs'} and "
                "all their evaluations? This cannot be undone.",
                QMessageBox.Yes | QMessageBox.Cancel, QMessageBox.Cancel)
            if answer != QMessageBox.Yes:
                return
        store = self._store_factory()
        for rid in sorted(runs, reverse=True):  # followers first
            try:
                store.delete_run(rid)  # refused while another run continues it
                self.deleted.emit(rid)
            except (StoreError, DatabaseError) as exc:
                QMessageBox.warning(self, "Delete runs", f"Run {rid} was not deleted: {exc}")
        self.refresh()


class ComparePlot(pg.PlotWidget):
    """Best-so-far curves of several runs on one chart."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        item = self.getPlotItem()
        item.setLabel("bottom", "evaluations")
        item.setLabel("left", "best so far")
        self.legend = item.addLegend(offset=(-10, 10))
        self.curves: dict[int, pg.PlotDataItem] = {}
        self.use_time = False
        self._series: list[tuple[int, str, np.ndarray, np.ndarray, np.ndarray]] = []
        style_plot(self, current_plot_theme())

    def apply_theme(self, theme: PlotTheme) -> None:
        style_plot(self, theme)

    def set_runs(self, series: list[tuple[int, str, list[tuple]]], unit: str = "") -> None:
        """series: (run id, label, convergence rows (index, elapsed, value, best)); `unit`:
        the objective's unit when the runs share one."""
        self.getPlotItem().setLabel("left", f"best so far ({unit})" if unit else "best so far")
        self._series = []
        for rid, label, rows in series:
            arr = np.array([(r[0], r[1], np.nan if r[3] is None else r[3]) for r in rows],
                           dtype=float).reshape(-1, 3)
            self._series.append((rid, label, arr[:, 0], arr[:, 1], arr[:, 2]))
        self.redraw()

    def set_use_time(self, use_time: bool) -> None:
        self.use_time = use_time
        self.getPlotItem().setLabel("bottom", "run time (s)" if use_time else "evaluations")
        self.redraw()

    def redraw(self) -> None:
        self.legend.clear()
        for c in self.curves.values():
            self.removeItem(c)
        self.curves = {}
        for n, (rid, label, idx, elapsed, best) in enumerate(self._series):
            x = elapsed if self.use_time else idx
            ok = ~np.isnan(best)
            xs, ys = x[ok], best[ok]
            if len(xs):  # staircase
                xs, ys = np.repeat(xs, 2)[1:], np.repeat(ys, 2)[:-1]
            color = OVERLAY_COLORS[n % len(OVERLAY_COLORS)]
            curve = self.plot(xs, ys, pen=pg.mkPen(color, width=2.5), name=label)
            self.curves[rid] = curve
        self.getPlotItem().enableAutoRange()
