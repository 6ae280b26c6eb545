"""Input families chosen by what an operator means: the product's own validation data, drawn
on top of each operator's own distributions (and, for your own kernel, on top of your `fill`).

An operator says what it means with `meaning` (a catalog operator declares it; your own kernel
is "custom", or "movement" when its reference only copies input values, see `looks_like_copy`).
Each family below says which meanings it applies to and why; the verification
(app.gpu.verify.plan_checks) checks every applicable family at the small edge shapes and one of
them, rotating, at each goal shape. A family is drawn per argument: `args_for` names the
arguments it replaces (the others keep the operator's own "normal" draw: weights, biases).

| family          | applies to                                 | why                                        |
|-----------------|--------------------------------------------|--------------------------------------------|
| special         | every operator (yours: where 0 is in range)| +-0, denormals and values below 1e-30:      |
|                 |                                            | flush-to-zero, the sign of zero             |
| nonfinite       | movement                                   | +-inf and NaN with payloads: a copy defines |
|                 |                                            | every bit; arithmetic references do not     |
| masked          | softmax                                    | -inf entries (attention masks, at least one |
|                 |                                            | finite value per row): exp(-inf) = 0        |
| unit            | every operator (yours: if [0, 1) in range) | all in [0, 1): probabilities, images,      |
|                 |                                            | attention weights                           |
| uniform         | every operator (yours: if [-1, 1) in range)| bounded, both signs                         |
| sorted          | every operator                             | rows ascending: sorted keys, positions      |
| reverse_sorted  | every operator                             | rows descending                             |
| increasing      | every operator but the norms               | arange / timestamps in memory order (a norm |
|                 |                                            | of it is ill-conditioned: nearly constant   |
|                 |                                            | rows on an offset, no kernel's fault)       |
| constant_rows   | softmax, norm, matmul, activation, yours   | all-equal rows (zero variance), zero rows  |
| exp_range       | softmax, activation                        | magnitudes around ln(max) of the dtype,     |
|                 |                                            | where exp overflows                         |

Shape families (catalog operators; your own kernel is checked at the sizes its goal names):
`tiny` (every dimension 1) and `prime` (the largest primes within the goal's dimensions,
capped so a check stays cheap).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.catalog.protocol import dtype_limits

MEANINGS = ("movement", "softmax", "norm", "activation", "matmul", "recurrence", "custom")
_ALL = frozenset(MEANINGS) - {"recurrence"}  # a recurrence's inputs have their own structure


@dataclass(frozen=True)
class Family:
    name: str
    applies: frozenset[str]  # meanings
    why: str
    # float64 values: draw(xp, rng, shape, dtype); None for families only your kernel maps
    draw: Callable[[Any, Any, tuple[int, ...], str], Any]


def _tiny(dtype: str) -> float:
    return dtype_limits(dtype)[1] if dtype in ("float16", "bfloat16", "float32", "float64") \
        else dtype_limits("float32")[1]


def _special(xp: Any, rng: Any, shape: tuple[int, ...], dtype: str) -> Any:
    """Normal values with +0, -0, denormals and small normals (< 1e-30 in float32) mixed in."""
    tiny = _tiny(dtype)
    base = rng.standard_normal(shape)
    pick = rng.random(shape)
    sign = xp.where(rng.random(shape) < 0.5, -1.0, 1.0)
    denormal = sign * tiny * rng.uniform(0.001, 1.0, shape)
    small = sign * tiny * rng.uniform(1.0, 1e6 if dtype in ("float32", "bfloat16") else 8.0, shape)
    out = xp.where(pick < 0.1, 0.0, base)
    out = xp.where((pick >= 0.1) & (pick < 0.2), -0.0, out)
    out = xp.where((pick >= 0.2) & (pick < 0.35), denormal, out)
    return xp.where((pick >= 0.35) & (pick < 0.45), small, out)


_NAN_PAYLOADS = (0x7FC00001, 0x7FC12345, 0xFFC00007)  # quiet NaNs, one negative


def _nonfinite(xp: Any, rng: Any, shape: tuple[int, ...], dtype: str) -> Any:
    """special, plus +-inf and quiet NaNs carrying payloads (kept by float32 <-> float64)."""
    out = _special(xp, rng, shape, dtype)
    pick = rng.random(shape)
    out = xp.where(pick < 0.05, xp.inf, out)
    out = xp.where((pick >= 0.05) & (pick < 0.1), -xp.inf, out)
    if dtype in ("float32", "float64"):
        nans = xp.asarray(np.array(_NAN_PAYLOADS, dtype=np.uint32).view(np.float32)
                          .astype(np.float64))
        which = rng.integers(0, len(_NAN_PAYLOADS), shape)
        return xp.where((pick >= 0.1) & (pick < 0.15), nans[which], out)
    return xp.where((pick >= 0.1) & (pick < 0.15), xp.nan, out)


def _masked(xp: Any, rng: Any, shape: tuple[int, ...], dtype: str) -> Any:
    """-inf in about a third of each row, never the whole row (a fully masked row has no
    defined softmax); the first column masked in every other row (left padding)."""
    out = rng.standard_normal(shape)
    mask = rng.random(shape) < 0.35
    if len(shape) == 0 or shape[-1] < 2:
        return out  # a row of one value: masking it would mask the whole row
    mask[..., 0] = True  # left padding
    if len(shape) > 1:
        mask[1::2, 0] = False
    mask[..., -1] &= ~mask[..., :-1].all(axis=-1)
    return xp.where(mask, -xp.inf, out)


def _unit(xp: Any, rng: Any, shape: tuple[int, ...], dtype: str) -> Any:
    return rng.random(shape)


def _uniform(xp: Any, rng: Any, shape: tuple[int, ...], dtype: str) -> Any:
    return rng.uniform(-1.0, 1.0, shape)


def _sorted(xp: Any, rng: Any, shape: tuple[int, ...], dtype: str) -> Any:
    return xp.sort(rng.standard_normal(shape), axis=-1)


def _reverse_sorted(xp: Any, rng: Any, shape: tuple[int, ...], dtype: str) -> Any:
    return xp.flip(xp.sort(rng.standard_normal(shape), axis=-1), axis=-1)


def _increasing(xp: Any, rng: Any, shape: tuple[int, ...], dtype: str) -> Any:
    """Timestamps in memory order: a start plus jittered steps, scaled into [-1, 1] (each step
    stays above the dtype's resolution for a few thousand values, as real timestamps do)."""
    n = int(np.prod(shape)) if shape else 1
    steps = rng.uniform(0.5, 1.5, n)
    t = xp.cumsum(steps)
    span = float(t[-1]) if n else 1.0
    return (-1.0 + 2.0 * t / span).reshape(shape)


def _constant_rows(xp: Any, rng: Any, shape: tuple[int, ...], dtype: str) -> Any:
    lead = shape[:-1]
    values = rng.standard_normal(lead) * 3.0 if lead else rng.standard_normal(()) * 3.0
    if lead:
        values.reshape(-1)[::4] = 0.0  # every fourth row all zeros
        return xp.ascontiguousarray(xp.broadcast_to(values[..., None], shape))
    return xp.full(shape, float(values))


def _exp_range(xp: Any, rng: Any, shape: tuple[int, ...], dtype: str) -> Any:
    """Magnitudes up to 1.25 ln(max) of the dtype, both signs: exp(x) overflows for the top
    fifth (float32: |x| > 88.7), exp(-x) underflows."""
    edge = math.log(dtype_limits(dtype)[0]) if dtype in ("float16", "bfloat16", "float32") \
        else math.log(dtype_limits("float32")[0])
    return rng.uniform(-1.25 * edge, 1.25 * edge, shape)


_ROWS = frozenset({"softmax", "norm", "matmul", "activation", "custom"})
FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("special", _ALL, "+-0, denormals and values below 1e-30: flush-to-zero and the "
           "sign of zero", _special),
    Family("nonfinite", frozenset({"movement"}), "+-inf and NaN payloads: a copy defines "
           "every bit, arithmetic references do not", _nonfinite),
    Family("masked", frozenset({"softmax"}), "-inf entries, never a whole row: attention "
           "masks (exp(-inf) = 0 is defined)", _masked),
    Family("unit", _ALL, "every value in [0, 1): probabilities, images, attention weights",
           _unit),
    Family("uniform", _ALL, "uniform in [-1, 1): bounded, both signs", _uniform),
    Family("sorted", _ALL, "rows ascending: sorted keys, positions", _sorted),
    Family("reverse_sorted", _ALL, "rows descending", _reverse_sorted),
    # not the norms: over a large array each row is nearly constant on an offset, which no
    # float32 normalisation resolves (ill-conditioned input, not a kernel's fault)
    Family("increasing", _ALL - {"norm"}, "arange- or timestamp-like values in memory order",
           _increasing),
    Family("constant_rows", _ROWS, "all-equal rows (zero variance) and all-zero rows",
           _constant_rows),
    Family("exp_range", frozenset({"softmax", "activation"}), "magnitudes around ln(max), "
           "where exp overflows", _exp_range),
)}
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


