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
from app.kt_import.templated import uncommented

GRID_SCAN = 20_000  # configurations whose grid sizes are looked at for per-block outputs


def unanswered_outputs(cap: dict[str, Any], arrays: dict[str, np.ndarray]) -> list[dict[str, Any]]:
    """The all-zero arrays (Kernel Tuner's outputs by convention), else the arrays the
    kernel's signature lets it write (pointers not declared const)."""
    params = [a for a in cap["args"] if not a.get("constant")]  # cmem_args are no parameters
    zero = [a for a in params if a["kind"] == "array" and not arrays[f"in_{a['name']}"].any()]
    if zero:
        return zero
    writable = writable_params(cap["source"], cap["kernel_name"])
    if writable is not None and len(writable) == len(params):
        written = [a for a, w in zip(params, writable) if w and a["kind"] == "array"]
        if written:
            return written
    raise ImportRefused("no answer=, no all-zero array and no pointer the kernel may write (not "
                        "const) in its signature: give answer=[...] so the outputs are known")


def writable_params(source: str, name: str) -> list[bool] | None:
    """Per parameter of `name`'s definition: a pointer (or array) to data not declared const.
    None when the definition is not found."""
    params = _params(source, name)
    if params is None:
        return None
    return [bool(re.search(r"[*\[]", p)) and not re.search(r"\bconst\b", re.split(r"[*\[]", p, 1)[0])
            for p in params]


def _params(source: str, name: str) -> list[str] | None:
    """The parameters of `name`'s definition, comments out. None when it is not found."""
    found = re.search(rf"\b{re.escape(name)}\s*\(([^()]*)\)\s*\{{", source)
    if found is None:
        return None
    text = uncommented(found.group(1))
    return [p.strip() for p in text.split(",") if p.strip() and p.strip() != "void"]


def settle(goal: Goal, goal_path: Path, outputs: list[dict[str, Any]],
           params: dict[str, str]) -> list[str]:
    """Mark per-block outputs unchecked in `goal` (as written at goal_path, which must load:
    GoalError otherwise; the caller writes it again); the notes."""
    from app.catalog.custom.operator import custom_operator

    op = custom_operator(Goal.load(goal_path), goal.backend)
    per_block = _per_block(op, goal.shapes[0], outputs, params) if goal.backend == "cuda" else []
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
    try:
        config = op.reference_config()
    except ValueError as exc:
        raise ImportRefused(f"no answer= in the script, and the kernel cannot be its own "
                            f"reference: {exc}; give answer=[...]") from None
    where = ", ".join(f"{k}={v}" for k, v in config.items()) or "its only configuration"
    return notes + [(f"no answer= in the script: {', '.join(checked)} checked against this same "
                     f"kernel at {where} (the first configuration that meets the restrictions): a "
                     "configuration or rewrite that changes the results is caught, a bug the "
                     "kernel has everywhere is not; give answer=[...] for that. A tunable that "
                     "changes what the kernel computes (a filter size, say) fails at every other "
                     "value: give it one value in tune_params")]


def _per_block(op: Any, shape: list[int], outputs: list[dict[str, Any]],
               params: dict[str, str]) -> list[str]:
    """Outputs with as many elements as some configuration's grid has blocks (and not as many
    as the problem has) that the kernel indexes by block: blockIdx in the parameter's subscript,
    or, where it hands the array to a device function, a block's linear index anywhere
    (blockIdx with gridDim in one subscript, as in Kernel Tuner's expdist)."""
    blocks = {math.prod(op.launch(config, list(shape)).grid) for config in op.valid_configs(GRID_SCAN)}
    elements = math.prod(int(d) for d in shape)
    source = op.spec.source
    linear = re.search(r"\[[^\]]*(blockIdx[^\]]*gridDim|gridDim[^\]]*blockIdx)[^\]]*\]", source)
    found = []
    for a in outputs:
        if math.prod(a["shape"]) not in blocks or math.prod(a["shape"]) == elements:
            continue
        name = re.escape(params.get(a["name"], a["name"]))
        if re.search(rf"\b{name}\s*\[[^\]]*blockIdx", source) or (
                linear and re.search(rf"[(,]\s*{name}\s*[,)]", source)):
            found.append(a["name"])
    return found


def param_names(cap: dict[str, Any]) -> dict[str, str]:
    """The script's name of each kernel argument -> its parameter's name in the kernel."""
    params = _params(cap["source"], cap["kernel_name"]) or []
    args = [a for a in cap["args"] if not a.get("constant")]
    if len(params) != len(args):
        return {}
    names = [re.search(r"(\w+)\s*(\[[^\]]*\])?$", p) for p in params]
    return {a["name"]: n.group(1) for a, n in zip(args, names) if n}


def load_check(goal_path: Path, backend: str) -> None:
    """The goal written loads (GoalError names what is wrong). Nothing is compiled here: the
    kernel source came from the script, and it is built only inside sandbox cells."""
    from app.catalog.custom.operator import custom_operator

    custom_operator(Goal.load(goal_path), backend)
