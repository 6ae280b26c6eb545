"""An evaluator wrapper that applies the LLM source policy before the backend sees a candidate.

Candidates that carry their own source are checked by app.llm.policy; a violation becomes a
failed evaluation with reason `static_check` (stored like any other, reason and rule in the
detail) without compiling anything. Template candidates pass straight through.

Tunables an LLM kernel declared (app.llm.tunables) are not parameters of the backend's space:
a candidate whose configuration carries them reaches the backend with the operator's own
parameters as its configuration and each tunable as a `#define` line before its source (the
kernel reads it under #ifndef, exactly as it would read -D); the evaluation comes back with the
whole configuration, so what is stored and shown names the tunables' values.
"""

from __future__ import annotations

import time
from dataclasses import replace
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
        self.max_parallel = inner.max_parallel

    def _backend_form(self, item: Any) -> Any:
        """`item` (a Candidate or an Evaluation) as the backend takes it: tunables outside
        its space become #define lines before the source."""
        extra = {k: v for k, v in item.config.items() if k not in self.space.params}
        if not extra or item.source is None:
            return item
        defines = "".join(f"#define {k} {int(v)}\n" for k, v in extra.items())
        return replace(item, config={k: v for k, v in item.config.items() if k not in extra},
                       source=defines + item.source)

    def _restored(self, evaluation: Evaluation | None, item: Any) -> Evaluation | None:
        if evaluation is not None and evaluation.config != item.config:
            evaluation.config = dict(item.config)
            evaluation.source = item.source
        return evaluation

    def evaluate(self, candidate: Candidate) -> Evaluation:
        evaluation = self._evaluate(self._backend_form(candidate))
        return self._restored(evaluation, candidate)

    def _evaluate(self, candidate: Candidate) -> Evaluation:
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
        return self._restored(self.inner.recheck(self._backend_form(candidate)), candidate)


    def baseline(self) -> float | None:
        return self.inner.baseline()

    def limit(self) -> float | None:
        return self.inner.limit()

    def device(self):  # type: ignore[no-untyped-def]
        return self.inner.device()

    def close(self) -> None:
        self.inner.close()

    # the optional capabilities (app.core.evaluator) are the inner backend's
    @property
    def op(self) -> Any:  # type: ignore[override]
        return self.inner.op

    @property
    def can_retime(self) -> bool:  # type: ignore[override]
        return self.inner.can_retime

    @property
    def answers_at_once(self) -> bool:  # type: ignore[override]
        return self.inner.answers_at_once

    def baseline_name(self) -> str | None:
        return self.inner.baseline_name()

    def attach_bus(self, bus: Any, run_id: int | None = None) -> None:
        self.inner.attach_bus(bus, run_id)

    def candidate_key(self, config: dict[str, Any], source: str | None = None) -> str | None:
        return self.inner.candidate_key(config, source)

    def retime_pair(self, a: Any, b: Any) -> dict[str, dict[str, float]] | None:
        return self.inner.retime_pair(a, b)

    def final_comparison(self, best: Evaluation) -> dict[str, float] | None:
        return self.inner.final_comparison(self._backend_form(best))

    def continue_here(self) -> bool:
        return self.inner.continue_here()

    def probe(self, candidate: Any, cases: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        return self.inner.probe(self._backend_form(candidate), cases)

    def probe_plan(self) -> dict[str, Any] | None:
        return self.inner.probe_plan()

    def add_validation_case(self, case: dict[str, Any]) -> None:
        self.inner.add_validation_case(case)

    def limits(self) -> Any:
        return self.inner.limits()

    def roofs(self) -> Any:
        return self.inner.roofs()

    def peak(self) -> Any:
        return self.inner.peak()

    @property
    def validation_cases(self) -> list[dict[str, Any]]:
        return self.inner.validation_cases

    def __getattr__(self, name: str) -> Any:  # what else the backend has (its own helpers)
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
