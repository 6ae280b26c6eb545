"""The verification protocol shared by every compiling backend.

A candidate is correct only if, on inputs drawn fresh for every check:
- each goal shape and each edge shape (dimensions that are not multiples of any tile size)
  gives the reference result within a dtype-aware tolerance, for several input distributions
  (normal, uniform with large magnitude, values near the dtype's limits, constant rows, sparse);
- no output element is left untouched (outputs are pre-filled with NaN) and nothing is written
  around the output (guard canaries) or into the inputs;
- there is no NaN or Inf where the reference is finite;
- two runs on the same input give bit-identical results (determinism).

The reference is computed in float64 from the very float32 inputs the kernel saw. A failing
check is returned as a case (shape, distribution, seed) that reproduces it exactly, so it can
join the goal's validation set.

Backends plug in through a runner: `runner(inputs, guarded_output)` runs the kernel on host
arrays and leaves the result (and whatever it did to the guards) in `guarded_output.buffer`.
A CPU runner passes pointers straight in; a GPU runner copies the whole guarded buffer to the
device, launches on the interior, and copies it back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

import numpy as np

DISTRIBUTIONS = ("normal", "uniform_large", "near_limits", "constant_rows", "sparse")
GUARD_ELEMENTS = 256  # canary elements before and after every output
_CANARY_BITS = np.uint32(0x7FA5A5A5)  # a signalling-NaN payload no kernel computes by accident
_NAN_BITS = np.uint32(0x7FC00000)

DEFAULT_RTOL = {"float32": 1e-5, "float64": 1e-12, "float16": 2e-3, "bfloat16": 1.6e-2}
DEFAULT_ATOL = {"float32": 1e-30, "float64": 1e-300, "float16": 1e-6, "bfloat16": 1e-6}


class VerifiableOperator(Protocol):
    name: str
    ndim: int
    tile_params: tuple[str, ...]

    def input_shapes(self, shape: tuple[int, ...]) -> dict[str, tuple[int, ...]]: ...
    def output_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]: ...
    def reference(self, inputs: dict[str, np.ndarray]) -> np.ndarray: ...
    def error_scale(self, inputs: dict[str, np.ndarray], ref: np.ndarray) -> np.ndarray: ...
    def near_limit_magnitude(self, shape: tuple[int, ...]) -> float: ...
    def rtol_growth(self, shape: tuple[int, ...]) -> float: ...


Runner = Callable[[dict[str, np.ndarray], "GuardedOutput"], None]


@dataclass
class CheckCase:
    """One verification input: reproducible from (shape, distribution, seed)."""

    shape: list[int]
    distribution: str
    seed: int
    origin: str = "goal"  # goal | edge | validation | timing

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckCase:
        dist = data.get("distribution", "normal")
        if dist not in DISTRIBUTIONS:
            dist = "normal"
        return cls(shape=[int(d) for d in data["shape"]], distribution=dist,
                   seed=int(data.get("seed", 0)), origin="validation")

    def identity(self) -> tuple:
        return (tuple(self.shape), self.distribution, self.seed)


@dataclass
class Tolerance:
    rtol: float
    atol: float


@dataclass
class VerifyFailure:
    problem: str
    case: CheckCase
    check: str  # verify | determinism | reverify
    corrupted_memory: bool = False  # guards or inputs overwritten: the process is suspect

    def failing_case(self, operator: str) -> dict[str, Any]:
        return {**self.case.to_dict(), "operator": operator, "check": self.check,
                "problem": self.problem}


# ---- inputs -------------------------------------------------------------------------------
def draw(shape: tuple[int, ...], distribution: str, rng: np.random.Generator, dtype: np.dtype,
         limit: float) -> np.ndarray:
    """One input array of the given distribution (the last axis is a 'row')."""
    if distribution == "normal":
        a = rng.standard_normal(shape)
    elif distribution == "uniform_large":
        big = min(1e4, limit)
        a = rng.uniform(-big, big, shape)
    elif distribution == "near_limits":
        a = rng.choice([-1.0, 1.0], shape) * limit * rng.uniform(0.5, 1.0, shape)
        tiny = rng.random(shape) < 0.1  # some values near the smallest normal number
        a[tiny] = float(np.finfo(dtype).tiny) * rng.uniform(1.0, 8.0, int(tiny.sum()))
    elif distribution == "constant_rows":
        lead = shape[:-1] if len(shape) > 1 else ()
        values = rng.standard_normal(lead) * 3.0
        if values.ndim:
            values.reshape(-1)[::4] = 0.0  # every fourth row all zeros
        a = np.broadcast_to(np.asarray(values)[..., None] if values.ndim else values, shape).copy()
    elif distribution == "sparse":
        a = rng.standard_normal(shape)
        a[rng.random(shape) < 0.5] = 0.0
    else:
        raise ValueError(f"unknown input distribution {distribution!r}")
    return np.ascontiguousarray(a.astype(dtype))


def make_inputs(op: VerifiableOperator, case: CheckCase, dtype: str = "float32") -> dict[str, np.ndarray]:
    rng = np.random.default_rng(case.seed)
    shape = tuple(case.shape)
    limit = op.near_limit_magnitude(shape)
    return {name: draw(s, case.distribution, rng, np.dtype(dtype), limit)
            for name, s in op.input_shapes(shape).items()}


def refill_inputs(op: VerifiableOperator, inputs: dict[str, np.ndarray], case: CheckCase,
                  dtype: str = "float32") -> None:
    """Write fresh values into existing input buffers (same addresses: catches kernels that
    cache results keyed on the input pointer)."""
    fresh = make_inputs(op, case, dtype)
    for name, arr in inputs.items():
        np.copyto(arr, fresh[name])


# ---- guarded outputs ----------------------------------------------------------------------
class GuardedOutput:
    """An output array pre-filled with NaN, between two runs of canary elements."""

    def __init__(self, shape: tuple[int, ...], dtype: str = "float32",
                 guard: int = GUARD_ELEMENTS) -> None:
        if np.dtype(dtype).itemsize != 4:
            raise ValueError("guarded outputs are implemented for 4-byte dtypes")
        self.shape, self.dtype, self.guard = tuple(shape), np.dtype(dtype), guard
        self.size = int(np.prod(shape))
        self.buffer = np.empty(self.size + 2 * guard, dtype=self.dtype)
        self.reset()

    def reset(self, fill_bits: np.uint32 = _NAN_BITS) -> None:
        bits = self.buffer.view(np.uint32)
        bits[:] = _CANARY_BITS
        bits[self.guard:self.guard + self.size] = fill_bits

    def fill(self, values: np.ndarray) -> None:
        """Pre-fill the interior with arbitrary values (determinism check)."""
        self.buffer[self.guard:self.guard + self.size] = values.reshape(-1)

    @property
    def view(self) -> np.ndarray:
        return self.buffer[self.guard:self.guard + self.size].reshape(self.shape)

    def guards_intact(self) -> bool:
        bits = self.buffer.view(np.uint32)
        return bool(np.all(bits[:self.guard] == _CANARY_BITS)
                    and np.all(bits[self.guard + self.size:] == _CANARY_BITS))


# ---- planning -----------------------------------------------------------------------------
def tolerance_for(op: VerifiableOperator, shape: Sequence[int], dtype: str,
                  rtol: float | None = None, atol: float | None = None) -> Tolerance:
    growth = op.rtol_growth(tuple(shape))
    return Tolerance(rtol=rtol if rtol is not None else DEFAULT_RTOL.get(dtype, 1e-5) * growth,
                     atol=atol if atol is not None else DEFAULT_ATOL.get(dtype, 1e-30))


def edge_shapes(op: VerifiableOperator, goal_shapes: Sequence[Sequence[int]],
                params: dict[str, list]) -> list[list[int]]:
    """Shapes whose dimensions are not multiples of any tile size: one tiny (smaller than any
    tile), one just past the largest tile, both capped by the goal's own dimensions."""
    tiles = sorted({int(v) for p in op.tile_params for v in params.get(p, [])
                    if isinstance(v, int) and v > 1})

    def not_multiple(start: int) -> int:
        d = max(1, start)
        while any(d % t == 0 for t in tiles):
            d += 1
        return d

    biggest = tiles[-1] if tiles else 8
    small = [not_multiple(p) for p in (3, 5, 7, 11)][:op.ndim]
    large = [not_multiple(biggest + 3 + 2 * i) for i in range(op.ndim)]
    shapes = [small, large]
    if goal_shapes:  # the goal's shape nudged off every tile multiple (capped: verification
        # at full size is already done on the goal shape itself)
        nudged = [not_multiple(min(d, 4 * biggest) - 1) if d > 2 else not_multiple(d)
                  for d in goal_shapes[0]]
        shapes.append(nudged)
    out: list[list[int]] = []
    for s in shapes:
        if s not in out and list(s) not in [list(g) for g in goal_shapes]:
            out.append(s)
    return out


