"""A Kernel Tuner script without answer=: which arrays are outputs, and what checks them.

Kernel Tuner checks nothing then; KernelSwarm checks the outputs against the kernel itself at
the first configuration that meets the restrictions (CustomOperator.reference_config), so a
configuration or a rewrite that changes the results is caught. Outputs that hold one value per
thread block (partial sums, as in Kernel Tuner's expdist example) differ between block sizes
by design: they are left unchecked, with a note."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from app.goal import Goal
from app.kt_import.importer import ImportRefused

GRID_SCAN = 20_000  # configurations whose grid sizes are looked at for per-block outputs


def unanswered_outputs(cap: dict[str, Any], arrays: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """The all-zero arrays (Kernel Tuner's outputs by convention), else the arrays the
    kernel's signature lets it write (pointers not declared const)."""
    zero = [a for a in cap["args"] if a["kind"] == "array" and not arrays[f"in_{a['name']}"].any()]
    if zero:
        return zero
    writable = writable_params(cap["source"], cap["kernel_name"])
    if writable is not None and len(writable) == len(cap["args"]):
        written = [a for a, w in zip(cap["args"], writable) if w and a["kind"] == "array"]
        if written:
            return written
    raise ImportRefused("no answer=, no all-zero array and no pointer the kernel may write (not "
                        "const) in its signature: give answer=[...] so the outputs are known")


def writable_params(source: str, name: str) -> list[bool] | None:
    """Per parameter of `name`'s definition: a pointer to data not declared const. None when
    the definition is not found."""
    found = re.search(rf"\b{re.escape(name)}\s*\(([^()]*)\)\s*\{{", source)
    if found is None:
        return None
    params = [p.strip() for p in found.group(1).split(",") if p.strip() and p.strip() != "void"]
    return ["*" in p and not re.search(r"\bconst\b", p.split("*", 1)[0]) for p in params]


def settle(goal: Goal, goal_path: Path, outputs: list[dict[str, Any]]) -> list[str]:
    """Mark per-block outputs unchecked in `goal` (as written at goal_path; the caller writes
    it again); the notes."""
    from app.catalog.custom.operator import custom_operator

    op = custom_operator(Goal.load(goal_path), goal.backend)
    per_block = _per_block(op, goal.shapes[0], outputs) if goal.backend == "cuda" else []
    notes = []
    if per_block:
        for arg in goal.kernel.args:
            if arg["name"] in per_block:
                arg["check"] = False
        notes.append(f"{', '.join(per_block)}: one value per thread block (its size is a grid's "
                     "block count), so it differs between block sizes by design: not checked")
    checked = [a["name"] for a in outputs if a["name"] not in per_block]
    if not checked:
        goal.kernel.reference_source = ""
        return notes + [("no answer= in the script and no output to check against the kernel "
                         "itself: give answer=[...] so the results are checked")]
    config = op.reference_config()
    where = ", ".join(f"{k}={v}" for k, v in config.items()) or "its only configuration"
    return notes + [(f"no answer= in the script: {', '.join(checked)} checked against this same "
                     f"kernel at {where} (the first configuration that meets the restrictions): a "
                     "configuration or rewrite that changes the results is caught, a bug the "
                     "kernel has everywhere is not; give answer=[...] for that")]


def _per_block(op: Any, shape: list[int], outputs: list[dict[str, Any]]) -> list[str]:
    """Outputs with as many elements as some configuration's grid has blocks (and not as
    many as the problem has elements)."""
    blocks = {math.prod(op.launch(config, list(shape)).grid) for config in op.valid_configs(GRID_SCAN)}
    elements = math.prod(int(d) for d in shape)
    return [a["name"] for a in outputs
            if math.prod(a["shape"]) in blocks and math.prod(a["shape"]) != elements]
