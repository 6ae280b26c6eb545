"""Live view of a run: convergence, every candidate, failures by reason, agent contributions,
budget, counters and telemetry. Draws from a RunData buffer on a timer (25 Hz), never per event."""

from __future__ import annotations

import math
import time

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QBrush, QPainter, QPalette
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QGraphicsItem,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QRadioButton,
    QSizePolicy,
    QSplitter,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from app.core import units
from app.core.events import AgentCredit, Evaluated, RunFinished, RunStarted, Telemetry
from app.ui.buffers import RingBuffer, RunData
from app.ui.theme import (
    PlotTheme,
    agent_color,
    current_plot_theme,
    failure_symbol,
    label_font,
    style_plot,
)

REDRAW_HZ = 25
AXIS_WIDTH = 64
SHORT_REASONS = {"compile_failed": "compile", "runtime_failed": "runtime", "invalid_config": "invalid",
                 "verification_failed": "wrong", "timeout": "timeout", "crash": "crash",
                 "resource_limit": "resources", "static_check": "static", "out_of_memory": "OOM"}
# Where along the plot each reference line's label sits (position, anchor): apart, so close
# lines stay readable, and anchored above the line. The limit's label goes on the side of its
# line no result can reach (`set_reference(below=...)`): the best so far closes in on the limit
# from the other side, and a label there would be drawn across it.
LABEL_AT = {"baseline": (0.02, (0, 1)), "target": (0.5, (0.5, 1)), "limit": (0.98, (1, 1))}
BELOW = {(0, 1): (0, 0), (0.5, 1): (0.5, 0), (1, 1): (1, 0)}  # the same anchor, under the line
TELEMETRY_KEYS = (("clock_mhz", "SM clock", "MHz"), ("temperature_c", "Temperature", "°C"),
                  ("power_w", "Power", "W"))


def format_value(v: float | None, unit: str = "ms") -> str:
    return units.format_value(v, unit)


