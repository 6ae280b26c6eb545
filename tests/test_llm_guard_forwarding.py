"""The LLM agents' policy wrapper (app.llm.guard.PolicyEvaluator) answers every question the
Evaluator base declares with the wrapped backend's answer. A capability declared on the base
with a "none" default and not forwarded would be silently lost behind the wrapper (the
wrapper's __getattr__ only sees names the base does not define)."""

from __future__ import annotations

import inspect

from app.core.evaluator import Evaluator
from app.llm.guard import PolicyEvaluator


def _declared(cls: type) -> set[str]:
    return {name for name, _ in inspect.getmembers(cls)
            if not name.startswith("_") and name not in ("space", "max_parallel")}


def test_every_capability_of_the_base_is_forwarded():
    base = _declared(Evaluator)
    lost = sorted(n for n in base if n not in vars(PolicyEvaluator) and n not in ("evaluate",))
    assert lost == [], f"declared on Evaluator, answered by the base default behind the wrapper: {lost}"


class _Measured(Evaluator):
    """A backend that measured its roofs (what the LLM hardware sheet reads)."""

    def evaluate(self, candidate):  # never called here
        raise AssertionError

    def limits(self):
        return "gpu limits"

    def roofs(self):
        return "cache roofs"

    def peak(self):
        return "fp32 peak"


def test_measured_figures_reach_through_the_wrapper():
    class Spec:  # the wrapper only keeps it for its source check
        language = "c"

    inner = _Measured()
    inner.space = None
    wrapped = PolicyEvaluator(inner, Spec())
    assert (wrapped.limits(), wrapped.roofs(), wrapped.peak()) == ("gpu limits", "cache roofs",
                                                                   "fp32 peak")