def meaning_of(op: Any) -> str:
    return op.meaning or ("custom" if op.custom else "")


def for_operator(op: Any, dtype: str) -> tuple[str, ...]:
    """The families that apply to `op` (in the table's order); none for an operator that
    declares no meaning, or whose inputs the goal fixes (stored or seeded data)."""
    meaning = meaning_of(op)
    if not meaning or dtype not in FLOAT_DTYPES or not op.inputs_vary:
        return ()
    names = tuple(f.name for f in FAMILIES.values() if meaning in f.applies)
    if op.custom:
        names = tuple(n for n in names if custom_args(op, n))
    return names


# ---- your own kernel: families mapped into each argument's declared range ------------------
def _arg_range(a: Any) -> tuple[float, float]:
    if a.fill == "uniform":
        return float(a.low), float(a.high)
    mean, sd = (a.high + a.low) / 2, (a.high - a.low) / 2  # "normal": 3 sd either way
    return mean - 3 * abs(sd), mean + 3 * abs(sd)


def custom_args(op: Any, family: str) -> list[Any]:
    """The arguments of your kernel a family may redraw: float inputs drawn by `fill`
    (normal, uniform) that no file, seed or `fixed` pins, and only where the family's values
    stay inside the argument's declared range."""
    out = []
    for a in op.spec.args:
        if not a.is_input or a.data is not None or a.seed is not None or a.fixed \
                or a.fill not in ("normal", "uniform") or a.dtype not in FLOAT_DTYPES:
            continue
        low, high = _arg_range(a)
        if family == "special" and not low <= 0.0 <= high:
            continue
        if family == "unit" and not (low <= 0.0 and high >= 1.0):
            continue
        if family == "uniform" and not (low <= -1.0 and high >= 1.0):
            continue
        if family in ("nonfinite", "masked", "exp_range"):
            continue  # what your reference means by them is unknown
        out.append(a)
    return out


