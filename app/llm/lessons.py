"""Lessons LLM agents learn and keep across runs, and the warm start a new run gets.

During a run a LessonBook (shared by the run's LLM agents) remembers what each LLM candidate
tried (the model's one-line idea) and, every `generation` LLM evaluations, distils structured
lessons: which transformations paid off (speedup over the kernel they started from, on which
device and shape), which were correct but slower, and what keeps failing and why. Lessons go
on the blackboard and out as LessonLearned events, which the Store commits to its `lessons`
table (so the GUI shows them with the run's other lessons).

A rewrite whose timing spread overlaps its parent's is close: when the book has a re-timer (the
session passes the backend's `retime_pair`: cpu and cuda, not replay), the two kernels are timed again,
interleaved in one measurement, on the book's own thread (the coordinator's loop never waits
on it; the backend's worker serves one request at a time), and the lesson is decided on that
re-timing. At most once per attempt and RETIMES_PER_RUN times per run; without a re-timer, or
when the re-timing fails, the lesson says "within the measurement spread" as before.

A new run of the same or a similar goal (same operator and backend) reads those lessons and the
best kernels earlier runs found (warm start) from the same database, through the Store.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.core.types import Evaluation, Lesson
from app.goal import Goal
from app.llm.facts import category, config_text, is_measured_lesson
from app.llm.transformation import transformation
from app.llm.warm import revive
from app.store import Store, StoreError, goal_family, goal_key

log = logging.getLogger(__name__)

LLM_KINDS = ("llm_transformation", "llm_no_gain", "llm_failure")
RETIMES_PER_RUN = 8  # close calls re-timed per run: each costs about two timings
RETIMED = " (re-timed interleaved with it)"  # ends the text of a lesson decided on a re-timing

# (rewrite, parent) -> {"a": rewrite's, "b": parent's figures: median_ms, p10_ms, p90_ms,
# samples} from one interleaved measurement, or None (CpuEvaluator.retime_pair)
Retimer = Callable[[Evaluation, Evaluation], "dict[str, dict[str, float]] | None"]


@dataclass
class Attempt:
    key: str
    agent: str
    idea: str
    parent_key: str | None
    parent_value: float | None
    parent_p10_ms: float | None = None  # the parent's timing spread (p10..p90 of its samples)
    parent_p90_ms: float | None = None
    parent: Evaluation | None = None  # the kernel those figures are of (re-timed when close)
    parent_kind: str = "best at request time"  # or the template, for requests sent at t=0


class LessonBook:
    def __init__(self, goal: Goal, device: str, *, minimize: bool = True, generation: int = 4,
                 publish: Callable[[Lesson], None] | None = None,
                 prior_lessons: list[str] | None = None, retime: Retimer | None = None,
                 max_retimes: int = RETIMES_PER_RUN, template: str = "",
                 language: str = "c") -> None:
        self.goal = goal
        self.template = template  # what a kernel without its own source runs
        self.language = language
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
        self._retime = retime
        self._retimes_left = max(0, max_retimes) if retime is not None else 0
        self._retimer: cf.ThreadPoolExecutor | None = None
        self._retiming: list[cf.Future] = []
        self.retimed: list[str] = []  # keys of the attempts re-timed (at most once each)
        # the template's measurements in this run (config key -> evaluation, and the first):
        # the parent of a request sent before anything was measured (t=0)
        self._template_by_config: dict[str, Evaluation] = {}
        self._template_first: Evaluation | None = None
        self._waiting: list[str] = []  # attempts whose parent is not measured yet

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
            if evaluation.key not in self._attempts:
                if self._note_template(evaluation) and self._waiting:
                    batch, self._waiting = self._waiting, []
                    self._pending.extend(batch)  # their parent is measured now
                return []
            if evaluation.key in self._outcomes:
                return []
            self._outcomes[evaluation.key] = evaluation
            self._pending.append(evaluation.key)
            if len(self._pending) < self.generation:
                return []
            batch, self._pending = self._pending, []
        return self._emit(self._distil(batch))

    def _note_template(self, e: Evaluation) -> bool:
        """Remember a correct measurement of the template (a kernel with no source of its own);
        True when it is one."""
        if e.source is not None or not e.ok or e.value is None:
            return False
        self._template_by_config.setdefault(_config_key(e.config), e)
        if self._template_first is None:
            self._template_first = e
        return True

    def _resolve_parent(self, e: Evaluation, a: Attempt) -> bool:
        """Give a request sent before anything was measured its parent: the template at the
        configuration the request was given, else the template baseline (its first correct
        measurement). False while neither is measured (the lesson waits)."""
        if a.parent_value is not None or a.idea.startswith("warm start"):
            return True
        parent = self._template_by_config.get(_config_key(e.config)) or self._template_first
        if parent is None:
            return False
        a.parent, a.parent_key, a.parent_value = parent, parent.key, parent.value
        a.parent_p10_ms, a.parent_p90_ms = parent.p10_ms, parent.p90_ms
        a.parent_kind = ("template at the same configuration"
                         if _config_key(parent.config) == _config_key(e.config)
                         else "template baseline")
        return True

    def flush(self) -> list[Lesson]:
        """Distil what is left (end of run), and wait for the re-timings under way (at most
        RETIMES_PER_RUN in a run); returns the lessons distilled here."""
        with self._lock:
            batch, self._pending = self._pending + self._waiting, []
            self._waiting = []
        out = self._emit(self._distil(batch)) if batch else []
        self.wait_retimed()
        with self._lock:  # its thread ends; a later re-timing would start another
            retimer, self._retimer = self._retimer, None
        if retimer is not None:
            retimer.shutdown(wait=False)
        return out

    def wait_retimed(self) -> None:
        """Until every re-timing asked for so far has given its lesson."""
        while True:
            with self._lock:
                futures, self._retiming = self._retiming, []
            if not futures:
                return
            cf.wait(futures)

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
                with self._lock:
                    if not self._resolve_parent(e, a):
                        if key not in self._waiting:
                            self._waiting.append(key)
                        continue
                if _compare(e, a) == "same" and self._claim_retime(e, a):
                    continue  # its lesson comes from the re-timing (_retimed_lesson)
                lesson = self._measured_lesson(e, a)
                if lesson is not None:
                    lessons.append(lesson)
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

    def _measured_lesson(self, e: Evaluation, a: Attempt,
                         retimed: dict[str, dict[str, float]] | None = None,
                         tried: bool = False) -> Lesson | None:
        """The lesson of a correct rewrite against its parent: from the first figures, or from
        `retimed` (both timed again, interleaved: "a" the rewrite's, "b" the parent's)."""
        if a.parent_value:
            ratio = a.parent_value / e.value if self.minimize else e.value / a.parent_value
        else:
            ratio = None
        shown = {"idea": a.idea} if a.idea else {}
        evidence: dict[str, Any] = {**self._context(), **shown, "key": e.key,
                                    "spread_ms": [e.p10_ms, e.p90_ms],
                                    "parent_spread_ms": [a.parent_p10_ms, a.parent_p90_ms],
                                    "parent_key": a.parent_key, "parent_kind": a.parent_kind,
                                    "before_ms": a.parent.time_ms if a.parent else None,
                                    "after_ms": e.time_ms,
                                    "before_value": a.parent_value, "after_value": e.value}
        change = self._change(e, a)
        if change is not None:
            evidence["transformation"] = change
        verdict = _compare(e, a)
        suffix = ""
        if retimed is not None:
            r, p = retimed["a"], retimed["b"]
            verdict = _separate(r["p10_ms"], r["p90_ms"], p["p10_ms"], p["p90_ms"])
            ratio = p["median_ms"] / r["median_ms"] if r["median_ms"] > 0 else ratio
            suffix = RETIMED
            evidence.update(retimed=True, retimed_median_ms=r["median_ms"],
                            retimed_spread_ms=[r["p10_ms"], r["p90_ms"]],
                            retimed_parent_median_ms=p["median_ms"],
                            retimed_parent_spread_ms=[p["p10_ms"], p["p90_ms"]],
                            retimed_samples=int(min(r.get("samples", 0), p.get("samples", 0))))
        elif tried:
            evidence["retimed"] = False  # asked for, but the re-timing gave no figures
        if ratio is None:
            return None
        evidence["speedup"] = round(ratio, 4)
        cfg = config_text(e.config)
        if verdict == "faster":
            what = f"; change: {change['text']}" if change is not None else ""
            return Lesson(
                "llm_transformation",
                f"an LLM rewrite ({cfg}) made {self.goal.operator} {self.goal.dtype} "
                f"[{self._shape_text()}] {ratio:.2f}x faster than the kernel it started from on "
                f"{self.device}{what}{suffix}", evidence, a.agent)
        if verdict == "slower":
            return Lesson(
                "llm_no_gain",
                f"an LLM rewrite ({cfg}) was correct but not faster ({ratio:.2f}x) for "
                f"{self.goal.operator} [{self._shape_text()}] on {self.device}{suffix}",
                evidence, a.agent)
        return Lesson(
            "llm_no_gain",
            f"an LLM rewrite ({cfg}) timed within the measurement spread of the kernel it "
            f"started from for {self.goal.operator} [{self._shape_text()}] on "
            f"{self.device}{suffix}", evidence, a.agent)

    def _change(self, e: Evaluation, a: Attempt) -> dict[str, Any] | None:
        """The transformation from the parent's source to the rewrite's, from the code."""
        if e.source is None:
            return None
        before = a.parent.source if a.parent is not None and a.parent.source else self.template
        if not before:
            return None
        try:
            return transformation(before, e.source, self.language)
        except Exception:  # a lesson without its transformation beats no lesson
            log.exception("describing the change of %s failed", e.key)
            return None

    # ---- re-timing close calls --------------------------------------------------------------
    def _claim_retime(self, e: Evaluation, a: Attempt) -> bool:
        """Queue a re-timing of a close call (both kernels correct, both spreads known), once
        per attempt and within the run's cap; False when it is not re-timed."""
        p = a.parent
        if (self._retime is None or p is None or not p.ok or p.value is None or p.key == e.key
                or None in (e.p10_ms, e.p90_ms, a.parent_p10_ms, a.parent_p90_ms)):
            return False
        with self._lock:
            if self._retimes_left <= 0 or e.key in self.retimed:
                return False
            self._retimes_left -= 1
            self.retimed.append(e.key)
            if self._retimer is None:
                self._retimer = cf.ThreadPoolExecutor(1, thread_name_prefix="lesson-retime")
            self._retiming.append(self._retimer.submit(self._retimed_lesson, e, a))
        return True

    def _retimed_lesson(self, e: Evaluation, a: Attempt) -> None:
        """On the book's thread: time both again, then emit the lesson that re-timing decides
        (the first figures' lesson when it gave none)."""
        figures = None
        retime, parent = self._retime, a.parent
        try:
            if retime is not None and parent is not None:
                figures = retime(e, parent)
        except Exception:  # a failed re-timing leaves the first figures' lesson
            log.exception("re-timing %s against the kernel it started from failed", e.key)
        try:
            lesson = self._measured_lesson(e, a, figures, tried=True)
            if lesson is not None:
                self._emit([lesson])
        except Exception:  # on this thread nobody else would see it
            log.exception("the lesson of re-timing %s was lost", e.key)

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


