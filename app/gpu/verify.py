"""The verification protocol shared by every compiling backend (NumPy on the CPU, CuPy on the GPU:
every function takes the array module `xp`).

A candidate is correct only if, on inputs drawn fresh for every check:
- each goal shape and each edge shape (dimensions that are not multiples of any tile size)
  gives the reference result within a dtype-aware tolerance, for several input distributions;
- no output element is left untouched (outputs are pre-filled with NaN) and nothing is written
  around any output (guard canaries) or into the inputs;
- there is no NaN or Inf where the reference is finite;
- two runs on the same input give bit-identical results (determinism, where the operator
  promises it).

The reference is computed in float64 from the very inputs the kernel saw (converted from their
storage dtype). A failing check is returned as a case (shape, distribution, seed) that
reproduces it exactly, so it can join the goal's validation set.

Backends plug in through a runner: `runner(inputs, outputs, shape)` runs the kernel on arrays of
`xp` and leaves the results (and whatever it did to the guards) in each output's buffer; a GPU
runner synchronises before it returns.

Tolerances: ONE table per dtype (app.catalog.protocol.RTOL). The rtol used is the table's value times the
operator's `rtol_growth(shape, dtype)` (accumulation error that grows with the reduction length,
fast intrinsics), and the operator's `atol` (absolute floor for outputs that are near zero by
construction); the goal may override either.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from app.catalog import families
from app.catalog.protocol import (
    DISTRIBUTIONS,
    RTOL,
    Operator,
    bits_dtype,
    from_storage,
    nan_bits,
    storage_dtype,
    to_storage,
)

GUARD_ELEMENTS = 256  # canary elements before and after every output
_CANARY = {2: 0x7FA5, 4: 0x7FA5A5A5, 8: 0x7FA5A5A5A5A5A5A5}  # NaN payloads no kernel computes

Runner = Callable[[dict[str, Any], dict[str, "GuardedOutput"], tuple[int, ...]], None]


@dataclass
class CheckCase:
    """One verification input: reproducible from (shape, distribution, seed). `distribution`
    is one of the operator's own or an input family (app.catalog.families); `family` names a
    shape family ("tiny", "prime") for a case planted at such a shape."""

    shape: list[int]
    distribution: str
    seed: int
    origin: str = "goal"  # goal | edge | validation | timing | reverify
    family: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any], distributions: Sequence[str] = DISTRIBUTIONS) -> CheckCase:
        dist = data.get("distribution", "normal")
        if dist not in distributions:
            dist = "normal"
        return cls(shape=[int(d) for d in data["shape"]], distribution=dist,
                   seed=int(data.get("seed", 0)), origin="validation",
                   family=str(data.get("family", "") or ""))

    def identity(self) -> tuple:
        return (tuple(self.shape), self.distribution, self.seed)


class ValidationSet:
    """The goal's validation cases on the engine side: cases that broke a candidate, checked
    first for every later one. Thread-safe (agents evaluate in parallel), deduplicated."""

    def __init__(self, cases: Iterable[dict[str, Any]] = ()) -> None:
        self._lock = threading.Lock()
        self._cases: list[dict[str, Any]] = []
        self._ids: set[tuple] = set()
        for case in cases:
            self.add(case)

    def add(self, case: dict[str, Any]) -> None:
        try:
            ident = (tuple(case["shape"]), case.get("distribution"), case.get("seed"))
        except (KeyError, TypeError):
            return  # a malformed case is never fatal
        with self._lock:
            if ident not in self._ids:
                self._ids.add(ident)
                self._cases.append(dict(case))

    def cases(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._cases)


@dataclass
class Tolerance:
    rtol: float
    atol: float


@dataclass
class VerifyFailure:
    problem: str
    case: CheckCase
    check: str  # verify | determinism | repeat | reverify
    corrupted_memory: bool = False  # guards or inputs overwritten: the process is suspect

    def failing_case(self, operator: str, dtype: str) -> dict[str, Any]:
        return {**self.case.to_dict(), "operator": operator, "dtype": dtype, "check": self.check,
                "problem": self.problem}


# ---- inputs -------------------------------------------------------------------------------
def make_inputs(xp: Any, op: Operator, case: CheckCase, dtype: str) -> dict[str, Any]:
    """The case's inputs: the operator's own distribution, or an input family drawn per
    argument on top of the operator's own draw (app.catalog.families)."""
    rng = xp.random.default_rng(int(case.seed))
    if case.distribution not in op.distributions and case.distribution in families.FAMILIES:
        return families.draw_inputs(xp, op, list(case.shape), dtype, rng, case.distribution,
                                    to_storage)
    return op.make_inputs(xp, list(case.shape), dtype, rng, case.distribution)