def format_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class ElidedLabel(QLabel):
    """One line of text that never widens its window: cut with "…" to the width it is given
    (the whole text in the tooltip). `text()` is still the whole text."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        self.setMinimumWidth(40)

    def minimumSizeHint(self) -> QSize:
        return QSize(40, super().minimumSizeHint().height())

    def sizeHint(self) -> QSize:
        return QSize(min(super().sizeHint().width(), 400), super().sizeHint().height())

    def shown_text(self) -> str:
        return self.fontMetrics().elidedText(self.text(), Qt.ElideRight, self.contentsRect().width())

    def paintEvent(self, _event) -> None:
        painter = QPainter(self)
        self.style().drawItemText(painter, self.contentsRect(), int(Qt.AlignLeft | Qt.AlignVCenter),
                                  self.palette(), self.isEnabled(), self.shown_text(),
                                  QPalette.WindowText)

    def event(self, event) -> bool:
        if event.type() == QEvent.ToolTip and not self.toolTip() and self.shown_text() != self.text():
            QToolTip.showText(event.globalPos(), self.text(), self)
            return True
        return super().event(event)


class ConvergencePlot(pg.PlotWidget):
    """Best-so-far staircase over every candidate (coloured by agent), with baseline, target
    and hardware-limit lines.

    Candidate points go into chunks of CHUNK points. Only the newest ("hot") chunk changes;
    full chunks are frozen with a device-coordinate cache, so Qt blits them from a pixmap
    instead of re-rasterising tens of thousands of symbols on every frame. A redraw therefore
    costs O(new points), and a repaint O(points in the hot chunk) while the axes stay put.
    Log scale is applied to the values here, since bare scatter items have no log mode."""

    CHUNK = 4000

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMinimumHeight(160)  # a 768-pixel screen keeps room for the candidate table
        item = self.getPlotItem()
        item.setLabel("left", "objective")
        item.setLabel("bottom", "evaluations")
        item.getAxis("left").setWidth(AXIS_WIDTH)  # same as the failure strip: x axes line up
        # twice pyqtgraph's padding: the limit's label below the lowest line still fits
        item.getViewBox().setDefaultPadding(0.04)
        self.legend = item.addLegend(offset=(-10, 10), labelTextSize="8pt")
        self._chunks: list[pg.ScatterPlotItem] = []
        self._legend_items: dict[str, pg.ScatterPlotItem] = {}
        self._brushes: dict[str, QBrush] = {}
        self._best = pg.PlotDataItem(name="best so far")
        self.addItem(self._best)
        self._lines: dict[str, pg.InfiniteLine] = {}
        self.use_time = False
        self.log_y = False
        self.drawn = 0  # rows of the RunData already on screen

    # ---- drawing --------------------------------------------------------------------------
    def _brush(self, agent: str, order: int) -> QBrush:
        brush = self._brushes.get(agent)
        if brush is None:
            brush = self._brushes[agent] = pg.mkBrush(agent_color(agent, order))
            legend = pg.ScatterPlotItem(size=7, pen=None, brush=brush, name=agent)
            self._legend_items[agent] = legend  # legend sample only, holds no points
            self.legend.addItem(legend, agent)
        return brush

    def _hot_chunk(self) -> pg.ScatterPlotItem:
        if not self._chunks or len(self._chunks[-1].data) >= self.CHUNK:
            if self._chunks:  # freeze the full one: painted from a cached pixmap from now on
                self._chunks[-1].setCacheMode(QGraphicsItem.DeviceCoordinateCache)
            chunk = pg.ScatterPlotItem(size=5, pen=None, pxMode=True, hoverable=False)
            chunk.setZValue(-1)  # the staircase stays on top
            self.addItem(chunk)
            self._chunks.append(chunk)
        return self._chunks[-1]

    def point_count(self) -> int:
        return sum(len(c.data) for c in self._chunks)

    def draw(self, data: RunData, theme: PlotTheme) -> None:
        n = len(data)
        if n < self.drawn:  # a new run in the same buffers: start over
            self.clear_points()
        if n > self.drawn:
            lo = self.drawn
            x = data.elapsed.view()[lo:n] if self.use_time else data.index.view()[lo:n].astype(float)
            values = data.value.view()[lo:n]
            codes = data.agent_code.view()[lo:n]
            ok = ~np.isnan(values)
            if self.log_y:
                ok &= values > 0
                values = np.log10(np.where(ok, values, 1.0))
            brushes = [self._brush(a, i) for i, a in enumerate(data.agents)]
            x, values, codes = x[ok], values[ok], codes[ok]
            done = 0
            while done < len(x):
                chunk = self._hot_chunk()
                take = min(len(x) - done, self.CHUNK - len(chunk.data))
                part = slice(done, done + take)
                chunk.addPoints(x=x[part], y=values[part], brush=[brushes[c] for c in codes[part]])
                done += take
            self.drawn = n
        x, y = data.best_steps(self.use_time)
        # a staircase: hold each best until the next improvement
        xs, ys = (np.repeat(x, 2)[1:], np.repeat(y, 2)[:-1]) if len(x) else (x, y)
        self._best.setData(x=xs, y=ys, pen=pg.mkPen(theme.best_pen, width=2.5))

    def set_log_y(self, on: bool) -> None:
        self.log_y = on
        self.getPlotItem().setLogMode(y=on)  # axis labels and the staircase follow
        self.clear_points()

    def set_reference(self, name: str, value: float | None, color: str, label: str,
                      below: bool = False) -> None:
        """A dashed horizontal line at `value` with its label, above it or `below` it."""
        line = self._lines.get(name)
        if value is None or not math.isfinite(value) or (self.log_y and value <= 0):
            if line is not None:
                line.hide()
            return
        position, anchor = LABEL_AT.get(name, (0.02, (0, 1)))
        anchor = BELOW[anchor] if below else anchor
        if line is None:
            line = pg.InfiniteLine(angle=0, movable=False,
                                   pen=pg.mkPen(color, width=1.5, style=Qt.DashLine),
                                   label=label, labelOpts={"position": position, "color": color,
                                                           "anchors": [anchor, anchor]})
            self.addItem(line)
            self._lines[name] = line
        line.setPen(pg.mkPen(color, width=1.5, style=Qt.DashLine))
        line.label.anchors = [anchor, anchor]  # one run may minimize, the next maximize
        line.label.setColor(color)
        line.label.setFormat(label)
        line.setValue(math.log10(value) if self.log_y else value)
        line.show()
        line.label.updatePosition()  # the anchor, even when the value did not move

    def clear_points(self) -> None:
        for chunk in self._chunks:
            self.removeItem(chunk)
        self._chunks.clear()
        self.drawn = 0

    def clear_run(self) -> None:
        self.clear_points()
        for legend in self._legend_items.values():
            self.legend.removeItem(legend)
        self._legend_items.clear()
        self._brushes.clear()
        self._best.setData([], [])
        for line in self._lines.values():
            line.hide()


class FailureStrip(pg.PlotWidget):
    """Failed candidates, one row per reason, on the convergence plot's x axis (incremental,
    like the convergence scatter)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFixedHeight(90)
        item = self.getPlotItem()
        item.setMouseEnabled(y=False)
        item.hideButtons()
        item.getAxis("left").setWidth(AXIS_WIDTH)
        self._scatters: dict[str, pg.ScatterPlotItem] = {}
        self.drawn = 0
        self._rows = 0

    def draw(self, data: RunData, use_time: bool, theme: PlotTheme) -> None:
        n = len(data)
        if n < self.drawn:
            self.clear_run()
        if n > self.drawn:
            lo = self.drawn
            x_all = data.elapsed.view()[lo:n] if use_time else data.index.view()[lo:n].astype(float)
            codes = data.reason_code.view()[lo:n]
            for code, reason in enumerate(data.reasons):
                mask = codes == code
                if not mask.any():
                    continue
                s = self._scatters.get(reason)
                if s is None:
                    s = pg.ScatterPlotItem(size=7, symbol=failure_symbol(reason), pxMode=True,
                                           pen=pg.mkPen(theme.failure), brush=pg.mkBrush(theme.failure),
                                           hoverable=False)
                    self.addItem(s)
                    self._scatters[reason] = s
                s.addPoints(x=x_all[mask], y=np.full(int(mask.sum()), code, dtype=float))
            self.drawn = n
        if len(data.reasons) != self._rows:
            self._rows = len(data.reasons)
            ticks = [(code, SHORT_REASONS.get(r, r[:9])) for code, r in enumerate(data.reasons)]
            self.getPlotItem().getAxis("left").setTicks([ticks])
            self.getPlotItem().setYRange(-0.7, max(self._rows, 1) - 0.3, padding=0)

    def clear_run(self) -> None:
        for s in self._scatters.values():
            self.removeItem(s)
        self._scatters.clear()
        self.drawn = 0
        self._rows = 0
        self.getPlotItem().getAxis("left").setTicks([[]])


