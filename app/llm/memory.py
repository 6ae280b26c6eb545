"""Memory of what was tried: one line per earlier attempt, for the next prompts.

Each line is the product's own description: what the code change did to the kernel's
structure (app.llm.features, fixed words and small numbers), how many lines it changed, and
what measuring it showed (faster or slower than the kernel it started from, by how much, or
the stage where it failed). Nothing the model wrote (its idea line, comments, identifiers) is
in it, so a reply cannot plant text in later prompts this way.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from app.core.types import Evaluation
from app.llm.outcome import REASONS, STAGES
from app.llm.transformation import transformation

MAX_REMEMBERED = 8  # attempts kept; a prompt shows the newest few
PENDING_LIMIT = 256  # requested attempts waiting for their evaluation (a safeguard)


@dataclass
class _Started:
    base: str  # the kernel the attempt started from
    parent_value: float | None  # its measured objective at request time
    from_failure: bool  # a repair of a failed attempt


def change_summary(base: str, source: str, language: str) -> str:
    """What a code change did, in the product's words: structural features that changed and
    the size of the change (app.llm.transformation, the lessons' description too)."""
    t = transformation(base, source, language)
    size = f"+{t['added']}/-{t['removed']} lines of {t['lines']}"
    return (", ".join(t["changes"]) + "; " if t["changes"] else "same structure; ") + size


def outcome_text(e: Evaluation, parent_value: float | None, minimize: bool, unit: str) -> str:
    """What measuring the attempt showed, against the kernel it started from."""
    if not e.ok or e.value is None:
        stage = next((s.name for s in reversed(e.stages) if not s.ok and s.name in STAGES), "")
        what = REASONS.get(e.reason or "", "failed")
        return f"failed: {what}" + (f" (stage {stage})" if stage else "")
    value = f"{e.value:.4g} {unit}".rstrip()
    if not parent_value:
        return f"correct, {value} (no figure for the kernel it started from)"
    gain = parent_value / e.value if minimize else e.value / parent_value
    parent = f"{parent_value:.4g} {unit}".rstrip()
    if abs(gain - 1) < 0.02:
        return f"correct, as fast as the kernel it started from ({value} vs {parent})"
    word = "faster" if gain > 1 else "slower"
    return f"correct, {gain:.2f}x: {word} than the kernel it started from ({value} vs {parent})"


class AttemptMemory:
    """The attempts an agent requested, described once their evaluation arrives."""

    def __init__(self, language: str, minimize: bool, unit: str) -> None:
        self.language = language
        self.minimize = minimize
        self.unit = unit
        self._pending: dict[str, _Started] = {}
        self._lines: deque[str] = deque(maxlen=MAX_REMEMBERED)

    def started(self, key: str, base: str, parent_value: float | None,
                from_failure: bool = False) -> None:
        if len(self._pending) < PENDING_LIMIT:
            self._pending[key] = _Started(base, parent_value, from_failure)

    def observe(self, e: Evaluation) -> str | None:
        """The line for an attempt this memory started, or None for any other evaluation."""
        got = self._pending.pop(e.key, None)
        if got is None or not e.source:
            return None
        start = "repair of a failed attempt" if got.from_failure else "rewrite"
        line = (f"{start}: {change_summary(got.base, e.source, self.language)} -> "
                f"{outcome_text(e, None if got.from_failure else got.parent_value, self.minimize, self.unit)}")
        self._lines.append(line)
        return line

    def lines(self, k: int = 6) -> list[str]:
        return list(self._lines)[-k:]