def refill_inputs(xp: Any, op: Operator, inputs: dict[str, Any], case: CheckCase, dtype: str) -> None:
    """Write fresh values into existing input buffers (same addresses: catches kernels that
    cache results keyed on the input pointer)."""
    fresh = make_inputs(xp, op, case, dtype)
    for name, arr in inputs.items():
        arr[...] = fresh[name]


# ---- guarded outputs ----------------------------------------------------------------------
class GuardedOutput:
    """An output array pre-filled with NaN, between two runs of canary elements. Works for
    4-byte and 2-byte dtypes (bfloat16 as uint16 bits); `view` is what the kernel writes."""

    def __init__(self, xp: Any, shape: Sequence[int], dtype: str = "float32",
                 guard: int = GUARD_ELEMENTS) -> None:
        self.xp, self.shape, self.dtype, self.guard = xp, tuple(int(d) for d in shape), dtype, guard
        self.size = int(np.prod(self.shape))
        self.buffer = xp.empty(self.size + 2 * guard, dtype=storage_dtype(dtype))
        bits = bits_dtype(dtype)
        self.bits = self.buffer.view(bits)
        self.canary = bits.type(_CANARY[bits.itemsize])
        self.reset()

    def reset(self) -> None:
        self.bits[:self.guard] = self.canary
        self.bits[self.guard + self.size:] = self.canary
        self.bits[self.guard:self.guard + self.size] = bits_dtype(self.dtype).type(nan_bits(self.dtype))

    def fill(self, values: Any) -> None:
        """Pre-fill the interior with arbitrary storage values (determinism check)."""
        self.buffer[self.guard:self.guard + self.size] = values.reshape(-1)

    @property
    def view(self) -> Any:
        return self.buffer[self.guard:self.guard + self.size].reshape(self.shape)

    def guards_intact(self) -> bool:
        return bool((self.bits[:self.guard] == self.canary).all()) and \
            bool((self.bits[self.guard + self.size:] == self.canary).all())


def make_outputs(xp: Any, op: Operator, shape: Sequence[int], dtype: str) -> dict[str, GuardedOutput]:
    dtypes = op.output_dtypes(dtype)  # e.g. a custom kernel's integer outputs
    return {name: GuardedOutput(xp, s, dtypes.get(name, dtype))
            for name, s in op.output_shapes(list(shape)).items()}


# ---- planning -----------------------------------------------------------------------------
def tolerance_for(op: Operator, shape: Sequence[int], dtype: str, rtol: float | None = None,
                  atol: float | None = None) -> Tolerance:
    """The table's rtol for `dtype` times the operator's growth; the goal may override."""
    r = rtol if rtol is not None else RTOL[dtype] * op.rtol_growth(list(shape), dtype)
    a = atol if atol is not None else op.atol(list(shape), dtype, r)
    return Tolerance(rtol=r, atol=a)


