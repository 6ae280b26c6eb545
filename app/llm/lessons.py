"""Lessons LLM agents learn and keep across runs, and the warm start a new run gets.

During a run a LessonBook (shared by the run's LLM agents) remembers what each LLM candidate
tried (the model's one-line idea) and, every `generation` LLM evaluations, distils structured
lessons: which transformations paid off (speedup over the kernel they started from, on which
device and shape), which were correct but slower, and what keeps failing and why. Lessons go
on the blackboard and out as LessonLearned events, which the Store commits to its `lessons`
table (so the GUI shows them with the run's other lessons).

A new run of the same or a similar goal (same operator and backend) reads those lessons and the
best kernels earlier runs found (warm start) from the same database, through the Store.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.types import Evaluation, Lesson
from app.goal import Goal, GoalError
from app.llm.facts import category, config_text, is_measured_lesson
from app.store import Store, StoreError, goal_key

LLM_KINDS = ("llm_transformation", "llm_no_gain", "llm_failure")


@dataclass
class Attempt:
    key: str
    agent: str
    idea: str
    parent_key: str | None
    parent_value: float | None
    parent_p10_ms: float | None = None  # the parent's timing spread (p10..p90 of its samples)
    parent_p90_ms: float | None = None


class LessonBook:
    def __init__(self, goal: Goal, device: str, *, minimize: bool = True, generation: int = 4,
                 publish: Callable[[Lesson], None] | None = None,
                 prior_lessons: list[str] | None = None) -> None:
        self.goal = goal
        self.device = device
        self.minimize = minimize
        self.generation = max(1, generation)
        self._publish = publish
        self._lock = threading.Lock()
        self._attempts: dict[str, Attempt] = {}
        self._outcomes: dict[str, Evaluation] = {}
        self._pending: list[str] = []
        # Earlier runs' lessons are kept only when they are one of the measured-fact forms
        # below: older databases stored the model's idea line in lesson texts (injection).
        self._texts: list[str] = [t for t in (prior_lessons or []) if is_measured_lesson(t)]
        self._seen: set[str] = set(self._texts)
        self._failure_counts: Counter = Counter()
        self._failure_reported: dict[tuple, int] = {}

    def note_attempt(self, attempt: Attempt) -> None:
        with self._lock:
            self._attempts[attempt.key] = attempt

    def idea(self, key: str) -> str:
        with self._lock:
            a = self._attempts.get(key)
            return a.idea if a else ""

    def texts(self) -> list[str]:
        with self._lock:
            return list(self._texts)

    def observe(self, evaluation: Evaluation) -> list[Lesson]:
        """Record an outcome; returns (and publishes) the lessons a finished generation gave."""
        with self._lock:
            if evaluation.key not in self._attempts or evaluation.key in self._outcomes:
                return []
            self._outcomes[evaluation.key] = evaluation
            self._pending.append(evaluation.key)
            if len(self._pending) < self.generation:
                return []
            batch, self._pending = self._pending, []
        return self._emit(self._distil(batch))

    def flush(self) -> list[Lesson]:
        """Distil what is left (end of run)."""
        with self._lock:
            batch, self._pending = self._pending, []
        return self._emit(self._distil(batch)) if batch else []

    # ---- distillation ---------------------------------------------------------------------
    def _context(self) -> dict[str, Any]:
        g = self.goal
        return {"operator": g.operator, "backend": g.backend, "dtype": g.dtype,
                "shapes": g.shapes, "device": self.device}

    def _shape_text(self) -> str:
        return ", ".join("x".join(map(str, s)) for s in self.goal.shapes)

    def _distil(self, keys: list[str]) -> list[Lesson]:
        """Lessons from measured facts only: configuration, speedup, failure category. The
        model's idea line is kept in the lesson's data for display, never in its text (which
        goes into later prompts): a reply must not be able to write the next prompts."""
        lessons: list[Lesson] = []
        for key in keys:
            e = self._outcomes[key]
            a = self._attempts[key]
            shown = {"idea": a.idea} if a.idea else {}
            if e.ok and e.value is not None:
                if a.parent_value:
                    ratio = a.parent_value / e.value if self.minimize else e.value / a.parent_value
                else:
                    ratio = None
                evidence = {**self._context(), **shown, "key": key,
                            "spread_ms": [e.p10_ms, e.p90_ms],
                            "parent_spread_ms": [a.parent_p10_ms, a.parent_p90_ms]}
                verdict = _compare(e, a)
                if ratio is not None and verdict == "faster":
                    lessons.append(Lesson(
                        "llm_transformation",
                        f"an LLM rewrite ({config_text(e.config)}) made {self.goal.operator} "
                        f"{self.goal.dtype} [{self._shape_text()}] {ratio:.2f}x faster than the "
                        f"kernel it started from on {self.device}",
                        {**evidence, "speedup": round(ratio, 4)}, a.agent))
                elif ratio is not None and verdict == "slower":
                    lessons.append(Lesson(
                        "llm_no_gain",
                        f"an LLM rewrite ({config_text(e.config)}) was correct but not faster "
                        f"({ratio:.2f}x) for {self.goal.operator} [{self._shape_text()}] on "
                        f"{self.device}",
                        {**evidence, "speedup": round(ratio, 4)}, a.agent))
                elif ratio is not None:
                    lessons.append(Lesson(
                        "llm_no_gain",
                        f"an LLM rewrite ({config_text(e.config)}) timed within the measurement "
                        f"spread of the kernel it started from for {self.goal.operator} "
                        f"[{self._shape_text()}] on {self.device}",
                        {**evidence, "speedup": round(ratio, 4)}, a.agent))
            else:
                rule = category((e.resources or {}).get("policy_rule") or "")
                reason = category(e.reason or "") or "failed"
                group = (reason, rule)
                self._failure_counts[group] += 1
                n = self._failure_counts[group]
                if n in (1, 3, 10, 30):  # report a pattern as it grows, not every instance
                    lessons.append(Lesson(
                        "llm_failure",
                        f"LLM kernels failed with {reason}"
                        + (f" (rule {rule})" if rule else "") + f" {n} time(s) for "
                        f"{self.goal.operator} [{self._shape_text()}] on {self.device}",
                        {**self._context(), **shown, "reason": reason, "rule": rule, "count": n},
                        a.agent))
        return lessons

    def _emit(self, lessons: list[Lesson]) -> list[Lesson]:
        out = []
        with self._lock:
            for lesson in lessons:
                if lesson.text in self._seen:
                    continue
                self._seen.add(lesson.text)
                self._texts.append(lesson.text)
                out.append(lesson)
        for lesson in out:
            if self._publish is not None:
                self._publish(lesson)
        return out


def _compare(e: Evaluation, a: Attempt) -> str:
    """"faster" / "slower" only when the timing spreads (p10..p90) do not overlap; "same"
    otherwise, and when either spread is unknown (a single noisy median proves nothing)."""
    lo, hi, plo, phi = e.p10_ms, e.p90_ms, a.parent_p10_ms, a.parent_p90_ms
    if None in (lo, hi, plo, phi):
        return "same"
    if hi < plo:
        return "faster"
    if lo > phi:
        return "slower"
    return "same"


def _first_line(text: str) -> str:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


# ---- warm start from earlier runs --------------------------------------------------------
@dataclass
class PriorKnowledge:
    lessons: list[str] = field(default_factory=list)
    kernels: list[dict[str, Any]] = field(default_factory=list)  # source, config, value, same_goal


def load_prior(db: str | Path | Store, goal: Goal, *, max_kernels: int = 3,
               max_lessons: int = 20) -> PriorKnowledge:
    """Lessons and best kernels of earlier runs of the same goal (first) or of similar goals
    (same operator and backend, other shapes or dtype). `db` is an open Store or the path of a
    history database. Empty when the database has none, or cannot be read (a warm start is
    optional)."""
    if isinstance(db, Store):
        return _prior_from(db, goal, max_kernels, max_lessons)
    if not Path(db).exists():
        return PriorKnowledge()
    try:
        with Store(db) as store:
            return _prior_from(store, goal, max_kernels, max_lessons)
    except StoreError:
        return PriorKnowledge()


def _prior_from(store: Store, goal: Goal, max_kernels: int, max_lessons: int) -> PriorKnowledge:
    same_key = goal_key(goal)
    related: list[tuple[int, bool]] = []
    for row in store.goals():
        if row["key"] == same_key:
            related.append((row["id"], True))
            continue
        try:
            other = Goal.from_toml(row["toml"])
        except (GoalError, TypeError):
            continue
        if other.operator == goal.operator and other.backend == goal.backend:
            related.append((row["id"], False))
    related.sort(key=lambda r: not r[1])  # the same goal first
    prior = PriorKnowledge()
    for gid, same in related:
        for text in store.goal_lessons(gid, LLM_KINDS):
            if text not in prior.lessons and len(prior.lessons) < max_lessons:
                prior.lessons.append(text if same else f"(similar goal) {text}")
        for kernel in store.best_kernels(gid, max_kernels):
            if len(prior.kernels) >= max_kernels:
                break
            if any(k["source"] == kernel["source"] for k in prior.kernels):
                continue
            prior.kernels.append({**kernel, "same_goal": same})
    return prior