def plan_checks(op: VerifiableOperator, goal_shapes: Sequence[Sequence[int]], params: dict[str, list],
                validation_cases: Sequence[dict[str, Any]] = (), seed: int = 0,
                goal_distributions: int = 2) -> list[CheckCase]:
    """Validation cases first (they have failed before), then every goal shape with a few
    distributions, then edge shapes with all of them. Seeds are fresh per check."""
    rng = np.random.default_rng(seed)
    cases: list[CheckCase] = []
    seen: set[tuple] = set()
    for data in validation_cases:
        try:
            case = CheckCase.from_dict(data)
        except (KeyError, TypeError, ValueError):
            continue  # a malformed stored case is skipped, never fatal
        if len(case.shape) == op.ndim and case.identity() not in seen:
            seen.add(case.identity())
            cases.append(case)
    rotation = int(rng.integers(len(DISTRIBUTIONS)))
    for shape in goal_shapes:
        dists = ["normal"] + [DISTRIBUTIONS[(rotation + i) % (len(DISTRIBUTIONS) - 1) + 1]
                              for i in range(goal_distributions - 1)]
        for dist in dists:
            cases.append(CheckCase(list(shape), dist, int(rng.integers(2**31)), "goal"))
    for i, shape in enumerate(edge_shapes(op, goal_shapes, params)):
        # Tiny and just-past-a-tile shapes are cheap: every distribution. The nudged goal
        # shape costs as much as the goal's own: the goal's share of distributions.
        dists = DISTRIBUTIONS if i < 2 else ("normal", DISTRIBUTIONS[1 + rotation % 4])
        for dist in dists:
            cases.append(CheckCase(list(shape), dist, int(rng.integers(2**31)), "edge"))
    return cases