def plan_checks(op: Operator, goal_shapes: Sequence[Sequence[int]], params: dict[str, list],
                dtype: str = "float32", validation_cases: Sequence[dict[str, Any]] = (),
                seed: int = 0, goal_distributions: int = 2) -> list[CheckCase]:
    """Validation cases first (they have failed before), then every goal shape with a few
    distributions (rotating over the operator's own and its input families), then edge shapes:
    the two small ones with every distribution the operator accepts, the others (as costly as
    a goal shape) with the goal's share; then the shape families (every dimension 1, primes
    within the goal's dimensions). Every input family that applies (app.catalog.families) is
    checked at the first edge shape and at the prime one (both cheap); your own kernel, which
    has no edge shapes, gets them at its goal shapes. Fresh seeds."""
    rng = np.random.default_rng(seed)
    own = tuple(op.distributions)
    dists = own + tuple(f for f in families.for_operator(op, dtype) if f not in own)
    cases: list[CheckCase] = []
    seen: set[tuple] = set()
    for data in validation_cases:
        try:
            case = CheckCase.from_dict(data, dists)
        except (KeyError, TypeError, ValueError):
            continue  # a malformed stored case is skipped, never fatal
        if data.get("dtype", dtype) != dtype or op.check_shape(case.shape, dtype) is not None:
            continue
        if case.identity() not in seen:
            seen.add(case.identity())
            cases.append(case)
    others = dists[1:] or dists
    rotation = int(rng.integers(len(others)))
    if not op.inputs_vary:
        # every input is stored or fixed: more draws would check the very same inputs again
        goal_distributions = 1
    edges = [s for s in op.edge_shapes(goal_shapes, dtype, params)
             if op.check_shape(s, dtype) is None]
    fams = dists[len(own):]
    for shape in goal_shapes:
        picks = ["normal"] + [others[(rotation + i) % len(others)]
                              for i in range(goal_distributions - 1)]
        if not edges and goal_distributions > 1:
            picks += [d for d in dists if d not in picks]  # no small shape to check them on
        for dist in picks:
            cases.append(CheckCase(list(shape), dist, int(rng.integers(2**31)), "goal"))
    planned = [list(g) for g in goal_shapes] + [list(s) for s in edges]
    shaped = {name: s for name, s in families.family_shapes(op, goal_shapes).items()
              if s not in planned and op.check_shape(s, dtype) is None}
    # every family at the first (smallest) edge shape and at the prime shape: both cheap
    homes = [0] + ([] if "prime" in shaped else [1])
    for i, shape in enumerate(edges):
        picks = own if i < 2 else ("normal", others[rotation % len(others)])
        for dist in (*picks, *(fams if i in homes else ())):
            cases.append(CheckCase(list(shape), dist, int(rng.integers(2**31)), "edge"))
    for name, shape in shaped.items():
        for dist in ("normal",) if name == "tiny" else ("normal", *fams):
            cases.append(CheckCase(list(shape), dist, int(rng.integers(2**31)), "edge",
                                   name if dist == "normal" else ""))
    return cases


def shapes_of(goal_shapes: Sequence[Sequence[int]], cases: Sequence[CheckCase]) -> list[list[int]]:
    """Every distinct shape a candidate runs (goal shapes first): what a backend that
    specialises per shape must build."""
    out: list[list[int]] = []
    for s in [list(g) for g in goal_shapes] + [list(c.shape) for c in cases]:
        if s not in out:
            out.append(s)
    return out


# ---- checking -----------------------------------------------------------------------------
def _first(xp: Any, mask: Any) -> tuple[int, ...]:
    return tuple(int(i) for i in xp.argwhere(mask)[0])


CHUNK = 1 << 20  # elements compared at a time on the host: the temporaries stay in cache