def _config_key(config: dict[str, Any]) -> str:
    return repr(sorted((str(k), repr(v)) for k, v in (config or {}).items()))


def _compare(e: Evaluation, a: Attempt) -> str:
    """"faster" / "slower" only when the timing spreads (p10..p90) do not overlap; "same"
    otherwise, and when either spread is unknown (a single noisy median proves nothing)."""
    return _separate(e.p10_ms, e.p90_ms, a.parent_p10_ms, a.parent_p90_ms)


def _separate(lo: float | None, hi: float | None, plo: float | None, phi: float | None) -> str:
    """A kernel's spread lo..hi against its parent's plo..phi (ms): "faster", "slower", "same"."""
    if lo is None or hi is None or plo is None or phi is None:
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
               max_lessons: int = 20, params: list[str] | None = None) -> PriorKnowledge:
    """Lessons and best kernels of earlier runs of the same goal (first) or of similar goals
    (same operator or custom kernel and backend, other shapes or dtype: app.store.goal_family).
    `db` is an open Store or the path of a history database. Empty when the database has none,
    or cannot be read (a warm start is optional). With the operator's `params`, each kernel
    comes back with its tunables and tuned values (app.llm.warm.revive)."""
    if isinstance(db, Store):
        prior = _prior_from(db, goal, max_kernels, max_lessons)
    elif not Path(db).exists():
        return PriorKnowledge()
    else:
        try:
            with Store(db) as store:
                prior = _prior_from(store, goal, max_kernels, max_lessons)
        except StoreError:
            return PriorKnowledge()
    if params is not None:
        prior.kernels = [revive(k, params) for k in prior.kernels]
    return prior


def _prior_from(store: Store, goal: Goal, max_kernels: int, max_lessons: int) -> PriorKnowledge:
    same_key = goal_key(goal)
    family = goal_family(goal)  # the same operator or custom kernel on this backend, any sizes
    related: list[tuple[int, bool]] = []
    for row in store.goals():
        if row["key"] == same_key:
            related.append((row["id"], True))
        elif row["family"] == family:
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
