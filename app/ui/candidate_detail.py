"""One candidate in detail: summary, the source that ran, diffs, the compiler's command and
output, the checks and the timing samples."""

from __future__ import annotations

import difflib
import html
import logging

import numpy as np
import pyqtgraph as pg
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import CLexer, CudaLexer, DiffLexer
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QSizePolicy, QTabWidget, QTextBrowser, QVBoxLayout, QWidget

from app.core.types import SUSPECT, Evaluation
from app.core.units import format_value
from app.ui.candidate_source import RunSource, compile_command, is_recorded
from app.ui.candidate_table import CandidateModel
from app.ui.candidate_tabs import checks_html, log_text, summary_html
from app.ui.theme import PlotTheme, current_plot_theme, label_font, style_plot

log = logging.getLogger(__name__)


def _pygments_style(dark: bool) -> str:
    return "monokai" if dark else "default"


def source_language(backend: str) -> str:
    """The language a backend's candidates are written in, for highlighting (registry)."""
    from app.gpu.registry import backend_names, backend_spec

    return (backend_spec(backend).language if backend in backend_names() else "") or "cuda"


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
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Expanding)  # the dock's width
        self.getPlotItem().setLabel("bottom", "sample time (ms)")
        self.getPlotItem().setLabel("left", "samples")
        for side in ("bottom", "left"):  # never 'ms (x0.001)': the unit is in the label
            self.getPlotItem().getAxis(side).enableAutoSIPrefix(False)
        self.getPlotItem().getAxis("bottom").setStyle(autoExpandTextSpace=True, hideOverlappingLabels=True)
        self.getPlotItem().setContentsMargins(4, 4, 14, 4)  # room for the last tick's text
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
        # each label at its own height (never on another), beside its line on the side with
        # room (never cut by the plot's edge), on the background (readable over the bars)
        lo, hi = float(edges[0]), float(edges[-1])
        fill = pg.mkBrush(theme.background)
        for value, name, position in ((p10, "p10", 0.92), (med, "median", 0.74), (p90, "p90", 0.56)):
            right_side = (value - lo) / ((hi - lo) or 1.0) < 0.6
            anchor = (0, 0.5) if right_side else (1, 0.5)
            line = pg.InfiniteLine(value, angle=90, pen=pg.mkPen(theme.foreground, style=Qt.DashLine),
                                   label=name, labelOpts={"position": position, "color": theme.foreground,
                                                          "anchors": [anchor, anchor], "fill": fill})
            self.addItem(line)
            self._lines.append(line)
        spread = (p90 - p10) / med * 100 if med else 0.0
        # short enough for the dock's width: '40 samples · median 1.612 ms · p10–p90 269%'
        spread_text = f"{spread:.0f}%" if spread >= 10 else f"{spread:.2g}%"
        self.getPlotItem().setTitle(f"{len(samples)} samples · median {med:.4g} ms · "
                                    f"p10–p90 {spread_text}", size="9pt")
        self.getPlotItem().getViewBox().autoRange(padding=0.05)  # the outermost bars whole


