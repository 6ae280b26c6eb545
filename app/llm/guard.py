"""An evaluator wrapper that applies the LLM source policy before the backend sees a candidate.

Candidates that carry their own source are checked by app.llm.policy; a violation becomes a
failed evaluation with reason `static_check` (stored like any other, reason and rule in the
detail) without compiling anything. Template candidates pass straight through.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from app.core.evaluator import Evaluator
from app.core.types import STATIC_CHECK, Candidate, Evaluation, Stage
from app.llm import policy
from app.llm.spec import KernelSpec

if TYPE_CHECKING:
    from app.goal import Goal


class PolicyEvaluator(Evaluator):
    def __init__(self, inner: Evaluator, spec: KernelSpec, *, dtype: str = "float32",
                 forbid: list[str] | tuple[str, ...] = ()) -> None:
        self.inner = inner
        self.spec = spec
        self.dtype = dtype
        self.forbid = tuple(forbid)
        self.space = inner.space
        self.max_parallel = getattr(inner, "max_parallel", 1)

    def evaluate(self, candidate: Candidate) -> Evaluation:
        if candidate.source is not None:
            t0 = time.perf_counter()
            try:
                policy.check(candidate.source, language=self.spec.language, entry=self.spec.entry,
                             dtype=self.dtype, forbid=self.forbid, params=self.spec.params)
            except policy.PolicyViolation as exc:
                seconds = time.perf_counter() - t0
                return Evaluation(key=candidate.key, config=dict(candidate.config), ok=False,
                                  reason=STATIC_CHECK, detail=str(exc), agent=candidate.agent,
                                  source=candidate.source, parent_key=candidate.parent_key,
                                  stages=[Stage("static_check", False, seconds, str(exc))],
                                  resources={"policy_rule": exc.rule}, sim_seconds=seconds)
        return self.inner.evaluate(candidate)

    def recheck(self, candidate: Candidate) -> Evaluation | None:
        return self.inner.recheck(candidate)

    def baseline(self) -> float | None:
        return self.inner.baseline()

    def limit(self) -> float | None:
        return self.inner.limit()

    def device(self):  # type: ignore[no-untyped-def]
        return self.inner.device()

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:  # sample_telemetry and other optional hooks
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


def warm_start_refusal(source: str | None, spec: KernelSpec, goal: Goal) -> str:
    """Why the current source policy refuses a stored kernel ('' when it accepts it).

    Warm-start kernels come from the history database, written under whatever policy an
    earlier version had: they are checked again, as strictly as a fresh reply, before they
    are proposed (the guarded evaluator checks them once more before compiling)."""
    if not isinstance(source, str) or not source.strip():
        return "no source"
    try:
        policy.check(source, language=spec.language, entry=spec.entry, dtype=goal.dtype,
                     forbid=goal.constraints.forbid, params=spec.params)
    except policy.PolicyViolation as exc:
        return str(exc)
    return ""
