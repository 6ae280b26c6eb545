"""Lessons LLM agents learn and keep across runs, and the warm start a new run gets.

During a run a LessonBook (shared by the run's LLM agents) remembers what each LLM candidate
tried (the model's one-line idea) and, every `generation` LLM evaluations, distils structured
lessons: which transformations paid off (speedup over the kernel they started from, on which
device and shape), which were correct but slower, and what keeps failing and why. Lessons go
on the blackboard and out as LessonLearned events, which the Store commits to its `lessons`
table (so the GUI shows them with the run's other lessons).

A new run of the same or a similar goal (same operator and backend) reads those lessons and the
best kernels earlier runs found (warm start) from the same database.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from app.goal import Goal, GoalError
from app.core.types import Evaluation, Lesson

LLM_KINDS = ("llm_transformation", "llm_no_gain", "llm_failure")


@dataclass
class Attempt:
    key: str
    agent: str
    idea: str
    parent_key: str | None
    parent_value: float | None


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
        self._texts: list[str] = list(prior_lessons or [])
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
        lessons: list[Lesson] = []
        for key in keys:
            e = self._outcomes[key]
            a = self._attempts[key]
            idea = a.idea or "an unnamed rewrite"
            if e.ok and e.value is not None:
                if a.parent_value:
                    ratio = a.parent_value / e.value if self.minimize else e.value / a.parent_value
                else:
                    ratio = None
                if ratio is not None and ratio > 1.01:
                    lessons.append(Lesson(
                        "llm_transformation",
                        f"'{idea}' made {self.goal.operator} {self.goal.dtype} "
                        f"[{self._shape_text()}] {ratio:.2f}x faster than the kernel it started "
                        f"from on {self.device}",
                        {**self._context(), "idea": idea, "speedup": round(ratio, 4), "key": key},
                        a.agent))
                elif ratio is not None:
                    lessons.append(Lesson(
                        "llm_no_gain",
                        f"'{idea}' was correct but not faster ({ratio:.2f}x) for "
                        f"{self.goal.operator} [{self._shape_text()}] on {self.device}",
                        {**self._context(), "idea": idea, "speedup": round(ratio, 4), "key": key},
                        a.agent))
            else:
                rule = (e.resources or {}).get("policy_rule") or _first_line(e.detail)[:60]
                group = (e.reason, rule)
                self._failure_counts[group] += 1
                n = self._failure_counts[group]
                if n in (1, 3, 10, 30):  # report a pattern as it grows, not every instance
                    lessons.append(Lesson(
                        "llm_failure",
                        f"LLM kernels failed with {e.reason} ({rule}) {n} time(s); latest idea "
                        f"'{idea}': {_first_line(e.detail)[:160]}",
                        {**self._context(), "reason": e.reason, "rule": rule, "count": n,
                         "idea": idea},
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


def load_prior(db_path: str | Path, goal: Goal, *, max_kernels: int = 3,
               max_lessons: int = 20) -> PriorKnowledge:
    """Lessons and best kernels of earlier runs of the same goal (first) or of similar goals
    (same operator and backend, other shapes or dtype). Empty when the database has none."""
    from app.store import goal_key

    path = Path(db_path)
    if not path.exists():
        return PriorKnowledge()
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30.0)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not {"goals", "runs", "lessons", "candidates", "evaluations"} <= tables:
            return PriorKnowledge()
        same_key = goal_key(goal)
        related: list[tuple[int, bool]] = []
        for gid, key, toml in conn.execute("SELECT id, key, toml FROM goals"):
            if key == same_key:
                related.append((gid, True))
                continue
            try:
                other = Goal.from_toml(toml)
            except (GoalError, TypeError):
                continue
            if other.operator == goal.operator and other.backend == goal.backend:
                related.append((gid, False))
        related.sort(key=lambda r: not r[1])  # the same goal first
        prior = PriorKnowledge()
        for gid, same in related:
            rows = conn.execute(
                "SELECT text FROM lessons WHERE goal_id = ? AND kind IN (?, ?, ?) ORDER BY id DESC",
                (gid, *LLM_KINDS)).fetchall()
            for (text,) in rows:
                if text not in prior.lessons and len(prior.lessons) < max_lessons:
                    prior.lessons.append(text if same else f"(similar goal) {text}")
            minimize = conn.execute("SELECT minimize FROM runs WHERE goal_id = ? ORDER BY id DESC",
                                    (gid,)).fetchone()
            ascending = minimize is None or bool(minimize[0])
            order, best = ("ASC", "MIN") if ascending else ("DESC", "MAX")
            for source, config, value in conn.execute(
                    f"SELECT c.source, c.config, {best}(e.value) FROM evaluations e JOIN candidates c "
                    "ON c.id = e.candidate_id WHERE c.goal_id = ? AND e.ok = 1 AND c.source IS "
                    f"NOT NULL AND e.value IS NOT NULL GROUP BY c.id ORDER BY 3 {order} LIMIT ?",
                    (gid, max_kernels)):
                if len(prior.kernels) >= max_kernels:
                    break
                if any(k["source"] == source for k in prior.kernels):
                    continue
                prior.kernels.append({"source": source, "config": json.loads(config),
                                      "value": value, "same_goal": same})
        return prior
    finally:
        conn.close()
