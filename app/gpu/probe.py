"""Crafted inputs and the adversary's probe, inside the worker (app.gpu.cascade calls them).

A crafted case is a validation case (shape, distribution, seed) plus `craft`: a list of steps
applied, in order, to the inputs the operator drew for (shape, distribution, seed). It is
reproducible from its dict alone, so it is kept with the goal like any failing case and every
later candidate is checked against it (check_crafted, in the cascade's verify stage).

Steps never leave the operator's own input domain: magnitudes are capped by the largest value
the operator's own "near_limits" draw gives at that shape (an honest kernel must survive those),
and no step writes Inf or NaN.

    {"op": "scale", "exp": e}                 multiply by 10**e (capped)
    {"op": "unit"}                            fold every value into [0, 1)
    {"op": "sort", "dir": 1 | -1, "run": n}   sort the first n values of every row (0: all)
    {"op": "constant_rows", "every": k}       every k-th row holds one value
    {"op": "repeat_rows"}                     every row is a copy of the first
    {"op": "special", "value": v, "density": p, "seed": s}
        v in denormal, zero, negzero, large, one: a fraction p of the values, placed by seed s

The probe (run_probe) runs the candidate on given cases without timing it and scores each:
the worst error relative to the tolerance, max |got - ref| / (atol + rtol * scale), where 1.0
is the verdict's edge (a failing verdict scores at least 1, a passing one below 1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from app.catalog.protocol import Operator, dtype_limits, from_storage, to_storage
from app.gpu.verify import (
    CheckCase,
    GuardedOutput,
    Runner,
    make_inputs,
    make_outputs,
    run_check,
    tolerance_for,
)

STEPS = ("scale", "unit", "sort", "constant_rows", "repeat_rows", "special")
SPECIAL_VALUES = ("denormal", "zero", "negzero", "large", "one")
MAX_STEPS = 6


class CraftError(ValueError):
    """A crafted case that cannot be applied (one line saying why)."""


def is_crafted(case: dict[str, Any]) -> bool:
    return bool(case.get("craft"))


def case_label(case: dict[str, Any]) -> str:
    """A crafted case in a few words: its distribution and steps."""
    steps = []
    for step in case.get("craft") or []:
        if not isinstance(step, dict):
            continue
        op = step.get("op", "?")
        if op == "special":
            steps.append(f"{step.get('value')} x{float(step.get('density', 0)):.2g}")
        elif op == "scale":
            steps.append(f"x1e{step.get('exp')}")
        elif op == "sort":
            steps.append("sorted" if int(step.get("dir", 1)) > 0 else "reverse-sorted")
        else:
            steps.append(str(op))
    return "+".join([str(case.get("distribution", "normal")), *steps])


def check_craft(craft: Any) -> list[dict[str, Any]]:
    """The steps as plain dicts, or CraftError naming the first bad one."""
    if not isinstance(craft, list) or len(craft) > MAX_STEPS:
        raise CraftError(f"craft must be a list of at most {MAX_STEPS} steps")
    out = []
    for i, step in enumerate(craft):
        if not isinstance(step, dict) or step.get("op") not in STEPS:
            raise CraftError(f"craft step {i}: op must be one of {', '.join(STEPS)}")
        op = step["op"]
        try:
            if op == "scale" and not -40 <= float(step["exp"]) <= 40:
                raise CraftError(f"craft step {i}: exp must be within [-40, 40]")
            if op == "sort" and (int(step.get("dir", 1)) not in (1, -1) or int(step.get("run", 0)) < 0):
                raise CraftError(f"craft step {i}: dir is 1 or -1, run >= 0")
            if op == "constant_rows" and int(step.get("every", 1)) < 1:
                raise CraftError(f"craft step {i}: every must be >= 1")
            if op == "special":
                if step.get("value") not in SPECIAL_VALUES:
                    raise CraftError(f"craft step {i}: value must be one of "
                                     f"{', '.join(SPECIAL_VALUES)}")
                if not 0.0 < float(step["density"]) <= 1.0:
                    raise CraftError(f"craft step {i}: density must be in (0, 1]")
                int(step.get("seed", 0))
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, CraftError):
                raise
            raise CraftError(f"craft step {i}: missing or malformed field ({exc})") from None
        out.append(dict(step))
    return out


def _float_input(arr: Any, dtype: str) -> bool:
    kind = np.dtype(arr.dtype).kind
    return kind == "f" or (dtype == "bfloat16" and np.dtype(arr.dtype) == np.uint16)


def _rows(x: Any) -> Any:
    """A 2-D view: the last axis is a row."""
    return x.reshape(-1, x.shape[-1]) if x.ndim >= 1 and x.size else x.reshape(1, -1)


def apply_step(xp: Any, x: Any, step: dict[str, Any], ceiling: float, tiny: float) -> Any:
    """One step on float64 values `x` (a fresh array is returned)."""
    op = step["op"]
    x = xp.array(x, dtype=xp.float64, copy=True)
    if x.size == 0:
        return x
    if op == "scale":
        x = x * (10.0 ** float(step["exp"]))
    elif op == "unit":
        x = xp.abs(x)
        x = x - xp.floor(x)
    elif op == "sort":
        rows, run = _rows(x), int(step.get("run", 0)) or x.shape[-1]
        head = xp.sort(rows[:, :run], axis=1)
        rows[:, :run] = head if int(step.get("dir", 1)) > 0 else head[:, ::-1]
    elif op == "constant_rows":
        rows, every = _rows(x), int(step.get("every", 1))
        rows[::every, :] = rows[::every, :1]
    elif op == "repeat_rows":
        rows = _rows(x)
        rows[:, :] = rows[:1, :]
    elif op == "special":
        rng = np.random.default_rng(int(step.get("seed", 0)))
        where = rng.random(x.shape) < float(step["density"])
        sign = np.where(rng.random(x.shape) < 0.5, -1.0, 1.0)
        value = {"denormal": tiny * rng.uniform(0.001, 0.9, x.shape) * sign,
                 "zero": np.zeros(x.shape), "negzero": np.full(x.shape, -0.0),
                 "large": ceiling * rng.uniform(0.5, 1.0, x.shape) * sign,
                 "one": np.ones(x.shape)}[step["value"]]
        x = xp.where(xp.asarray(where), xp.asarray(value), x)
    # never beyond what the operator itself draws (an honest kernel must survive that)
    return xp.clip(x, -ceiling, ceiling)


def _ceiling(xp: Any, op: Operator, case: CheckCase, dtype: str, inputs: dict[str, Any]) -> float:
    """The largest magnitude crafted values may reach at this shape: the operator's own
    near_limits draw where it has one, else the largest value its draw gave here."""
    drawn = inputs
    if "near_limits" in tuple(op.distributions):
        drawn = make_inputs(xp, op, CheckCase(list(case.shape), "near_limits", case.seed), dtype)
    top = 0.0
    for arr in drawn.values():
        if _float_input(arr, dtype) and arr.size:
            with np.errstate(all="ignore"):
                top = max(top, float(xp.nanmax(xp.abs(from_storage(xp, arr, dtype)))))
    return min(top, dtype_limits(dtype)[0] / 4) or 1.0


def crafted_inputs(xp: Any, op: Operator, data: dict[str, Any], dtype: str
                   ) -> tuple[CheckCase, dict[str, Any]]:
    """The case's inputs in storage dtype: the operator's draw, then the craft steps."""
    dist = data.get("distribution", "normal")
    if dist not in tuple(op.distributions):
        dist = "normal"
    case = CheckCase([int(d) for d in data["shape"]], dist, int(data.get("seed", 0)), "validation")
    inputs = make_inputs(xp, op, case, dtype)
    steps = check_craft(data.get("craft") or [])
    if not steps or not op.inputs_vary:
        return case, inputs
    ceiling = _ceiling(xp, op, case, dtype, inputs)
    tiny = dtype_limits(dtype)[1]
    out = {}
    for name, arr in inputs.items():
        if not _float_input(arr, dtype):
            out[name] = arr
            continue
        x = from_storage(xp, arr, dtype)
        for step in steps:
            x = apply_step(xp, x, step, ceiling, tiny)
        out[name] = to_storage(xp, x, dtype).reshape(arr.shape)
    return case, out


def score(xp: Any, op: Operator, inputs: dict[str, Any], outputs: dict[str, GuardedOutput],
          shape: Sequence[int], dtype: str, rtol: float, atol: float) -> float:
    """The worst error relative to the tolerance over every output (inf: NaN or Inf where the
    reference is finite)."""
    x64 = {k: from_storage(xp, v, dtype) for k, v in inputs.items()}
    with np.errstate(all="ignore"):
        ref = op.reference(xp, x64, list(shape))
        scale = op.error_scale(xp, x64, ref, list(shape))
    out_dtypes = op.output_dtypes(dtype)
    worst = 0.0
    for name, expected in ref.items():
        got = from_storage(xp, outputs[name].view, out_dtypes.get(name, dtype))
        finite = xp.isfinite(expected)
        if bool((~xp.isfinite(got) & finite).any()):
            return float("inf")
        with np.errstate(all="ignore"):
            ratio = xp.abs(got - expected) / (atol + rtol * xp.abs(scale[name]))
        ratio = xp.where(finite, ratio, 0.0)
        if ratio.size:
            worst = max(worst, float(xp.nanmax(ratio)))
    return worst


def check_one(xp: Any, op: Operator, runner: Runner, data: dict[str, Any], dtype: str,
              rtol: float | None, atol: float | None) -> dict[str, Any]:
    """Run the candidate on one (crafted) case: {"score", "problem", "corrupted"}; the
    verifier's verdict (app.gpu.verify.run_check) decides, the score only grades it."""
    case, inputs = crafted_inputs(xp, op, data, dtype)
    if op.check_shape(case.shape, dtype) is not None:
        return {"score": None, "problem": "", "corrupted": False, "skipped": "shape"}
    outputs = make_outputs(xp, op, case.shape, dtype)
    tol = tolerance_for(op, case.shape, dtype, rtol, atol)
    problem, corrupted = run_check(xp, op, runner, inputs, outputs, case.shape, dtype, tol)
    if corrupted:
        return {"score": float("inf"), "problem": problem or "", "corrupted": True}
    try:
        graded = score(xp, op, inputs, outputs, case.shape, dtype, tol.rtol, tol.atol)
    except Exception:  # noqa: BLE001 - an operator without elementwise scores: the verdict
        graded = 0.0
    graded = max(graded, 1.0) if problem else min(graded, 0.999)
    return {"score": graded, "problem": problem or "", "corrupted": False}


