"""Distil structured lessons from the evidence: regions that fail, regions that win.

Evidence moves during a run (the five best configurations at evaluation 30 are not those at
evaluation 60), so a lesson says when it was true ("as of evaluation N"), has a subject (a
parameter, or a parameter value), and a later lesson on the same subject supersedes the earlier
one instead of standing beside it. `LessonBook` keeps the current lesson per subject;
`current_lessons` reduces a stored list to the lessons that still hold.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from app.core.types import Evaluation, Lesson
from app.swarm.source_reads import reads


class FailureTally:
    """Counts, per parameter value, how many evaluations ran and which failed, as they arrive
    (so distilling lessons costs the number of values, not the number of evaluations)."""

    def __init__(self) -> None:
        self.total: Counter[tuple[str, object]] = Counter()
        self.reasons: dict[tuple[str, object], Counter[str]] = defaultdict(Counter)

    def add(self, evaluation: Evaluation) -> None:
        for name, value in evaluation.config.items():
            if not reads(evaluation.source, name):
                continue  # the kernel ignores it: its outcome says nothing about this value
            try:
                slot = (name, value)
                self.total[slot] += 1
            except TypeError:  # unhashable parameter value: not a region we can name
                continue
            if not evaluation.ok:
                self.reasons[slot][evaluation.reason or "failed"] += 1

    def regions(self, min_count: int = 5, min_rate: float = 0.8, as_of: int = 0) -> list[Lesson]:
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
                              "failed": failed, "total": total, "as_of": as_of,
                              "subject": f"failure_region:{name}={value!r}"},
                ))
        return lessons


def good_regions(elites: list[Evaluation], min_elites: int = 5, as_of: int = 0) -> list[Lesson]:
    """Parameter values shared by all of the best evaluations so far, counting for each
    parameter only the kernels that read it (an LLM kernel that never reads EXP_IMPL is fast
    whatever EXP_IMPL says: it is no evidence for the value it happened to carry)."""
    if len(elites) < min_elites:
        return []
    lessons = []
    names = list(dict.fromkeys(name for e in elites for name in e.config))
    for name in names:
        readers = [e for e in elites if name in e.config and reads(e.source, name)]
        if len(readers) < min_elites:
            continue
        value = readers[0].config[name]
        if all(e.config.get(name) == value for e in readers[1:]):
            lessons.append(Lesson(
                kind="good_region",
                text=f"since evaluation {as_of}, all {len(readers)} best configurations use "
                     f"{name}={value!r}",
                evidence={"param": name, "value": value, "elites": len(readers), "as_of": as_of,
                          "subject": f"good_region:{name}"},
            ))
    return lessons


def _same_claim(a: Lesson, b: Lesson) -> bool:
    keys = ("value", "reason")
    return a.kind == b.kind and all(a.evidence.get(k) == b.evidence.get(k) for k in keys)


class LessonBook:
    """The current lesson per subject. `update` takes what the evidence says now and returns
    what changed: new lessons, lessons that replace an earlier claim on their subject
    (evidence["supersedes"] names the text they replace), and retractions of claims the
    evidence no longer supports (kind "retracted")."""

    def __init__(self) -> None:
        self._current: dict[str, Lesson] = {}

    def update(self, now: list[Lesson], as_of: int) -> list[Lesson]:
        changed: list[Lesson] = []
        seen: set[str] = set()
        for lesson in now:
            subject = lesson.evidence.get("subject", lesson.text)
            seen.add(subject)
            old = self._current.get(subject)
            if old is not None and _same_claim(old, lesson):
                continue  # same claim, fresher counts: not news
            if old is not None:
                lesson.evidence["supersedes"] = old.text
            self._current[subject] = lesson
            changed.append(lesson)
        for subject in [s for s in self._current if s not in seen]:
            old = self._current.pop(subject)
            changed.append(Lesson(kind="retracted",
                                  text=f"as of evaluation {as_of}, no longer true: {old.text}",
                                  evidence={"supersedes": old.text, "as_of": as_of,
                                            "subject": subject}))
        return changed

    def current(self) -> list[Lesson]:
        return list(self._current.values())


def current_lessons(lessons: list[dict]) -> list[dict]:
    """Stored lessons ({"kind", "text", "evidence", ...}, oldest first) reduced to those that
    still hold: superseded and retracted claims dropped, retraction notes too."""
    replaced = set()
    for lesson in lessons:
        evidence = lesson.get("evidence") or {}
        if isinstance(evidence, dict) and evidence.get("supersedes"):
            replaced.add(evidence["supersedes"])
    return [lesson for lesson in lessons
            if lesson.get("kind") != "retracted" and lesson.get("text") not in replaced]
