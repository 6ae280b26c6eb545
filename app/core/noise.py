"""Whether a new best is an improvement or a change inside the timing noise.

A figure's `spread` (metrics["spread"]) is its p10-p90 width as a fraction of its median, so
half of it lies either side. A new best is clear of the noise when its range
value*(1 ± spread/2) does not overlap the range of the best it replaced. A figure without a
spread (replayed, imported) counts as exact: every strict new best is then clear, as before.

The window, `kernelswarm run`, `kernelswarm show` and the HTML report all count from here, over
the same stored history, so they cannot disagree."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

NOISE_TIP = ("A new best counts as an improvement only when its p10–p90 range clears the range "
             "of the best it replaced; a new best inside that noise may be luck of timing.")


def spread_of(metrics: Mapping[str, Any] | None) -> float:
    """The figure's p10-p90 spread as a fraction of its median; 0 when it has none."""
    try:
        s = float((metrics or {}).get("spread") or 0.0)
    except (TypeError, ValueError):
        return 0.0
    return s if math.isfinite(s) and s > 0 else 0.0


def clear_of_noise(new: float, new_spread: float, old: float | None, old_spread: float,
                   minimize: bool) -> bool:
    """True when `new` beats `old` by more than both figures' noise: the ranges
    value*(1 ± spread/2) do not overlap (touching counts as overlapping). Nothing to beat
    (`old` None) is clear."""
    if old is None:
        return True
    new_half, old_half = abs(new) * new_spread / 2, abs(old) * old_spread / 2
    if minimize:
        return new + new_half < old - old_half
    return new - new_half > old + old_half


@dataclass(frozen=True)
class NewBest:
    """One evaluation that became the best so far: its row in the history, who found it,
    and whether it is clear of the noise against the best it replaced."""

    row: int
    agent: str
    clear: bool


def new_bests(history: Iterable[Any], minimize: bool) -> list[NewBest]:
    """Every strict new best of an ordered history of evaluations (objects with ok, value,
    metrics and agent), each with its noise verdict."""
    out: list[NewBest] = []
    best: float | None = None
    best_spread = 0.0
    for row, ev in enumerate(history):
        if not ev.ok or ev.value is None:
            continue
        v = float(ev.value)
        if best is not None and not (v < best if minimize else v > best):
            continue
        s = spread_of(ev.metrics)
        out.append(NewBest(row, ev.agent or "?", clear_of_noise(v, s, best, best_spread, minimize)))
        best, best_spread = v, s
    return out


@dataclass(frozen=True)
class ImprovementCount:
    """New bests clear of the noise, and those inside it."""

    clear: int = 0
    within: int = 0

    @classmethod
    def of(cls, bests: Iterable[NewBest]) -> ImprovementCount:
        flags = [b.clear for b in bests]
        return cls(clear=sum(flags), within=len(flags) - sum(flags))

    def sentence(self) -> str:
        """The line `run`, `show` and the report print."""
        text = f"improvements: {self.clear} clear of the timing noise"
        if self.within:
            text += (f", {self.within} more new best{'s' if self.within != 1 else ''} within it "
                     "(p10–p90 ranges overlap the best replaced)")
        return text