# ---- checking -----------------------------------------------------------------------------
def compare(op: VerifiableOperator, inputs: dict[str, np.ndarray], out: np.ndarray,
            tol: Tolerance) -> str | None:
    """None when `out` matches the float64 reference; otherwise what is wrong."""
    x64 = {k: v.astype(np.float64) for k, v in inputs.items()}
    with np.errstate(all="ignore"):
        ref = op.reference(x64)
        scale = op.error_scale(x64, ref)
    got = out.astype(np.float64)
    finite_ref = np.isfinite(ref)
    nan = np.isnan(got) & finite_ref
    if nan.any():
        idx = tuple(int(i) for i in np.argwhere(nan)[0])
        return (f"{int(nan.sum())} of {got.size} outputs are NaN (never written, or invalid "
                f"arithmetic); first at {idx}")
    inf = np.isinf(got) & finite_ref
    if inf.any():
        idx = tuple(int(i) for i in np.argwhere(inf)[0])
        return f"{int(inf.sum())} of {got.size} outputs are infinite where the reference is finite; first at {idx}"
    with np.errstate(all="ignore"):
        err = np.abs(got - ref)
        bad = ~(err <= tol.atol + tol.rtol * scale) & finite_ref
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(np.where(bad, err, -1))), got.shape))
        return (f"{int(bad.sum())} of {got.size} outputs outside tolerance (rtol {tol.rtol:.2e}, "
                f"atol {tol.atol:.1e}); first at {idx}: got {got[idx]!r}, expected {ref[idx]!r}; "
                f"worst at {worst}: got {got[worst]!r}, expected {ref[worst]!r}")
    return None


def run_check(op: VerifiableOperator, runner: Runner, inputs: dict[str, np.ndarray],
              out: GuardedOutput, tol: Tolerance) -> tuple[str | None, bool]:
    """Run once on `inputs` into `out` (reset to NaN); (problem, memory_corrupted)."""
    saved = {k: v.copy() for k, v in inputs.items()}
    out.reset()
    runner(inputs, out)
    if not out.guards_intact():
        return "wrote outside the output (guard canaries overwritten)", True
    for name, before in saved.items():
        if not np.array_equal(before.view(np.uint32), inputs[name].view(np.uint32)):
            return f"wrote into input {name!r}", True
    return compare(op, inputs, out.view, tol), False


def verify(op: VerifiableOperator, runner: Runner, cases: Sequence[CheckCase], dtype: str = "float32",
           rtol: float | None = None, atol: float | None = None,
           determinism: bool = True) -> VerifyFailure | None:
    """Check every case on fresh inputs and fresh outputs; then the determinism check on the
    first edge (or smallest) case. None when everything passed."""
    for case in cases:
        inputs = make_inputs(op, case, dtype)
        out = GuardedOutput(op.output_shape(tuple(case.shape)), dtype)
        tol = tolerance_for(op, case.shape, dtype, rtol, atol)
        problem, corrupted = run_check(op, runner, inputs, out, tol)
        if problem:
            return VerifyFailure(problem, case, "verify", corrupted)
    if determinism and cases:
        case = min(cases, key=lambda c: int(np.prod(c.shape)))
        problem = check_determinism(op, runner, case, dtype)
        if problem:
            return VerifyFailure(problem, case, "determinism")
    return None


def check_determinism(op: VerifiableOperator, runner: Runner, case: CheckCase,
                      dtype: str = "float32") -> str | None:
    """Two runs on the same input, the second into an output pre-filled with garbage instead
    of NaN, must agree bit for bit (catches reads of stale or uninitialised memory)."""
    inputs = make_inputs(op, case, dtype)
    first = GuardedOutput(op.output_shape(tuple(case.shape)), dtype)
    runner(inputs, first)
    second = GuardedOutput(op.output_shape(tuple(case.shape)), dtype)
    garbage = np.random.default_rng(case.seed + 1).uniform(-1e3, 1e3, second.size).astype(dtype)
    second.fill(garbage)
    runner(inputs, second)
    a, b = first.view.view(np.uint32), second.view.view(np.uint32)
    if not np.array_equal(a, b):
        n = int((a != b).sum())
        return f"not deterministic: {n} of {a.size} outputs differ between two runs on the same input"
    return None
