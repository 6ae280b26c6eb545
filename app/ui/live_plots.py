"""The live view's plots: the convergence chart, the failure strip, agent contributions and
telemetry, and a label that elides instead of widening the window."""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, QSize, Qt
from PySide6.QtGui import QBrush, QColor, QPainter, QPalette
from PySide6.QtWidgets import (
    QGraphicsItem,
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QToolTip,
    QWidget,
)

from app.core import units
from app.core.events import Telemetry
from app.ui.buffers import RingBuffer, RunData
from app.ui.theme import (
    PlotTheme,
    agent_color,
    failure_symbol,
)

AXIS_WIDTH = 64
LEGEND_COLUMNS = 3  # the legend's entries side by side under the plot (rows as needed)
AGENT_AXIS_WIDTH = 76  # 'evolution', 'adversary' whole (a bar's full label is in `shares`)
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


class RowLegend(pg.LegendItem):
    """A legend placed by its parent's layout (pyqtgraph's own moves itself to (0, 0))."""

    def updateSize(self) -> None:
        self.layout.invalidate()
        self.updateGeometry()  # the plot's layout gives it the height its rows need


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
        # four times pyqtgraph's padding: a limit's label beside the lowest or the highest
        # line still fits (a throughput's limit label above the top line was cut)
        item.getViewBox().setDefaultPadding(0.08)
        for side in ("left", "bottom"):  # the unit is in the label: never 'ms (x0.001)'
            item.getAxis(side).enableAutoSIPrefix(False)
        # the legend in a row under the x axis, outside the data: no point and no reference
        # line (the baseline's) is ever drawn under it
        self.legend = RowLegend(labelTextSize="8pt", colCount=LEGEND_COLUMNS, frame=False,
                                    horSpacing=12)
        item.layout.addItem(self.legend, 4, 1)
        item.legend = self.legend  # named items join it; the theme restyles it
        self._chunks: list[pg.ScatterPlotItem] = []
        self._legend_items: dict[str, pg.ScatterPlotItem] = {}
        self._brushes: dict[str, QBrush] = {}
        self._best = pg.PlotDataItem(name="best so far")
        self.addItem(self._best)
        self._lines: dict[str, pg.InfiniteLine] = {}
        self._far: dict[str, pg.TextItem] = {}  # references off the range, named in a corner
        self._note_fill = pg.mkBrush("#ffffffd0")  # the theme's background, see-through
        item.getViewBox().sigResized.connect(lambda *_: self._place_far())
        self.use_time = False
        self.log_y = False
        self.drawn = 0  # rows of the RunData already on screen
        # kept kernels a validation case broke: a cross where each stood, "broken by case N"
        self._broken = pg.ScatterPlotItem(size=11, symbol="x", pen=pg.mkPen("#d62728", width=2),
                                          brush=None)
        self.addItem(self._broken)
        self._broken_labels: list[pg.TextItem] = []
        self.broken_drawn: list[str] = []

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
        fill = pg.mkColor(theme.background)
        fill.setAlpha(208)
        self._note_fill = pg.mkBrush(fill)
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
        self._draw_broken(data)
        x, y = data.best_steps(self.use_time)
        # a staircase: hold each best until the next improvement
        xs, ys = (np.repeat(x, 2)[1:], np.repeat(y, 2)[:-1]) if len(x) else (x, y)
        self._best.setData(x=xs, y=ys, pen=pg.mkPen(theme.best_pen, width=2.5))

    def _draw_broken(self, data: RunData) -> None:
        marks = [(row, v, label) for row, v, label in data.broken
                 if not self.log_y or v > 0]
        if [m[2] for m in marks] == self.broken_drawn:
            return
        for item in self._broken_labels:
            self.removeItem(item)
        self._broken_labels.clear()
        xs = [float(data.elapsed.view()[r] if self.use_time else data.index.view()[r])
              for r, _, _ in marks]
        ys = [math.log10(v) if self.log_y else v for _, v, _ in marks]
        self._broken.setData(x=xs, y=ys)
        for x, y, (_, _, label) in zip(xs, ys, marks):
            text = pg.TextItem(label, color="#d62728", anchor=(0, 1))
            text.setPos(x, y)
            self.addItem(text)
            self._broken_labels.append(text)
        self.broken_drawn = [m[2] for m in marks]

    def set_log_y(self, on: bool) -> None:
        self.log_y = on
        self.getPlotItem().setLogMode(y=on)  # axis labels and the staircase follow
        self.clear_points()

    def set_reference(self, name: str, value: float | None, color: str, label: str,
                      below: bool = False, near: tuple[float, float] | None = None) -> None:
        """A dashed horizontal line at `value` with its label, above it or `below` it.
        `near`: the results' lowest and highest value; a line farther from them than their
        own spread is not drawn to scale (a 28.9 GB/s roof squeezed 0.4-2 GB/s results into
        a flat line at the bottom): a note in the plot's corner names it instead."""
        line = self._lines.get(name)
        far = self._far_text(value, label, near)
        self._show_far(name, far, color)
        if value is None or not math.isfinite(value) or (self.log_y and value <= 0) or far:
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

    def _far_text(self, value: float | None, label: str, near: tuple[float, float] | None) -> str:
        if value is None or near is None or not math.isfinite(value) or (self.log_y and value <= 0):
            return ""
        scale = (lambda v: math.log10(v)) if self.log_y else (lambda v: v)
        if self.log_y and near[0] <= 0:
            return ""
        lo, hi, v = scale(near[0]), scale(near[1]), scale(value)
        span = (hi - lo) or abs(hi) or 1.0
        if v > hi + span:
            return f"{label} ↑ off the plot, above"
        return f"{label} ↓ off the plot, below" if v < lo - span else ""

    def _show_far(self, name: str, text: str, color: str) -> None:
        """A far reference named in a corner of the plot, the top one for a value above the
        range, the bottom one below (where the best so far is not heading), on the plot's
        background; in the view's pixels, so it takes no part in the range (a legend entry
        this long widened the plot past its dock)."""
        item = self._far.get(name)
        if item is not None and item.toPlainText() == text:
            return  # drawn already (this runs on every redraw)
        self._far.pop(name, None)
        if item is not None:
            scene = item.scene()
            item.setParentItem(None)
            if scene is not None:
                scene.removeItem(item)
        if text:
            item = self._far[name] = pg.TextItem(text, color=color, fill=self._note_fill)
            item.setParentItem(self.getPlotItem().getViewBox())
            self._place_far()

    def _place_far(self) -> None:
        box = self.getPlotItem().getViewBox().boundingRect()
        for k, item in enumerate(self._far.values()):
            below = "below" in item.toPlainText()
            item.setAnchor((0, 1) if below else (0, 0))
            item.setPos(4, box.height() - 2 - 18 * k if below else 2 + 18 * k)

    def clear_points(self) -> None:
        for chunk in self._chunks:
            self.removeItem(chunk)
        self._chunks.clear()
        self.drawn = 0
        for item in self._broken_labels:
            self.removeItem(item)
        self._broken_labels.clear()
        self._broken.setData(x=[], y=[])
        self.broken_drawn = []

    def clear_run(self) -> None:
        self.clear_points()
        for legend in self._legend_items.values():
            self.legend.removeItem(legend)
        self._legend_items.clear()
        self._brushes.clear()
        self._best.setData([], [])
        for line in self._lines.values():
            line.hide()
        for name in list(self._far):
            self._show_far(name, "", "")


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


