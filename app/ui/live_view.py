"""Live view of a run: convergence, every candidate, failures by reason, agent contributions,
budget, counters and telemetry. Draws from a RunData buffer on a timer (25 Hz), never per event."""

from __future__ import annotations

import time

import numpy as np
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QRadioButton,
    QSizePolicy,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.core.events import AgentCredit, Evaluated, RunFinished, RunStarted, Telemetry
from app.core.noise import NOISE_TIP
from app.core.types import Evaluation
from app.run_summary import RunSummary
from app.ui.buffers import RunData
from app.ui.live_plots import (
    AgentChart,
    ConvergencePlot,
    ElidedLabel,
    FailureStrip,
    TelemetryStrip,
    format_duration,
    format_value,
)
from app.ui.run_summary_view import RunSummaryPanel
from app.ui.theme import (
    PlotTheme,
    current_plot_theme,
    label_font,
    style_plot,
)

REDRAW_HZ = 25


def budget_text(n: int, max_evals: int | None, elapsed_s: float, time_budget_s: float | None,
                simulated: bool = False) -> str:
    """The budget bar's words: each budget named with its share ('3 / 60 evaluations (5%) ·
    0:22 / 2:00 of the time budget (18%)'), never a bare '18% — 3 / 60'."""
    parts = [f"{n:,} / {max_evals:,} evaluations ({n / max_evals:.0%})" if max_evals
             else f"{n:,} evaluations"]
    if time_budget_s:
        clock = "simulated time" if simulated else "time budget"
        parts.append(f"{format_duration(elapsed_s)} / {format_duration(time_budget_s)} of the "
                     f"{clock} ({min(1.0, elapsed_s / time_budget_s):.0%})")
    return " · ".join(parts)


