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
    """The spec of a goal's operator (cpu or cuda backend)."""
    from app.catalog import get_operator

    if goal.backend not in ("cpu", "cuda"):
        raise ValueError(f"LLM agents rewrite kernel source; the {goal.backend} backend has none "
                         "(use the cpu or cuda backend)")
    op = get_operator(goal.backend, goal.operator)
    template = op.template() if callable(getattr(op, "template", None)) else str(op.template)
    if goal.backend == "cpu":
        from app.catalog.cpu.operator import ENTRY_SYMBOL

        names = params if params is not None else list(op.params())
        spec = KernelSpec("c", ENTRY_SYMBOL, template, names)
        spec.contract = (
            f"C11 compiled by the system compiler with OpenMP; the fixed harness calls "
            f"`{spec.signature()}` once per timed sample with fresh buffers and times it from "
            f"outside. Tuning parameters ({', '.join(names)}) arrive as -D macros: read them, "
            "give defaults only under #ifndef, never redefine them. Helpers must be static. "
            "The output buffer is filled with NaN before each call; every element must be written.")
        return spec
    entry = getattr(op, "entry", None) or getattr(op, "kernel_name", None) or goal.operator
    names = params if params is not None else list(getattr(op, "params", lambda: {})() or {})
    spec = KernelSpec("cuda", entry, template, names)
    spec.contract = (
        f"CUDA C++ compiled with NVRTC; the fixed host harness launches `{spec.signature()}` "
        f"with the grid and block the configuration implies. Tuning parameters "
        f"({', '.join(names)}) arrive as -D macros. Only device code: no streams, events, "
        "host callbacks, clocks or runtime API calls.")
    return spec
