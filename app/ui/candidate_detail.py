"""One candidate in detail: summary, the source that ran, diffs, the compiler's command and
output, the checks and the timing samples."""

from __future__ import annotations

import difflib
import html
import json
import logging

import numpy as np
import pyqtgraph as pg
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import CLexer, CudaLexer, DiffLexer
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QSizePolicy, QTabWidget, QTextBrowser, QVBoxLayout, QWidget

from app.core.types import Evaluation
from app.core.units import format_value
from app.ui.candidate_table import CandidateModel
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

    EMPTY = "Select a candidate"

    def __init__(self, model: CandidateModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = model
        self.language = "cuda"
        self.goal = None  # the run's goal: which catalog template a configuration fills in
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
                (self.summary, "Summary", "Key, status, measurements, resources and parameters"),
                (self.source, "Source", ("The code that ran: the parameters as #defines, then "
                                         "the candidate's own source or the operator's template")),
                (self.diff, "Diff", "Against the best candidate and the parent"),
                (self.log, "Log", "Compiler command, compiler output and the time of each stage"),
                (self.verification, "Checks", "Verification against the reference"),
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

    def set_run(self, goal, language: str) -> None:
        """A new run is shown (started or reopened): forget the previous run's candidate."""
        self.goal = goal
        self.language = language
        self.clear()

    def clear(self) -> None:
        self.current = None
        self.header.setText(self.EMPTY)
        for w in (self.summary, self.source, self.diff, self.log, self.verification):
            w.clear()
        self.timing.show_samples(Evaluation(key="", config={}, ok=False), current_plot_theme())
        self.timing.getPlotItem().setTitle("", size="9pt")

    def source_text(self, ev: Evaluation) -> tuple[str, str] | None:
        """(code, language) of what the candidate ran: its own source (LLM or user kernels)
        or the catalog template, after its parameters as the -D #defines the compiler got
        (the same text as the HTML report's best kernel). None for recorded measurements."""
        from app.html_report import best_kernel_text

        if not ev.source and (self.goal is None or not self.goal.operator):
            return None
        backend = self.goal.backend if self.goal is not None else ""
        text, language = best_kernel_text({"backend": backend}, self.goal, ev)
        if language == "json":  # the operator's template could not be found
            return None
        return text, self.language or language

    def show_evaluation(self, ev: Evaluation) -> None:
        ev = self.model.ordered(ev)
        self.current = ev
        theme = current_plot_theme()
        status = "correct" if ev.ok else f"failed: {(ev.reason or '').replace('_', ' ')}"
        value = format_value(ev.value, self.model.unit) if ev.ok else "—"
        speed = self.model.speedup(ev)
        self.header.setText(f"{ev.key[:12]} · {ev.agent} · {status} · {value}"
                            + (f" · {speed:.2f}× speedup" if speed else ""))
        self.summary.setHtml(self._summary_html(ev))
        code = self.source_text(ev)
        if code is not None:
            self.source.setHtml(highlight_source(code[0], theme.dark, code[1]))
        else:
            self.source.setHtml("<p><i>A recorded measurement: the space's file keeps each "
                                "configuration's timing, not the code that ran. Its parameters:"
                                "</i></p>"
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
        # by name: the store keeps these sorted, so a reopened run reads like the live one
        rows += [(k, f"{v:.4g}" if isinstance(v, float) else v) for k, v in sorted(ev.metrics.items())]
        rows += [(f"resource: {k}", v) for k, v in sorted(ev.resources.items())]
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

    def _log_text(self, ev: Evaluation) -> str:
        """The compiler command and its output as the backend recorded them, then each
        stage's time and detail; "not recorded" where the evaluation has none."""
        recorded = self.goal is not None and not self.goal.operator and not ev.source
        if recorded:
            lines = [("Recorded measurement: compiled when the space was recorded "
                      "(no compiler command or output kept).")]
        else:
            command = ev.resources.get("compile_command")
            if isinstance(command, (list, tuple)):
                command = " ".join(str(c) for c in command)
            lines = ["Compiler command:", f"  {command}" if command else "  not recorded", "",
                     "Compiler output:"]
            lines += [ev.log.rstrip()] if ev.log and ev.log.strip() else ["  not recorded"]
        if ev.stages:
            lines += ["", "Stages:"]
            lines += [f"{'✔' if s.ok else '✘'} {s.name:<14} {s.seconds * 1000:9.1f} ms  {s.detail}"
                      for s in ev.stages]
        return "\n".join(lines)

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
