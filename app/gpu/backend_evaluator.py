"""The engine side the cpu and cuda backends share (BackendEvaluator): the goal's validation
set, the cascade request a candidate travels in to its worker, the evaluation's round trip, the
adversary's probe, the objective and its unit from the operator's protocol (bytes moved for a
memory-bound operator, FLOPs otherwise), the baseline's name and value, the limit in the
objective's unit, and re-timing two kernels interleaved.

A backend's evaluator.py supplies the hooks: what goes before a candidate's request (baselines,
roofs: _prepare), what its figures get after (_finish), the request for a probe and for a
re-timing, the baseline (_baseline) and the hardware limit as a time (_limit_ms).
"""

from __future__ import annotations

import abc
import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import Any

from app.core.evaluator import Evaluator
from app.core.types import INVALID, Candidate, Evaluation, Stage
from app.goal import Goal
from app.gpu.cascade import CascadeRequest, account_stages, evaluation_from_reply, probe_results
from app.gpu.verify import ValidationSet
from app.gpu.worker import Deadlines, WorkerPool

log = logging.getLogger(__name__)


class BackendEvaluator(Evaluator):
    """Evaluates a goal's candidates in a backend's worker processes (app.gpu.worker)."""

    can_retime = True  # retime_pair: two kernels timed again, interleaved
    pool: WorkerPool
    deadlines: Deadlines
    template: str  # the operator's source a candidate without its own runs

    def __init__(self, goal: Goal, validation_cases: Sequence[dict[str, Any]] = ()) -> None:
        self.goal, self.dtype = goal, goal.dtype
        self.shapes = [list(s) for s in goal.shapes]
        self._validation = ValidationSet(validation_cases)

    # ---- the validation set ---------------------------------------------------------------
    def add_validation_case(self, case: dict[str, Any]) -> None:
        """A case that broke a candidate: every later candidate is checked against it too."""
        self._validation.add(case)

    @property
    def validation_cases(self) -> list[dict[str, Any]]:
        return self._validation.cases()

    def recheck(self, candidate: Candidate) -> Evaluation:
        return self.evaluate(candidate)  # the cascade checks the stored cases first

    # ---- the objective and its unit -------------------------------------------------------
    def work(self, shape: Sequence[int]) -> float:
        """What a throughput counts per call: bytes moved for a memory-bound operator (GB/s),
        FLOPs for a compute-bound one (GFLOP/s)."""
        return float(self.op.bytes_moved(shape, self.dtype) if self.op.memory_bound
                     else self.op.flops(shape))

    def _objective(self, total_ms: float) -> float:
        """A time summed over the goal's shapes in the objective's unit (ms, GB/s or GFLOP/s)."""
        if self.goal.objective.metric == "throughput":
            return sum(self.work(s) for s in self.shapes) / (total_ms / 1e3) / 1e9
        return total_ms

    # ---- one candidate --------------------------------------------------------------------
    def _cascade_request(self, candidate: Candidate | Evaluation, *, seed: int, timing: Any,
                 **backend: Any) -> CascadeRequest:
        """The cascade request for `candidate`; `backend`: the roof and options fields."""
        return CascadeRequest(
            key=candidate.key, config=dict(candidate.config), source=candidate.source,
            template=self.template, goal_shapes=[list(s) for s in self.shapes],
            params=self.space.params, dtype=self.dtype, rtol=self.goal.tolerance.rtol,
            atol=self.goal.tolerance.atol, validation_cases=self.validation_cases, seed=seed,
            metric=self.goal.objective.metric, timing=timing, agent=candidate.agent,
            parent_key=candidate.parent_key, **backend)

    @abc.abstractmethod
    def _prepare(self, candidate: Candidate) -> tuple[CascadeRequest, list[Stage]]:
        """The candidate's request, and the engine's stages spent before it (baselines, roofs)."""

    @abc.abstractmethod
    def _finish(self, ev: Evaluation, request: CascadeRequest) -> None:
        """The backend's figures on a worker's evaluation (roof fractions, speedups)."""

    def evaluate(self, candidate: Candidate) -> Evaluation:
        t0 = time.perf_counter()
        base = {"key": candidate.key, "config": dict(candidate.config), "agent": candidate.agent,
                "source": candidate.source, "parent_key": candidate.parent_key}
        if not self.space.is_valid(candidate.config):
            return Evaluation(ok=False, reason=INVALID, detail="configuration is outside the "
                              "search space or breaks a restriction",
                              stages=[Stage("static_check", False, 0.0, "invalid configuration")],
                              **base)
        request, before = self._prepare(candidate)
        reply = self.pool.call(("evaluate", request), self.deadlines)
        ev = evaluation_from_reply(reply, **base)
        self._finish(ev, request)
        if ev.failing_case:
            self.add_validation_case(ev.failing_case)
        account_stages(ev, before, reply, time.perf_counter() - t0)
        return ev

    # ---- the adversary's probe ------------------------------------------------------------
    @abc.abstractmethod
    def _probe_request(self, candidate: Candidate | Evaluation) -> CascadeRequest:
        """The request a probe starts from (untimed: no roof, no baseline)."""

    def probe(self, candidate: Candidate | Evaluation, cases: list[dict[str, Any]]
              ) -> list[dict[str, Any]]:
        """The adversary's probe: the candidate run on `cases` only, in its sandboxed worker,
        untimed; one {"score", "problem", ...} per case (app.gpu.probe)."""
        request = dataclasses.replace(self._probe_request(candidate), validation_cases=[],
                                      probe_cases=[dict(c) for c in cases])
        reply = self.pool.call(("evaluate", request), self.deadlines)
        return probe_results(reply, len(cases))

    def probe_plan(self) -> dict[str, Any]:
        """What the adversary may vary: the goal's shapes, the operator's distributions."""
        return {"shapes": [list(s) for s in self.shapes], "dtype": self.dtype,
                "distributions": list(self.op.distributions),
                "inputs_vary": bool(self.op.inputs_vary)}

    # ---- baseline, limit, re-timing -------------------------------------------------------
    def _baseline(self) -> tuple[str, float] | None:
        """The baseline a candidate is compared with: (name, ms summed over the goal's shapes)."""
        return None

    def baseline(self) -> float | None:
        found = self._baseline()
        return self._objective(found[1]) if found else None

    def baseline_name(self) -> str | None:
        """Which baseline baseline() is ("numpy", "triton:softmax", "cublas:cupy.matmul", ...)."""
        found = self._baseline()
        return found[0] if found else None

    def _limit_ms(self) -> float | None:
        """The time the hardware's limit allows for the goal's shapes (None: not known)."""
        return None

    def limit(self) -> float | None:
        ms = self._limit_ms()
        return None if ms is None else self._objective(ms)

    @abc.abstractmethod
    def _retime_requests(self, a: Candidate | Evaluation, b: Candidate | Evaluation
                         ) -> tuple[CascadeRequest, CascadeRequest] | None:
        """The two requests a re-timing sends (None: they cannot be re-timed here)."""

    def retime_pair(self, a: Candidate | Evaluation, b: Candidate | Evaluation
                    ) -> dict[str, dict[str, float]] | None:
        """Two verified kernels (an LLM rewrite and the kernel it started from, say) timed again
        in one measurement, interleaved in the worker, outputs poisoned before every timed call
        and checked after: {"a": ..., "b": ...} each with median_ms, p10_ms, p90_ms (summed over
        the goal's shapes) and samples. None on a fault, a deadline, or when a timed output was
        wrong. Thread-safe: a worker serves one request at a time, so a re-timing never overlaps
        an evaluation's timing."""
        try:
            requests = self._retime_requests(a, b)
            if requests is None:
                return None
            reply = self.pool.call(("retime", *requests), self.deadlines)
        except RuntimeError as exc:  # no device, or the pool closed at the end of the run
            log.warning("re-timing %s against %s: %s", a.key, b.key, exc)
            return None
        if reply.fault is not None:
            return None
        t = reply.result  # the cpu worker says {"error": ...}, the cuda worker {"ok": False}
        if not isinstance(t, dict) or "error" in t or not t.get("ok", True) or not {"a", "b"} <= set(t):
            return None
        return {k: dict(t[k]) for k in ("a", "b")}
