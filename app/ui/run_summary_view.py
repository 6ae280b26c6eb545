"""Under the live view's counters: what the run amounts to. While it runs, its failures by
kind (count and the first message: the compiler's own error line, a refusal's two figures);
once it has finished, and when it is reopened, app.run_summary's RunSummary: the run's one
speedup with its basis, the best's share of the hardware named by its roof, and the failures,
the same figures `kernelswarm show` and the HTML report give."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QWidget

from app.core.types import SUSPECT, Evaluation
from app.run_summary import LABELS, FailureKind, RunSummary, first_message
from app.ui.theme import label_font

SHOWN_KINDS = 4  # more kinds than this: the rest are counted in one line
LINE_CHARS = 180  # a first message is one line of the label (the whole one in the tooltip)


def _row(index: int, ev: Evaluation) -> dict:
    """The fields of a stored row that app.run_summary reads, from a live Evaluation."""
    return {"index": index, "ok": ev.ok, "reason": ev.reason, "detail": ev.detail, "log": ev.log,
            "metrics": ev.metrics, "resources": ev.resources}


def _clip(text: str) -> str:
    return text if len(text) <= LINE_CHARS else text[:LINE_CHARS - 1] + "…"


class RunSummaryPanel(QLabel):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("label:run-summary")
        self.setWordWrap(True)
        self.setTextFormat(Qt.RichText)
        self.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.setFont(label_font(self, 8))
        self.summary: RunSummary | None = None
        self.kinds: dict[str, FailureKind] = {}
        self.evaluated = 0
        self.succeeded = 0

    def reset(self) -> None:
        self.summary, self.kinds = None, {}
        self.evaluated = self.succeeded = 0
        self._render()

    def add(self, rows: list[tuple[int, Evaluation, float]]) -> None:
        """Evaluations as they arrive: failure kinds counted, each kind's first message kept."""
        for index, ev, *_ in rows:
            self.evaluated += 1
            if ev.ok:
                self.succeeded += 1
                continue
            reason = ev.reason or "failed"
            kind = self.kinds.get(reason)
            if kind is None:
                kind = self.kinds[reason] = FailureKind(
                    reason, LABELS.get(reason, reason.replace("_", " ")), 0, "", index)
            kind.count += 1
            if not kind.first_message:
                kind.first_message = first_message(_row(index, ev))
                kind.first_index = index
        if rows and self.summary is None:
            self._render()

    def show_summary(self, summary: RunSummary | None) -> None:
        """The finished run's summary (None: back to the live tallies)."""
        self.summary = summary
        self._render()

    # ---- text ------------------------------------------------------------------------------
    def lines(self) -> list[str]:
        """The panel's lines as plain text (tests and the status bar read them)."""
        s = self.summary
        out = []
        if s is not None:
            if s.speedup:
                out.append(f"Speedup {s.speedup_text()}")
            if s.hardware_text():
                out.append(f"Best: {s.hardware_text()}")
            out += [f"Note: {n}" for n in s.notes]
            kinds, evaluated, succeeded = s.failures, s.evaluations, s.succeeded
        else:
            kinds = sorted(self.kinds.values(), key=lambda k: -k.count)
            evaluated, succeeded = self.evaluated, self.succeeded
        if evaluated and not succeeded and kinds:
            out.append(f"Nothing succeeded in {evaluated} evaluations — why:")
        for kind in kinds[:SHOWN_KINDS]:
            out.append(f"{kind.count} {kind.label}" + (f": {kind.first_message}"
                                                        if kind.first_message else ""))
        rest = kinds[SHOWN_KINDS:]
        if rest:
            out.append(f"{sum(k.count for k in rest)} more in {len(rest)} other kinds")
        return out

    def _render(self) -> None:
        lines = self.lines()
        refused = SUSPECT in {k.reason for k in (self.summary.failures if self.summary
                                                 else self.kinds.values())}
        parts = []
        for line in lines:
            text = html.escape(_clip(line))
            if line.startswith(("Speedup", "Nothing succeeded")):
                text = f"<b>{text}</b>"
            elif refused and line.split(" ", 1)[-1].startswith(LABELS[SUSPECT]):
                text = f"⚠ {text}"  # a refusal is its own category, not a wrong kernel
            parts.append(text)
        self.setText("<br>".join(parts))
        self.setToolTip("\n".join(lines))
        self.setVisible(bool(lines))