def time_shares(credits: dict) -> dict[str, tuple[float, int]]:
    """Agents whose share is of the run's time (the adversary), from AgentCredit's credits:
    name -> (% of the run's time, validation cases found). Live and reopened runs alike."""
    return {a: (100.0 * float(c.get("time_share", 0.0)), int(c.get("cases", 0)))
            for a, c in credits.items() if isinstance(c, dict) and c.get("time_budget")}


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
        self._paused_at: float | None = None  # the ETA holds still while the run is paused
        self._learned_from = ""  # a transferred start: the runs it learned from
        self._simulated = False  # replay: the run clock adds up recorded times
        self._running = False
        self.frames = 0
        self._agents_drawn_at = 0.0

        header, budget = self._make_header()
        counter_row = self._make_counters()
        splitter = self._make_plots()
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

    def _make_header(self) -> tuple[QHBoxLayout, QHBoxLayout]:
        """The title row, and the budget bar with the ETA. Fonts, not style sheets: the labels
        keep following the palette (dark theme)."""
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

        header = QHBoxLayout()  # the title has the whole width: a narrow window still reads it
        header.addWidget(self.title, 1)
        budget = QHBoxLayout()
        budget.addWidget(QLabel("Budget"))
        budget.addWidget(self.progress, 1)
        budget.addWidget(self.eta)
        return header, budget

    def _make_counters(self) -> QGridLayout:
        """The counters, the plot's axis choices beside them and the run summary under them."""
        self.counters: dict[str, QLabel] = {}
        self.counter_names: dict[str, QLabel] = {}
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
            self.counter_names[key] = name
            counter_row.addWidget(value, 1, col)
            self.counters[key] = value
        axis = QGridLayout()  # the plot's axis choices beside the counters: the budget bar
        axis.setSpacing(0)  # keeps the width its words need
        axis.addWidget(self.by_evals, 0, 0)
        axis.addWidget(self.by_time, 0, 1)
        axis.addWidget(self.log_y, 1, 0)
        counter_row.addLayout(axis, 0, 5, 2, 1, Qt.AlignRight | Qt.AlignVCenter)
        counter_row.setColumnStretch(5, 1)
        self.summary_panel = RunSummaryPanel()  # speedup basis, hardware share, failures
        counter_row.addWidget(self.summary_panel, 2, 0, 1, 6)
        return counter_row

    def _make_plots(self) -> QSplitter:
        """Convergence over the failure strip, beside the agent chart (telemetry goes under)."""
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
        return splitter

    # ---- feeding --------------------------------------------------------------------------
    def reset(self, minimize: bool = True, title: str = "", unit: str = "ms") -> None:
        self.data = RunData(minimize=minimize)
        self.summary_panel.reset()
        self.convergence.clear_run()
        self.failures.clear_run()
        self.telemetry.clear()
        self.set_unit(unit)
        self.title.setText(title or "Run")
        self._drawn_version = -1
        self._started_wall = None
        self._paused_at = None
        self._learned_from = ""
        self.counter_names["speedup"].setText("Speedup")
        self.progress.setValue(0)
        self.progress.setFormat("idle")
        self.eta.setText("")

    def preload(self, rows: list) -> None:
        """Evaluations already stored (a resumed run, or a past run being opened)."""
        self.data.add(list(rows))
        self.summary_panel.add(list(rows))

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
        self._learned_from = learned
        self._simulated = ev.backend == "replay"
        self._axis_label()
        # the agents are in the chart beside the plot and in the tooltip: the title stays short
        self.title.setText(f"{ev.goal_name} — {ev.backend}" + (f"; learned from {learned}" if learned else ""))
        self.title.setToolTip(f"{ev.goal_name} — {ev.backend}, agents: {', '.join(ev.agents)}"
                              + (f"; learned from {learned}" if learned else ""))
        self._fix_x_range()
        d.version += 1

    def on_evaluated(self, events: list[Evaluated]) -> None:
        rows = [(e.index, e.evaluation, e.elapsed_s) for e in events]
        self.data.add(rows)
        self.summary_panel.add(rows)

    def show_summary(self, summary: RunSummary | None) -> None:
        """The finished run's one summary (app.run_summary): its speedup replaces the live
        ratio, stated with its basis."""
        self.summary_panel.show_summary(summary)
        self.data.version += 1
        self.redraw()

    def on_revoked(self, key: str, reason: str, label: str = "") -> None:
        """A kept kernel failed re-verification: redraw everything without it; `label`
        ("broken by case N") marks where it stood."""
        if self.data.revoke(key, reason, label):
            self.convergence.clear_points()
            self.failures.clear_run()
            self.redraw()

    def on_rechecked(self, key: str, evaluation: Evaluation) -> None:
        """A stored best was verified and timed again: its figure is the one measured now."""
        if self.data.recheck(key, evaluation):
            self.convergence.clear_points()
            self.redraw()

    def on_credit(self, ev: AgentCredit) -> None:
        # the chart derives shares from the evaluations themselves (same for past runs); an
        # agent whose share is of the run's time (the adversary) reports it here
        shares = time_shares(ev.credits)
        if shares != self.data.time_shares:
            self.data.time_shares = shares
            self.data.version += 1

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
                 reason: str | None = None, baseline_name: str = "",
                 summary: RunSummary | None = None, credits: dict | None = None) -> None:
        """Draw a stored run (from the history); `credits` are the run's stored AgentCredit
        (the adversary's row comes from them, as it did live)."""
        self.reset(minimize=minimize, title=title, unit=unit)
        self.data.time_shares = time_shares(credits or {})
        self.data.baseline, self.data.limit, self.data.target = baseline, limit, target
        self.data.baseline_name = baseline_name
        self.data.max_evals = max_evals
        self.data.finished_reason = reason
        self.preload(rows)
        self.summary_panel.show_summary(summary)
        self._running = False
        self._fix_x_range()
        self.redraw()

    # ---- drawing --------------------------------------------------------------------------
    def set_use_time(self, use_time: bool) -> None:
        self.convergence.use_time = use_time
        self.convergence.clear_points()
        self.failures.clear_run()
        self._axis_label()
        if self.by_time.isChecked() != use_time:
            self.by_time.setChecked(use_time) if use_time else self.by_evals.setChecked(True)
        self._drawn_version = -1
        self.redraw()
        self.convergence.getPlotItem().enableAutoRange()
        self._fix_x_range()
        self.xAxisChanged.emit(use_time)

    def _axis_label(self) -> None:
        if not self.convergence.use_time:
            text = "evaluations"
        else:  # a replay's clock adds up the recorded times: not the wall time of this run
            text = "simulated run time (s, recorded times)" if self._simulated else "run time (s)"
        self.convergence.getPlotItem().setLabel("bottom", text)

    def set_paused(self, paused: bool) -> None:
        """A paused run's ETA holds still (the pause is not counted as time spent)."""
        now = time.monotonic()
        if paused and self._paused_at is None:
            self._paused_at = now
            if self.eta.text():
                self.eta.setText(f"{self.eta.text().split(' (')[0]} (paused)")
        elif not paused and self._paused_at is not None:
            if self._started_wall is not None:
                self._started_wall += now - self._paused_at
            self._paused_at = None

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
        values = d.value.view()
        near = (float(np.nanmin(values)), float(np.nanmax(values))) \
            if len(values) and not np.isnan(values).all() else None
        self.convergence.set_reference("limit", d.limit, theme.limit,
                                       f"hardware limit {format_value(d.limit, unit)}",
                                       below=d.minimize, near=near)
        self._update_counters()

    def _update_counters(self) -> None:
        d = self.data
        self.counters["evaluated"].setText(f"{len(d):,}")
        self._update_improved()
        self.counters["failed"].setText(f"{d.n_failed:,}")
        self.counters["best"].setText(format_value(d.best_value, self.unit))
        best = d.best_value
        summary = self.summary_panel.summary
        speedup = self.counters["speedup"]
        name = self.counter_names["speedup"]  # the basis in the name: the value stays short
        if summary is not None:  # the run's one figure, the same `show` and the report give
            name.setText("Speedup")
            speedup.setText(f"{summary.speedup:.2f}×" if summary.speedup else "—")
            speedup.setToolTip(summary.speedup_text())
        elif d.baseline and best:
            ratio = d.baseline / best if d.minimize else best / d.baseline
            name.setText("Speedup vs baseline")
            speedup.setText(f"{ratio:.2f}×")
            speedup.setToolTip(f"so far, vs the baseline {format_value(d.baseline, self.unit)} "
                               "measured at the start; the run's figure comes at its end")
        elif self._learned_from:  # the first evaluation was the best learned elsewhere
            ratio = d.speedup_over_first()
            name.setText("Speedup over the transferred start")
            speedup.setText(f"{ratio:.2f}×" if ratio else "—")
            speedup.setToolTip(f"so far, over the first evaluation: the best configuration learned "
                               f"from {self._learned_from}, measured here. 1.00× means nothing "
                               "faster than that start was found yet, not that the run did nothing.")
        else:
            ratio = d.speedup_over_first()
            name.setText("Speedup vs first")  # '1.40× vs first' clipped the Best at 1366x768
            speedup.setText(f"{ratio:.2f}×" if ratio else "—")
            speedup.setToolTip("so far, over the first successful evaluation")

    def _update_improved(self) -> None:
        """Improvements clear of the timing noise, big; new bests inside it, small beside them
        (the count `run`, `show` and the report give, app.core.noise)."""
        count = self.data.improvement_count
        label = self.counters["improved"]
        if not count.within:
            label.setText(f"{count.clear:,}")
            label.setToolTip(NOISE_TIP)
            return
        label.setText(f"{count.clear:,}<span style='font-size:8pt; font-weight:normal'>"
                      f" +{count.within:,} within noise</span>")
        label.setToolTip(f"{count.clear:,} new bests clear of the timing noise, {count.within:,} "
                         f"more inside it. {NOISE_TIP}")

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
        elapsed = float(d.elapsed.view()[-1]) if n else 0.0
        self.progress.setFormat(budget_text(n, d.max_evals, elapsed, d.time_budget_s, self._simulated))
        if self._paused_at is not None:
            return  # the ETA stays as it was when the run paused
        done_here = n - getattr(self, "_start_count", 0)
        if self._started_wall is not None and done_here > 0 and 0 < frac < 1:
            spent = time.monotonic() - self._started_wall
            start_frac = getattr(self, "_start_count", 0) / d.max_evals if d.max_evals else 0.0
            progress_here = max(frac - start_frac, 1e-9)
            remaining = spent * (1 - frac) / progress_here
            self.eta.setText(f"ETA {format_duration(remaining)}")
        else:
            self.eta.setText("")
