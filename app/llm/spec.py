"""What an LLM agent is told about the kernel it rewrites, taken from the operator definition:
the language, the entry symbol and its signature, how tuning parameters arrive, and the
template source the current configuration renders to."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from app.goal import Goal


@dataclass
class KernelSpec:
    language: str  # "c" or "cuda"
    entry: str  # the symbol the fixed harness calls
    template: str  # the operator's device source (parameters arrive as -D macros)
    params: list[str] = field(default_factory=list)
    contract: str = ""  # prose: what the harness passes and expects

    def signature(self) -> str:
        m = re.search(rf"[^;{{}}]*\b{re.escape(self.entry)}\s*\([^)]*\)", self.template)
        return " ".join(m.group(0).split()) if m else f"{self.entry}(...)"


def kernel_spec(goal: Goal, params: list[str] | None = None) -> KernelSpec:
    """The spec of a goal's operator, read through the catalog's operator protocol
    (app.catalog.protocol.Operator: language, entry, template source, space)."""
    from app.catalog import get_operator
    from app.catalog.protocol import Operator

    if goal.backend not in ("cpu", "cuda"):
        raise ValueError(f"LLM agents rewrite kernel source; the {goal.backend} backend has none "
                         "(use the cpu or cuda backend)")
    if goal.kernel is not None:  # your own kernel: the LLM rewrites the user's source
        from app.catalog.custom import custom_operator

        op: Operator = custom_operator(goal, goal.backend)
    else:
        op = get_operator(goal.backend, goal.operator)
    names = params if params is not None else list(op.space(goal.dtype).params)
    spec = KernelSpec(op.language, op.entry(goal.dtype), op.template_source(goal.dtype), names)
    spec.contract = CONTRACTS[op.language].format(signature=spec.signature(), params=", ".join(names))
    return spec


# What the fixed harness does, per kernel language.
CONTRACTS = {
    "c": ("C11 compiled by the system compiler with OpenMP; the fixed harness calls "
          "`{signature}` once per timed sample with fresh buffers and times it from outside. "
          "Tuning parameters ({params}) arrive as -D macros: read them, give defaults only under "
          "#ifndef, never redefine them. Helpers must be static. The output buffer is filled with "
          "NaN before each call; every element must be written."),
    "cuda": ("CUDA C++ compiled with NVRTC; the fixed host harness launches `{signature}` with the "
             "grid and block the configuration implies. Tuning parameters ({params}) arrive as -D "
             "macros. Only device code: no streams, events, host callbacks, clocks or runtime API "
             "calls."),
}