def compare(xp: Any, op: Operator, inputs: dict[str, Any], outputs: dict[str, Any],
            shape: Sequence[int], dtype: str, tol: Tolerance) -> str | None:
    """None when every output (storage arrays by name) matches the float64 reference."""
    known = op.stored_reference(xp, inputs, list(shape))  # answers that do not depend on the check
    if known is not None:
        ref, scale = known
    else:
        x64 = {k: from_storage(xp, v, dtype) for k, v in inputs.items()}
        with np.errstate(all="ignore"):
            ref = op.reference(xp, x64, list(shape))
            scale = op.error_scale(xp, x64, ref, list(shape))
    out_dtypes = op.output_dtypes(dtype)  # outputs stored in their own dtype
    judge = op.judge_output  # an operator's own (norm-based) error measure, or None
    exact = known is None and families.is_movement(op, xp, x64, ref)
    for name, expected in ref.items():
        out_dtype = out_dtypes.get(name, dtype)
        if exact and out_dtype in families.FLOAT_DTYPES:
            problem = _compare_bits(xp, name, outputs[name], expected, out_dtype, op.custom)
            if problem:
                return problem
            continue
        if judge is None and xp is np and outputs[name].size > CHUNK:
            problem = _compare_chunked(name, outputs[name], out_dtype, expected, scale[name], tol,
                                       op)
            if problem:
                return problem
            continue
        got = from_storage(xp, outputs[name], out_dtype)
        finite = xp.isfinite(expected)
        nan = xp.isnan(got) & finite
        n_nan = int(nan.sum())
        if n_nan:
            return _nan_problem(name, n_nan, got.size, _first(xp, nan))
        inf = xp.isinf(got) & finite
        n_inf = int(inf.sum())
        if n_inf:
            return _inf_problem(name, n_inf, got.size, _first(xp, inf))
        if judge is not None:  # e.g. a recurrence judged per head by relative Frobenius norm
            problem = judge(xp, name, got, expected, list(shape), dtype, tol)
            if problem:
                return problem
            continue
        with np.errstate(all="ignore"):
            err = xp.abs(got - expected)
            bad = ~(err <= tol.atol + tol.rtol * scale[name]) & finite
        n_bad = int(bad.sum())
        if n_bad:
            idx = _first(xp, bad)
            worst = tuple(int(i) for i in np.unravel_index(int(xp.argmax(xp.where(bad, err, -1.0))),
                                                           got.shape))
            return _bad_problem(name, n_bad, got.size, _told(op, name, expected, tol),
                                (idx, float(got[idx]), float(expected[idx])),
                                (worst, float(got[worst]), float(expected[worst])))
    return None


def _compare_bits(xp: Any, name: str, got: Any, expected: Any, dtype: str,
                  custom: bool = False) -> str | None:
    """A data-movement output against its reference bit for bit: denormals, the sign of zero,
    infinities and NaN payloads are copied, never rounded or flushed. (Your own kernel's
    output whose reference is NaN throughout is one its goal does not check.)"""
    if custom and expected.size and bool(xp.isnan(expected).all()):
        return None
    bits = bits_dtype(dtype)
    want = to_storage(xp, expected, dtype).view(bits)
    have = xp.ascontiguousarray(got).view(bits)
    bad = have != want
    n_bad = int(bad.sum())
    if not n_bad:
        return None
    values = from_storage(xp, xp.ascontiguousarray(got), dtype)
    nan = xp.isnan(values) & ~xp.isnan(expected)  # never written: the usual message
    if bool(nan.any()):
        return _nan_problem(name, int(nan.sum()), got.size, _first(xp, nan))
    idx = _first(xp, bad)
    width = 2 * bits.itemsize
    return (f"{n_bad} of {got.size} outputs of {name!r} outside tolerance (bit for bit: a "
            "data-movement operator copies exactly, denormals and the sign of zero included); "
            f"first at {idx}: got {float(values[idx])!r} (0x{int(have[idx]):0{width}x}), "
            f"expected {float(expected[idx])!r} (0x{int(want[idx]):0{width}x})")


def _nan_problem(name: str, n: int, size: int, first: tuple[int, ...]) -> str:
    return (f"{n} of {size} outputs of {name!r} are NaN (never written, or invalid "
            f"arithmetic); first at {first}")


def _inf_problem(name: str, n: int, size: int, first: tuple[int, ...]) -> str:
    return (f"{n} of {size} outputs of {name!r} are infinite where the reference is "
            f"finite; first at {first}")


def _told(op: Any, name: str, expected: Any, tol: Tolerance) -> str:
    """The tolerance a message names: a custom kernel's own per output (its rtol/atol here are
    normalised to 1 and 0), else the one checked against."""
    return op.tolerance_text(name, expected) or f"rtol {tol.rtol:.2e}, atol {tol.atol:.1e}"