class AgentChart(pg.PlotWidget):
    """Each agent's share of the evaluations and of the improvements (%), as horizontal bars:
    agent names on the left axis stay legible however narrow the chart gets."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMinimumWidth(180)  # the central area shrinks before the docks do
        item = self.getPlotItem()
        item.setLabel("bottom", "share (%)")
        item.setMouseEnabled(x=False, y=False)
        item.hideButtons()
        item.setTitle("Agent share<br><span style='font-size:7.5pt'>pale: evaluations<br>"
                      "solid: improvements</span>", size="9pt")
        item.getAxis("left").setWidth(AXIS_WIDTH)
        item.invertY(True)  # the first agent on top
        self._evals = pg.BarGraphItem(x0=[], y=[], width=[], height=0.38)
        self._wins = pg.BarGraphItem(x0=[], y=[], width=[], height=0.38)
        self.addItem(self._evals)
        self.addItem(self._wins)
        self.shares: dict[str, tuple[float, float]] = {}

    def draw(self, data: RunData, theme: PlotTheme) -> None:
        agents = list(data.agents)
        total_e = max(sum(data.evaluated_by_agent.values()), 1)
        total_w = max(sum(data.improved_by_agent.values()), 1)
        y = np.arange(len(agents), dtype=float)
        e = [100.0 * data.evaluated_by_agent[a] / total_e for a in agents]
        w = [100.0 * data.improved_by_agent[a] / total_w for a in agents]
        self.shares = {a: (e[i], w[i]) for i, a in enumerate(agents)}
        colors = [agent_color(a, i) for i, a in enumerate(agents)]
        zeros = np.zeros(len(agents))
        self._evals.setOpts(x0=zeros, y=y - 0.2, width=e, height=0.38,
                            brushes=[pg.mkBrush(pg.mkColor(c).lighter(150)) for c in colors],
                            pen=pg.mkPen(theme.foreground, width=0.5))
        self._wins.setOpts(x0=zeros, y=y + 0.2, width=w, height=0.38,
                           brushes=[pg.mkBrush(c) for c in colors],
                           pen=pg.mkPen(theme.foreground, width=0.5))
        self.getPlotItem().getAxis("left").setTicks([list(enumerate(agents))])
        self.getPlotItem().setXRange(0, 100, padding=0.02)
        self.getPlotItem().setYRange(-0.6, max(len(agents), 1) - 0.4, padding=0)


class TelemetryStrip(QWidget):
    """Strip charts of device telemetry (clock, temperature, power), shown once readings arrive."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self.buffers = {key: RingBuffer(600) for key, _, _ in TELEMETRY_KEYS}
        self.plots: dict[str, pg.PlotWidget] = {}
        self._curves: dict[str, pg.PlotDataItem] = {}
        for key, title, unit in TELEMETRY_KEYS:
            w = pg.PlotWidget()
            w.setFixedHeight(110)
            w.getPlotItem().setTitle(f"{title} ({unit})", size="8pt")
            w.getPlotItem().hideButtons()
            self.plots[key] = w
            self._curves[key] = w.plot(pen=pg.mkPen("#4e79a7", width=1.5))
            layout.addWidget(w)
        self._t0: float | None = None
        self.dirty = False
        self.hide()

    def add(self, events: list[Telemetry]) -> None:
        for ev in events:
            if self._t0 is None:
                self._t0 = ev.at
            for key in self.buffers:
                if key in ev.readings:
                    self.buffers[key].append(ev.at - self._t0, float(ev.readings[key]))
        self.dirty = True
        if not self.isVisible():
            self.show()

    def draw(self) -> None:
        if not self.dirty:
            return
        self.dirty = False
        for key, buf in self.buffers.items():
            t, v = buf.arrays()
            self._curves[key].setData(t, v)

    def clear(self) -> None:
        for key in self.buffers:
            self.buffers[key] = RingBuffer(600)
            self._curves[key].setData([], [])
        self._t0 = None
        self.hide()


