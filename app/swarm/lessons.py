"""Distil structured lessons from the evidence: regions that fail, regions that win."""

from __future__ import annotations

from collections import Counter, defaultdict

from app.core.types import Evaluation, Lesson


class FailureTally:
    """Counts, per parameter value, how many evaluations ran and which failed, as they arrive
    (so distilling lessons costs the number of values, not the number of evaluations)."""

    def __init__(self) -> None:
        self.total: Counter[tuple[str, object]] = Counter()
        self.reasons: dict[tuple[str, object], Counter[str]] = defaultdict(Counter)

    def add(self, evaluation: Evaluation) -> None:
        for name, value in evaluation.config.items():
            try:
                slot = (name, value)
                self.total[slot] += 1
            except TypeError:  # unhashable parameter value: not a region we can name
                continue
            if not evaluation.ok:
                self.reasons[slot][evaluation.reason or "failed"] += 1

    def regions(self, min_count: int = 5, min_rate: float = 0.8) -> list[Lesson]:
        """Parameter values whose evaluations mostly fail, with the dominant reason."""
        lessons = []
        for slot in sorted(self.reasons, key=repr):
            name, value = slot
            total, failed = self.total[slot], sum(self.reasons[slot].values())
            if total >= min_count and failed / total >= min_rate:
                reason, _ = self.reasons[slot].most_common(1)[0]
                lessons.append(Lesson(
                    kind="failure_region",
                    text=f"{name}={value!r} fails ({reason}) in {failed} of {total} evaluations",
                    evidence={"param": name, "value": value, "reason": reason,
                              "failed": failed, "total": total},
                ))
        return lessons


def good_regions(elites: list[Evaluation], min_elites: int = 5) -> list[Lesson]:
    """Parameter values shared by all of the best evaluations so far."""
    if len(elites) < min_elites:
        return []
    lessons = []
    first = elites[0].config
    for name, value in first.items():
        if all(e.config.get(name) == value for e in elites[1:]):
            lessons.append(Lesson(
                kind="good_region",
                text=f"all {len(elites)} best configurations use {name}={value!r}",
                evidence={"param": name, "value": value, "elites": len(elites)},
            ))
    return lessons
