"""Distil structured lessons from the evidence: regions that fail, regions that win."""

from __future__ import annotations

from collections import Counter, defaultdict

from app.swarm.types import Evaluation, Lesson


def failure_regions(evaluations: list[Evaluation], min_count: int = 5,
                    min_rate: float = 0.8) -> list[Lesson]:
    """Parameter values whose evaluations mostly fail, with the dominant reason."""
    by_value: dict[tuple[str, object], list[Evaluation]] = defaultdict(list)
    for e in evaluations:
        for name, value in e.config.items():
            by_value[(name, value)].append(e)
    lessons = []
    for (name, value), evs in sorted(by_value.items(), key=lambda kv: repr(kv[0])):
        failed = [e for e in evs if not e.ok]
        if len(evs) >= min_count and len(failed) / len(evs) >= min_rate:
            reason, _ = Counter(e.reason for e in failed).most_common(1)[0]
            lessons.append(Lesson(
                kind="failure_region",
                text=f"{name}={value!r} fails ({reason}) in {len(failed)} of {len(evs)} evaluations",
                evidence={"param": name, "value": value, "reason": reason,
                          "failed": len(failed), "total": len(evs)},
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