class LiveView(QWidget):
    """The run dashboard. Feed it through `start_run` / `on_*` slots (connected to the bridge),
    or show a stored run with `show_run`."""

    xAxisChanged = Signal(bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.data = RunData()
        self.unit = "ms"
        self._drawn_version = -1
        self._started_wall: float | None = None
        self._running = False
        self.frames = 0
        self._agents_drawn_at = 0.0

        # header: progress, ETA, axis toggle
        # Fonts, not style sheets: the labels keep following the palette (dark theme).
        self.title = ElidedLabel("No run yet — fill in a goal and press Run")
        self.title.setFont(label_font(self.title, 13, bold=True))
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setTextVisible(True)
        self.progress.setFormat("idle")
        self.eta = QLabel("")
        self.eta.setMinimumWidth(90)
        self.by_evals = QRadioButton("vs evaluations")
        self.by_time = QRadioButton("vs time")
        self.by_evals.setChecked(True)
        group = QButtonGroup(self)
        group.addButton(self.by_evals)
        group.addButton(self.by_time)
        self.by_time.toggled.connect(self.set_use_time)
        self.log_y = QCheckBox("log scale")
        self.log_y.toggled.connect(self._set_log_y)

        header = QHBoxLayout()
        header.addWidget(self.title, 1)
        header.addWidget(self.by_evals)
        header.addWidget(self.by_time)
        header.addWidget(self.log_y)
        budget = QHBoxLayout()
        budget.addWidget(QLabel("Budget"))
        budget.addWidget(self.progress, 1)
        budget.addWidget(self.eta)

        # counters
        self.counters: dict[str, QLabel] = {}
        counter_row = QGridLayout()
        for col, (key, label) in enumerate((("evaluated", "Evaluated"), ("improved", "Improved"),
                                            ("failed", "Failed"), ("best", "Best"),
                                            ("speedup", "Speedup"))):
            name = QLabel(label)
            name.setFont(label_font(name, 8))
            value = QLabel("—")
            value.setFont(label_font(value, 14, bold=True))
            value.setTextInteractionFlags(Qt.TextSelectableByMouse)
            counter_row.addWidget(name, 0, col)
            counter_row.addWidget(value, 1, col)
            self.counters[key] = value
        self.failure_detail = QLabel("")
        self.failure_detail.setWordWrap(True)
        self.failure_detail.setFont(label_font(self.failure_detail, 8))
        counter_row.addWidget(self.failure_detail, 2, 0, 1, 5)

        self.convergence = ConvergencePlot()
        self.failures = FailureStrip()
        self.failures.setXLink(self.convergence)
        self.agents = AgentChart()
        self.telemetry = TelemetryStrip()

        plots = QWidget()
        pl = QVBoxLayout(plots)
        pl.setContentsMargins(0, 0, 0, 0)
        pl.setSpacing(2)
        pl.addWidget(self.convergence, 1)
        pl.addWidget(self.failures)
        splitter = QSplitter(Qt.Horizontal)
        splitter.addWidget(plots)
        splitter.addWidget(self.agents)
        splitter.setStretchFactor(0, 4)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([760, 320])

        layout = QVBoxLayout(self)
        layout.setContentsMargins(8, 6, 8, 6)
        layout.addLayout(header)
        layout.addLayout(budget)
        layout.addLayout(counter_row)
        layout.addWidget(splitter, 1)
        layout.addWidget(self.telemetry)
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Expanding)

        self.timer = QTimer(self)
        self.timer.setInterval(int(1000 / REDRAW_HZ))
        self.timer.timeout.connect(self.redraw)
        self.timer.start()
        self.apply_theme(current_plot_theme())

    # ---- feeding --------------------------------------------------------------------------
    def reset(self, minimize: bool = True, title: str = "", unit: str = "ms") -> None:
        self.data = RunData(minimize=minimize)
        self.convergence.clear_run()
        self.failures.clear_run()
        self.telemetry.clear()
        self.set_unit(unit)
        self.title.setText(title or "Run")
        self._drawn_version = -1
        self._started_wall = None
        self.progress.setValue(0)
        self.progress.setFormat("idle")
        self.eta.setText("")

    def preload(self, rows: list) -> None:
        """Evaluations already stored (a resumed run, or a past run being opened)."""
        self.data.add(list(rows))

    def set_unit(self, unit: str) -> None:
        """The objective's unit on the axis and the counters (the run decides it: GB/s for a
        memory-bound throughput goal, GFLOP/s for a compute-bound one)."""
        self.unit = unit
        self.convergence.getPlotItem().setLabel("left", "objective", units=None)
        self.convergence.getPlotItem().getAxis("left").setLabel(f"objective ({unit})")

    def axis_label(self) -> str:
        return self.convergence.getPlotItem().getAxis("left").labelText

    def on_run_started(self, ev: RunStarted) -> None:
        if ev.unit and ev.unit != self.unit:
            self.set_unit(ev.unit)
        d = self.data
        d.baseline, d.limit, d.target = ev.baseline_value, ev.limit_value, ev.target_value
        d.baseline_name = ev.baseline_name
        d.max_evals, d.time_budget_s = ev.max_evals, ev.time_budget_s or None
        d.finished_reason = None
        self._running = True
        self._started_wall = time.monotonic()
        self._start_count = len(d)
        learned = ", ".join(f"run {s['run_id']} ({s['device']})" for s in ev.learned_from)
        self.title.setText(f"{ev.goal_name} — {ev.backend}, agents: {', '.join(ev.agents)}"
                           + (f"; learned from {learned}" if learned else ""))
        self._fix_x_range()
        d.version += 1

    def on_evaluated(self, events: list[Evaluated]) -> None:
        self.data.add([(e.index, e.evaluation, e.elapsed_s) for e in events])

    def on_revoked(self, key: str, reason: str) -> None:
        """The best so far failed re-verification: redraw everything without it."""
        if self.data.revoke(key, reason):
            self.convergence.clear_points()
            self.failures.clear_run()
            self.redraw()

    def on_credit(self, ev: AgentCredit) -> None:
        pass  # the chart derives shares from the evaluations themselves (same for past runs)

    def on_telemetry(self, events: list[Telemetry]) -> None:
        self.telemetry.add(events)

    def on_run_finished(self, ev: RunFinished) -> None:
        self._running = False
        self._fix_x_range()
        self.data.finished_reason = ev.reason
        self.data.version += 1
        self.redraw()

    def show_run(self, rows: list, *, minimize: bool, title: str, unit: str = "ms",
                 baseline: float | None = None, limit: float | None = None,
                 target: float | None = None, max_evals: int | None = None,
                 reason: str | None = None, baseline_name: str = "") -> None:
        """Draw a stored run (from the history)."""
        self.reset(minimize=minimize, title=title, unit=unit)
        self.data.baseline, self.data.limit, self.data.target = baseline, limit, target
        self.data.baseline_name = baseline_name
        self.data.max_evals = max_evals
        self.data.finished_reason = reason
        self.preload(rows)
        self._running = False
        self._fix_x_range()
        self.redraw()

    # ---- drawing --------------------------------------------------------------------------
    def set_use_time(self, use_time: bool) -> None:
        self.convergence.use_time = use_time
        self.convergence.clear_points()
        self.failures.clear_run()
        self.convergence.getPlotItem().setLabel("bottom", "run time (s)" if use_time else "evaluations")
        if self.by_time.isChecked() != use_time:
            self.by_time.setChecked(use_time) if use_time else self.by_evals.setChecked(True)
        self._drawn_version = -1
        self.redraw()
        self.convergence.getPlotItem().enableAutoRange()
        self._fix_x_range()
        self.xAxisChanged.emit(use_time)

    def _fix_x_range(self) -> None:
        """While a run streams, the x axis spans the whole budget: the axes then stay still
        and repaints touch only the newest points (frozen chunks are blitted from cache)."""
        item = self.convergence.getPlotItem()
        d = self.data
        span = d.time_budget_s if self.convergence.use_time else d.max_evals
        if self._running and span:
            item.enableAutoRange(x=False)
            item.setXRange(0, span, padding=0.02)
        else:
            item.enableAutoRange(x=True)

    def _set_log_y(self, on: bool) -> None:
        self.convergence.set_log_y(on)
        self._drawn_version = -1
        self.redraw()

    def apply_theme(self, theme: PlotTheme) -> None:
        self._theme = theme
        for w in (self.convergence, self.failures, self.agents, *self.telemetry.plots.values()):
            style_plot(w, theme)
        self.failures.getPlotItem().showGrid(x=True, y=False, alpha=theme.grid_alpha)
        self.agents.getPlotItem().showGrid(x=True, y=False, alpha=theme.grid_alpha)
        self.convergence.clear_run()
        self.failures.clear_run()
        self._drawn_version = -1
        self.redraw()

    def redraw(self) -> None:
        self.telemetry.draw()
        self._update_budget()
        d = self.data
        if d.version == self._drawn_version:
            return
        self._drawn_version = d.version
        self.frames += 1
        theme = self._theme
        self.convergence.draw(d, theme)
        self.failures.setVisible(bool(d.reasons))
        if d.reasons:
            self.failures.draw(d, self.convergence.use_time, theme)
        now = time.monotonic()
        if not self._running or now - self._agents_drawn_at > 0.5:  # shares move slowly
            self._agents_drawn_at = now
            self.agents.draw(d, theme)
        unit = self.unit
        named = f" ({d.baseline_name})" if d.baseline_name else ""
        self.convergence.set_reference("baseline", d.baseline, theme.baseline,
                                       f"baseline{named} {format_value(d.baseline, unit)}")
        self.convergence.set_reference("target", d.target, theme.target,
                                       f"target {format_value(d.target, unit)}")
        # no time beats the limit and no throughput exceeds it: its label goes on that side
        self.convergence.set_reference("limit", d.limit, theme.limit,
                                       f"hardware limit {format_value(d.limit, unit)}",
                                       below=d.minimize)
        self._update_counters()

    def _update_counters(self) -> None:
        d = self.data
        self.counters["evaluated"].setText(f"{len(d):,}")
        self.counters["improved"].setText(f"{len(d.improvements):,}")
        self.counters["failed"].setText(f"{d.n_failed:,}")
        self.counters["best"].setText(format_value(d.best_value, self.unit))
        best = d.best_value
        if d.baseline and best:
            ratio = d.baseline / best if d.minimize else best / d.baseline
            self.counters["speedup"].setText(f"{ratio:.2f}×")
        else:
            ratio = d.speedup_over_first()
            self.counters["speedup"].setText(f"{ratio:.2f}× vs first" if ratio else "—")
        self.failure_detail.setText("  ·  ".join(
            f"{reason.replace('_', ' ')}: {n}" for reason, n in d.failed_by_reason.most_common()))

    def _update_budget(self) -> None:
        d = self.data
        n = len(d)
        fractions = []
        if d.max_evals:
            fractions.append(min(1.0, n / d.max_evals))
        if d.time_budget_s and n:
            fractions.append(min(1.0, float(d.elapsed.view()[-1]) / d.time_budget_s))
        frac = max(fractions) if fractions else 0.0
        self.progress.setValue(int(frac * 1000))
        if d.finished_reason:
            self.progress.setFormat(f"finished: {d.finished_reason.replace('_', ' ')} — {n:,} evaluations")
            self.eta.setText("")
            return
        if not self._running:
            return
        self.progress.setFormat(f"{frac:.0%} — {n:,}" + (f" / {d.max_evals:,}" if d.max_evals else ""))
        done_here = n - getattr(self, "_start_count", 0)
        if self._started_wall is not None and done_here > 0 and 0 < frac < 1:
            spent = time.monotonic() - self._started_wall
            start_frac = getattr(self, "_start_count", 0) / d.max_evals if d.max_evals else 0.0
            progress_here = max(frac - start_frac, 1e-9)
            remaining = spent * (1 - frac) / progress_here
            self.eta.setText(f"ETA {format_duration(remaining)}")
        else:
            self.eta.setText("")