def check_crafted(xp: Any, op: Operator, runner: Runner, cases: Sequence[dict[str, Any]],
                  dtype: str, rtol: float | None, atol: float | None
                  ) -> tuple[dict[str, Any], str, bool] | None:
    """The stored crafted cases a candidate must pass: (case, problem, corrupted) for the
    first it fails, None when it passes every one. A malformed stored case is skipped."""
    for data in cases:
        if data.get("dtype", dtype) != dtype:
            continue
        try:
            got = check_one(xp, op, runner, data, dtype, rtol, atol)
        except (CraftError, KeyError, TypeError, ValueError):
            continue
        if got["problem"]:
            return data, got["problem"], got["corrupted"]
    return None


def probe_cases(xp: Any, op: Operator, runner: Runner, cases: Sequence[dict[str, Any]],
                dtype: str, rtol: float | None, atol: float | None) -> list[dict[str, Any]]:
    """Every case scored (the adversary's view); stops after a case that corrupted memory
    (the process is suspect), the rest unscored."""
    results: list[dict[str, Any]] = []
    for data in cases:
        try:
            got = check_one(xp, op, runner, data, dtype, rtol, atol)
        except (CraftError, KeyError, TypeError, ValueError) as exc:
            got = {"score": None, "problem": "", "corrupted": False, "skipped": str(exc)[:200]}
        results.append(got)
        if got["corrupted"]:
            break
    return results