class CandidateDetail(QWidget):
    """Source, diffs, compile log, verification and timing of one candidate."""

    EMPTY = "Select a candidate"

    def __init__(self, model: CandidateModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.language = "cuda"
        self.goal = None  # the run's goal: which catalog template a configuration fills in
        self.run_source = RunSource(None)
        self.current: Evaluation | None = None
        self.setMinimumWidth(240)
        self.header = QLabel(self.EMPTY)
        self.header.setFont(label_font(self.header, bold=True))  # palette colours, not a sheet
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
        # Short tab names: all six fit a dock of ~320 px (the tooltips say more).
        for widget, name, tip in (
                (self.summary, "Summary", ("Key, status, measurements, the share of the hardware, "
                                           "resources, parameters and where the time went")),
                (self.source, "Source", ("The code that ran: the parameters as the compiler got "
                                         "them, then the candidate's own source, your kernel or "
                                         "the operator's template")),
                (self.diff, "Diff", "Against the best candidate and the parent"),
                (self.log, "Log", "Compiler command, compiler output and the time of each stage"),
                (self.verification, "Checks", "Each stage's outcome; verification against the reference"),
                (self.timing, "Timing", "Timing samples: median and p10-p90 spread")):
            self.tabs.setTabToolTip(self.tabs.addTab(widget, name), tip)
        self.tabs.setDocumentMode(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.header)
        layout.addWidget(self.tabs)

    def apply_theme(self, theme: PlotTheme) -> None:
        style_plot(self.timing, theme)
        if self.current is not None:
            self.show_evaluation(self.current)

    def set_run(self, goal, language: str, started_at: float | None = None,
                kept_source: dict | None = None) -> None:
        """A new run is shown (started or reopened): forget the previous run's candidate.
        `kept_source`: your kernel's text as the run kept it; without it, `started_at` (when
        the run started) tells whether the file was edited since."""
        self.goal = goal
        self.language = language
        self.run_source = RunSource(goal, started_at, kept_source)
        self.clear()

    def clear(self) -> None:
        self.current = None
        self.header.setText(self.EMPTY)
        for w in (self.summary, self.source, self.diff, self.log, self.verification):
            w.clear()
        self.timing.show_samples(Evaluation(key="", config={}, ok=False), current_plot_theme())
        self.timing.getPlotItem().setTitle("", size="9pt")

    @property
    def recorded(self) -> bool:
        return is_recorded(self.goal)

    def source_text(self, ev: Evaluation) -> tuple[str, str] | None:
        """(code, language) of what the candidate compiled: its own source (LLM or user
        kernels), your kernel's file or the catalog template, with its parameters as the
        compiler got them. None for recorded measurements or a source that cannot be read."""
        code = self.run_source.text(ev)
        return None if code is None else (code[0], self.language or code[1])

    def _source_html(self, ev: Evaluation, dark: bool) -> str:
        params = config_diff_html(ev, ev, "value", "value").replace(
            "<th>value</th><th>value</th>", "<th>value</th><th></th>")
        if self.recorded:
            return ("<p><i>A recorded measurement: the space's file keeps each configuration's "
                    "timing, not the code that ran. Its parameters:</i></p>" + params)
        code = self.source_text(ev)
        if code is None:
            why = self.run_source.problem or "the run's source could not be found"
            return (f"<p><i>The source cannot be shown: {html.escape(why)}.</i></p>"
                    f"<p>Compiled as: <code>{html.escape(compile_command(ev) or 'not recorded')}"
                    "</code></p>" + params)
        note = self.run_source.changed_note()
        head = "".join(f"<p><code>{html.escape(line)}</code></p>"
                       for line in self.run_source.preamble(ev))
        return ((f"<p><b>⚠ {html.escape(note)}</b></p>" if note else "") + head
                + highlight_source(code[0], dark, code[1]))

    def show_evaluation(self, ev: Evaluation) -> None:
        ev = self.model.ordered(ev)
        self.current = ev
        theme = current_plot_theme()
        status = ("correct" if ev.ok else "refused: beyond the hardware roof"
                  if ev.reason == SUSPECT else f"failed: {(ev.reason or '').replace('_', ' ')}")
        value = format_value(ev.value, self.model.unit) if ev.ok else "—"
        speed = self.model.speedup(ev)
        self.header.setText(f"{ev.key[:12]} · {ev.agent} · {status} · {value}"
                            + (f" · {speed:.2f}× {self.model.reference_label()}" if speed else ""))
        speedup = f"{speed:.2f}× {self.model.reference_label()}" if speed else ""
        self.summary.setHtml(summary_html(ev, speedup_text=speedup, limit=self.model.limit,
                                          minimize=self.model.minimize))
        self.source.setHtml(self._source_html(ev, theme.dark))
        self.diff.setHtml(self._diff_html(ev, theme.dark))
        self.log.setPlainText(log_text(ev, self.recorded))
        self.verification.setHtml(checks_html(ev, self.recorded))
        self.timing.show_samples(ev, theme)

    def _diff_html(self, ev: Evaluation, dark: bool) -> str:
        parts = []
        for name, other in (("best", self.model.best),
                            ("parent", self.model.by_key.get(ev.parent_key or ""))):
            if other is None:
                parts.append(f"<h4>vs {name}</h4><p><i>no {name} candidate</i></p>")
                continue
            other = self.model.ordered(other)  # the run's parameter order, like `ev`
            if other.key == ev.key:
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