def _custom_values(xp: Any, rng: Any, a: Any, shape: tuple[int, ...], family: str) -> Any:
    """Your fill's own draw, ordered or made constant per row (it stays in its range)."""
    low, high = float(a.low), float(a.high)

    def own(s: tuple[int, ...]) -> Any:
        if a.fill == "uniform":
            return rng.uniform(low, high, s)
        return rng.standard_normal(s) * (high - low) / 2 + (high + low) / 2

    if family in ("special", "unit", "uniform"):
        return FAMILIES[family].draw(xp, rng, shape, a.dtype)
    if family == "sorted":
        return xp.sort(own(shape), axis=-1)
    if family == "reverse_sorted":
        return xp.flip(xp.sort(own(shape), axis=-1), axis=-1)
    if family == "increasing":
        return xp.sort(own((int(np.prod(shape)),))).reshape(shape)
    if family == "constant_rows":
        lead = shape[:-1]
        return xp.ascontiguousarray(xp.broadcast_to(own(lead)[..., None], shape)) if lead \
            else xp.full(shape, float(own((1,))[0]))
    raise ValueError(f"unknown input family {family!r}")


# ---- drawing -------------------------------------------------------------------------------
def args_for(op: Any, family: str, inputs: dict[str, Any]) -> list[str]:
    """The arguments a family replaces: the operator's `family_args` (what carries the data,
    not weights or biases), else every float input."""
    chosen = op.family_args
    names = [n for n in chosen if n in inputs] if chosen else list(inputs)
    return [n for n in names if inputs[n].dtype.kind == "f" or inputs[n].dtype == np.uint16]