def _bad_problem(name: str, n: int, size: int, told: str, first: tuple, worst: tuple) -> str:
    return (f"{n} of {size} outputs of {name!r} outside tolerance ({told}); "
            f"first at {first[0]}: got {first[1]!r}, "
            f"expected {first[2]!r}; worst at {worst[0]}: got {worst[1]!r}, "
            f"expected {worst[2]!r}")


def _compare_chunked(name: str, stored: np.ndarray, dtype: str, expected: np.ndarray,
                     scale: np.ndarray, tol: Tolerance, op: Any = None) -> str | None:
    """compare() for one large host output, CHUNK elements at a time: the same verdict and the
    same message as on whole arrays, without a dozen full-size float64 temporaries (on a 75 M
    element output those cost seconds per check)."""
    got_flat, exp_flat = stored.reshape(-1), expected.reshape(-1)
    scale_flat = np.broadcast_to(scale, expected.shape).reshape(-1)
    counts = {"nan": 0, "inf": 0, "bad": 0}
    firsts: dict[str, int] = {}
    worst_i, worst_err = -1, -1.0
    for lo in range(0, got_flat.size, CHUNK):
        hi = min(lo + CHUNK, got_flat.size)
        got = from_storage(np, got_flat[lo:hi], dtype)
        exp = exp_flat[lo:hi]
        finite = np.isfinite(exp)
        with np.errstate(all="ignore"):
            err = np.abs(got - exp)
            masks = {"nan": np.isnan(got) & finite, "inf": np.isinf(got) & finite,
                     "bad": ~(err <= tol.atol + tol.rtol * scale_flat[lo:hi]) & finite}
        for kind, mask in masks.items():
            n = int(np.count_nonzero(mask))
            if n:
                counts[kind] += n
                firsts.setdefault(kind, lo + int(np.argmax(mask)))
        if counts["bad"] and not counts["nan"] and not counts["inf"]:
            where = np.where(masks["bad"], err, -1.0)
            k = int(np.argmax(where))
            if where[k] > worst_err:
                worst_i, worst_err = lo + k, float(where[k])
    shape = expected.shape

    def at(i: int) -> tuple[int, ...]:
        return tuple(int(x) for x in np.unravel_index(i, shape))

    size = int(got_flat.size)
    if counts["nan"]:
        return _nan_problem(name, counts["nan"], size, at(firsts["nan"]))
    if counts["inf"]:
        return _inf_problem(name, counts["inf"], size, at(firsts["inf"]))
    if counts["bad"]:
        def value(i: int) -> float:
            return float(from_storage(np, got_flat[i:i + 1], dtype)[0])

        first, worst = firsts["bad"], worst_i
        return _bad_problem(name, counts["bad"], size, _told(op, name, expected, tol),
                            (at(first), value(first), float(exp_flat[first])),
                            (at(worst), value(worst), float(exp_flat[worst])))
    return None


def _same_bits(xp: Any, a: Any, b: Any) -> bool:
    bits = {1: xp.uint8, 2: xp.uint16, 4: xp.uint32, 8: xp.uint64}[a.dtype.itemsize]
    return bool(xp.array_equal(a.view(bits), b.view(bits)))


def run_check(xp: Any, op: Operator, runner: Runner, inputs: dict[str, Any],
              outputs: dict[str, GuardedOutput], shape: Sequence[int], dtype: str,
              tol: Tolerance) -> tuple[str | None, bool]:
    """Run once on `inputs` into `outputs` (reset to NaN); (problem, memory_corrupted). A
    runner whose kernel cannot reach the inputs (`inputs_protected`: the cpu kernel host gets
    copies) skips the copy that checks them."""
    protected = getattr(runner, "inputs_protected", False)
    saved = {} if protected else {k: v.copy() for k, v in inputs.items()}
    for out in outputs.values():
        out.reset()
    runner(inputs, outputs, tuple(shape))
    for name, out in outputs.items():
        if not out.guards_intact():
            return f"wrote outside output {name!r} (guard canaries overwritten)", True
    for name, before in saved.items():
        if not _same_bits(xp, before, inputs[name]):
            return f"wrote into input {name!r}", True
    return compare(xp, op, inputs, {k: v.view for k, v in outputs.items()}, shape, dtype, tol), False