def pale(colour) -> QColor:
    """The agent's own colour, see-through: the same hue as its dots and the report's pale
    bars (QColor.lighter turned the model's mauve into pink)."""
    c = pg.mkColor(colour)
    c.setAlphaF(0.4)
    return c


class AgentChart(pg.PlotWidget):
    """Each agent's share of the evaluations and of the improvements (%), as horizontal bars:
    agent names on the left axis stay legible however narrow the chart gets."""

    TIP = ("Each agent's share of the evaluations (pale) and of the improvements clear of the "
           "timing noise (solid); the adversary's bar is its share of the run's time")

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setMinimumWidth(200)  # the central area shrinks before the docks do
        item = self.getPlotItem()
        item.setLabel("bottom", "share (%)")
        item.setMouseEnabled(x=False, y=False)
        item.hideButtons()
        item.setTitle("Agent share<br><span style='font-size:7.5pt'>pale: evaluations<br>"
                      "solid: improvements</span>", size="9pt")
        item.getAxis("left").setWidth(AGENT_AXIS_WIDTH)
        item.invertY(True)  # the first agent on top
        self.setToolTip(self.TIP)
        self._evals = pg.BarGraphItem(x0=[], y=[], width=[], height=0.38)
        self._wins = pg.BarGraphItem(x0=[], y=[], width=[], height=0.38)
        self.addItem(self._evals)
        self.addItem(self._wins)
        self.shares: dict[str, tuple[float, float]] = {}

    def draw(self, data: RunData, theme: PlotTheme) -> None:
        agents = list(data.agents)
        total_e = max(sum(data.evaluated_by_agent.values()), 1)
        # a new best inside the noise of the one it replaced is not an improvement (app.core.noise)
        total_w = max(sum(data.clear_by_agent.values()), 1)
        e = [100.0 * data.evaluated_by_agent[a] / total_e for a in agents]
        w = [100.0 * data.clear_by_agent[a] / total_w for a in agents]
        for name, (percent, found) in data.time_shares.items():
            # the adversary's bar is its share of the run's time; it proposes no kernels
            agents.append(f"{name} ({found} case{'s' if found != 1 else ''})")
            e.append(percent)
            w.append(0.0)
        y = np.arange(len(agents), dtype=float)
        self.shares = {a: (e[i], w[i]) for i, a in enumerate(agents)}
        # by name alone: the adversary keeps its colour as its case count grows
        colors = [agent_color(a.split(" (")[0], i) for i, a in enumerate(agents)]
        zeros = np.zeros(len(agents))
        self._evals.setOpts(x0=zeros, y=y - 0.2, width=e, height=0.38,
                            brushes=[pg.mkBrush(pale(c)) for c in colors],
                            pen=pg.mkPen(theme.foreground, width=0.5))
        self._wins.setOpts(x0=zeros, y=y + 0.2, width=w, height=0.38,
                           brushes=[pg.mkBrush(c) for c in colors],
                           pen=pg.mkPen(theme.foreground, width=0.5))
        # the axis names the agent; the adversary's case count is in its full label (tooltip)
        self.getPlotItem().getAxis("left").setTicks([[(i, a.split(" (")[0]) for i, a in enumerate(agents)]])
        self.setToolTip(self.TIP + "".join(f"\n{a}: {e[i]:.0f} %" for i, a in enumerate(agents)
                                           if a not in data.agents))
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