def draw_inputs(xp: Any, op: Any, shape: Sequence[int], dtype: str, rng: Any, family: str,
                to_storage: Callable[[Any, Any, str], Any]) -> dict[str, Any]:
    """The operator's own "normal" inputs with the family's arguments drawn again."""
    if family not in FAMILIES:
        raise ValueError(f"unknown input family {family!r}")
    inputs = op.make_inputs(xp, list(shape), dtype, rng, "normal")
    if op.custom:
        for a in custom_args(op, family):
            s = tuple(inputs[a.name].shape)
            inputs[a.name] = xp.ascontiguousarray(
                _custom_values(xp, rng, a, s, family).astype(a.dtype))
        return inputs
    for name in args_for(op, family, inputs):
        s = tuple(int(d) for d in inputs[name].shape)
        inputs[name] = to_storage(xp, FAMILIES[family].draw(xp, rng, s, dtype), dtype)
    return inputs


# ---- shapes --------------------------------------------------------------------------------
def largest_prime_at_most(n: int) -> int:
    for p in range(max(2, n), 1, -1):
        if all(p % q for q in range(2, int(p ** 0.5) + 1)):
            return p
    return 2


def prime_shape(goal_shape: Sequence[int], caps: Sequence[int]) -> list[int]:
    """Each dimension the largest prime <= min(goal dimension, cap); a dimension of 1 or 2
    stays (the goal's range ends there)."""
    return [int(d) if int(d) <= 2 else largest_prime_at_most(min(int(d), int(c)))
            for d, c in zip(goal_shape, caps, strict=False)]


def family_shapes(op: Any, goal_shapes: Sequence[Sequence[int]]) -> dict[str, list[int]]:
    """{"tiny": shape, "prime": shape} for a catalog operator with a meaning (none for your
    own kernel: its goal names the sizes it accepts)."""
    meaning = meaning_of(op)
    if not goal_shapes or meaning in ("", "custom", "recurrence") or op.custom:
        return {}
    goal = [int(d) for d in goal_shapes[0]]
    caps = [61] * len(goal) if meaning == "matmul" else [61] * (len(goal) - 1) + [257]
    return {"tiny": [1] * len(goal), "prime": prime_shape(goal, caps)}


# ---- data movement -------------------------------------------------------------------------
def looks_like_copy(xp: Any, inputs: dict[str, Any], ref: dict[str, Any]) -> bool:
    """Whether a reference only moves input values: every checked float output holds input
    values only, and at least half of the distinct input values of the largest input appear
    (a copy, transpose, gather or slice; not a max over rows)."""
    values = [v.reshape(-1) for v in inputs.values() if v.dtype.kind == "f"]
    if not values:
        return False
    pool = xp.unique(xp.concatenate([v.astype(xp.float64) for v in values]))
    pool = pool[xp.isfinite(pool)]
    largest = max(int(xp.unique(v).size) for v in values)
    seen = False
    for out in ref.values():
        flat = out.reshape(-1)
        flat = flat[xp.isfinite(flat)]
        if flat.size == 0:
            continue  # an output that is not checked (NaN reference)
        distinct = xp.unique(flat)
        if int(distinct.size) < 16 or int(distinct.size) * 2 < largest \
                or not bool(xp.isin(distinct, pool).all()):
            return False
        seen = True
    return seen


def is_movement(op: Any, xp: Any, inputs64: dict[str, Any], ref: dict[str, Any]) -> bool:
    """A data-movement operator (compared bit for bit): declared, or for your own kernel,
    decided once per process from the first reference it gives."""
    meaning = meaning_of(op)
    if meaning == "movement":
        return True
    if meaning != "custom":
        return False
    cache = op.__dict__
    if "_movement" not in cache:
        cache["_movement"] = looks_like_copy(xp, inputs64, ref)
    return bool(cache["_movement"])