def verify(xp: Any, op: Operator, runner: Runner, cases: Sequence[CheckCase], dtype: str = "float32",
           rtol: float | None = None, atol: float | None = None,
           determinism: bool | None = None) -> VerifyFailure | None:
    """Check every case on fresh inputs and fresh outputs; then the determinism check on the
    smallest case (its verified run is the first of the two). None when everything passed."""
    deterministic = (op.deterministic if determinism is None else determinism) and bool(cases)
    # not a shape family's: one element says little about reads of stale memory
    pool = [c for c in cases if not c.family] or list(cases)
    smallest = min(pool, key=lambda c: int(np.prod(c.shape))) if deterministic else None
    first: tuple[dict[str, Any], dict[str, GuardedOutput]] | None = None
    for case in cases:
        inputs = make_inputs(xp, op, case, dtype)
        outputs = make_outputs(xp, op, case.shape, dtype)
        tol = tolerance_for(op, case.shape, dtype, rtol, atol)
        problem, corrupted = run_check(xp, op, runner, inputs, outputs, case.shape, dtype, tol)
        if problem:
            if case.family:  # the message names the family that found it
                problem = f"{problem} [{case.family} shape]"
            return VerifyFailure(problem, case, "verify", corrupted)
        if case is smallest:
            first = (inputs, outputs)
    if smallest is not None:
        problem = check_determinism(xp, op, runner, smallest, dtype, first)
        if problem:
            return VerifyFailure(problem, smallest, "determinism")
    return _repeat(xp, op, runner, pool, dtype, rtol, atol)


REPEATS = 32  # extra calls on the smallest case: a race that strikes one call in N shows up


def _repeat(xp: Any, op: Operator, runner: Runner, pool: Sequence[CheckCase], dtype: str,
            rtol: float | None, atol: float | None) -> VerifyFailure | None:
    """The smallest case again, REPEATS times against the reference: a kernel whose result
    depends on the threads' schedule (a lost update in a reduction) passes one call and fails
    the next; each call is cheap at this size."""
    if not pool:
        return None
    case = min(pool, key=lambda c: int(np.prod(c.shape)))
    inputs = make_inputs(xp, op, case, dtype)
    tol = tolerance_for(op, case.shape, dtype, rtol, atol)
    for i in range(REPEATS):
        outputs = make_outputs(xp, op, case.shape, dtype)
        problem, corrupted = run_check(xp, op, runner, inputs, outputs, case.shape, dtype, tol)
        if problem:
            return VerifyFailure(f"{problem} (on call {i + 2} of the same input: the result "
                                 "depends on the schedule)", case, "repeat", corrupted)
    return None


def check_determinism(xp: Any, op: Operator, runner: Runner, case: CheckCase,
                      dtype: str = "float32",
                      verified: tuple[dict[str, Any], dict[str, GuardedOutput]] | None = None
                      ) -> str | None:
    """Two runs on the same input, the second into outputs pre-filled with garbage instead of
    NaN, must agree bit for bit (catches reads of stale or uninitialised memory). `verified`:
    the inputs and NaN-filled outputs of a run just verified on this case, as the first run
    (its inputs were checked unchanged by it)."""
    if verified is not None:
        inputs, first = verified
    else:
        inputs = make_inputs(xp, op, case, dtype)
        first = make_outputs(xp, op, case.shape, dtype)
        runner(inputs, first, tuple(case.shape))
    second = make_outputs(xp, op, case.shape, dtype)
    rng = xp.random.default_rng(int(case.seed) + 1)
    for out in second.values():
        out.fill(to_storage(xp, rng.uniform(-1e3, 1e3, out.shape), dtype))
    runner(inputs, second, tuple(case.shape))
    for name in first:
        a, b = first[name].view, second[name].view
        if not _same_bits(xp, a, b):
            bits = {2: xp.uint16, 4: xp.uint32, 8: xp.uint64}[a.dtype.itemsize]
            n = int((a.view(bits) != b.view(bits)).sum())
            return (f"not deterministic: {n} of {a.size} outputs of {name!r} differ between two "
                    "runs on the same input")
    return None
