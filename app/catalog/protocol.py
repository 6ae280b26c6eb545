"""The one protocol every catalog operator implements (CPU C kernels and CUDA kernels alike),
plus how operator data is stored and drawn.

The verification (app.gpu.verify), the cascade (app.gpu.cascade) and LLM prompt building
(app.llm.spec) read operators only through `Operator` and the optional hooks `OperatorBase`
declares with neutral defaults. Array code takes an array module `xp`
(NumPy on the CPU, CuPy on the GPU), so one reference serves both.

Storage: float32/float16 are stored as themselves; bfloat16 has no NumPy/CuPy dtype
everywhere, so it is stored as uint16 bit patterns (round-to-nearest-even on the way in).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from app.core.space import SearchSpace

Shape = tuple[int, ...]

# Every input distribution any operator may ask for; an operator lists the ones it accepts.
DISTRIBUTIONS = ("normal", "uniform", "uniform_large", "offset", "wide", "small", "near_limits",
                 "constant_rows", "sparse")

# Output rounding dominates: float32 ~6e-8, float16 2^-11, bfloat16 2^-8 relative (half an ulp),
# with headroom for a different summation order than the float64 reference. (app.gpu.verify
# applies it; operators that budget their tolerance against it read it here.)
RTOL = {"float64": 1e-12, "float32": 1e-5, "float16": 4e-3, "bfloat16": 2e-2}


@runtime_checkable
class Operator(Protocol):
    """What the cascade, the verification and the LLM prompts need from an operator."""

    name: str
    description: str
    shape_doc: str  # how a goal shape reads, e.g. "[M, N, K]"
    language: str  # "c" | "cuda": the language of template_source
    dtypes: tuple[str, ...]
    distributions: tuple[str, ...]  # a subset of DISTRIBUTIONS; the first is "normal"
    deterministic: bool
    # judged by bytes moved (GB/s) rather than FLOPs (GFLOP/s): the objective's unit, the
    # throughput a time becomes, the roof a figure is held to
    memory_bound: bool
    # whether a check's seed changes any input (False: every input stored, seeded or constant)
    inputs_vary: bool
    # inputs the timer must never perturb (a custom goal's fixed or stored inputs)
    fixed_inputs: tuple[str, ...]
    # a few input elements changed before every timed call (app.gpu.timed_slots), so an
    # output cache keyed on the inputs never hits: compute-bound operators, where a cache pays
    perturb_timed_inputs: bool

    def space(self, dtype: str) -> SearchSpace: ...
    def check_shape(self, shape: Sequence[int], dtype: str = "float32") -> str | None: ...
    def input_shapes(self, shape: Sequence[int]) -> dict[str, Shape]: ...
    def output_shapes(self, shape: Sequence[int]) -> dict[str, Shape]: ...
    def make_inputs(self, xp: Any, shape: Sequence[int], dtype: str, rng: Any,
                    distribution: str) -> dict[str, Any]:
        """Inputs in storage dtype, drawn with `rng` (NumPy or CuPy Generator)."""
        ...
    def reference(self, xp: Any, inputs: dict[str, Any], shape: Sequence[int]) -> dict[str, Any]:
        """Float64 outputs (by output name) from float64 inputs."""
        ...
    def error_scale(self, xp: Any, inputs: dict[str, Any], ref: dict[str, Any],
                    shape: Sequence[int]) -> dict[str, Any]:
        """Per output, the magnitude the relative tolerance scales with (usually |ref|)."""
        ...
    def rtol_growth(self, shape: Sequence[int], dtype: str) -> float:
        """Factor on the dtype's table rtol (RTOL above): accumulation error."""
        ...
    def atol(self, shape: Sequence[int], dtype: str, rtol: float) -> float: ...
    def edge_shapes(self, goal_shapes: Sequence[Sequence[int]], dtype: str,
                    params: dict[str, list]) -> list[list[int]]:
        """Shapes that are not multiples of any tile, for verification."""
        ...
    def flops(self, shape: Sequence[int]) -> float: ...
    def bytes_moved(self, shape: Sequence[int], dtype: str = "float32") -> float: ...
    def entry(self, dtype: str) -> str:
        """The symbol the fixed harness calls (C function or CUDA kernel)."""
        ...
    def template_source(self, dtype: str) -> str:
        """The device source an LLM rewrites (parameters arrive as -D macros)."""
        ...

    # The optional hooks (output_dtypes, judge_output, stored_reference, ...) are declared with
    # their defaults on OperatorBase below, which every operator inherits.


class OperatorBase:
    """The optional operator hooks, declared once with neutral defaults: every catalog operator
    (app.catalog.cpu, app.catalog.cuda) and your own kernel (app.catalog.custom) inherits this,
    overrides what it has, and readers call the hooks directly. CUDA-only hooks (render,
    launch, steps, workspaces, ...) live on app.catalog.cuda.base.CudaOperator."""

    # what the operator computes (app.catalog.families: which input families apply); "": none
    meaning: str = ""
    # the inputs that carry the data, those input families redraw (empty: every float input)
    family_args: tuple[str, ...] = ()
    # your own kernel (app.catalog.custom): its families, messages and harness are its own
    custom: bool = False
    # your own kernel's declaration (app.catalog.custom.spec.KernelSpec); None for the catalog's
    spec: Any = None
    # numpy's baseline runs a threaded BLAS (app.gpu.cpu: settle before threaded candidates)
    threaded_baseline: bool = False
    # an operator's own error measure over a whole output, `judge_output(xp, name, got, expected,
    # shape, dtype, tol)` -> a problem or None (e.g. per-head norms for a recurrence); None:
    # each element against atol + rtol * scale
    judge_output: Callable[..., str | None] | None = None

    def output_dtypes(self, dtype: str) -> dict[str, str]:
        """Outputs stored in their own dtype rather than the goal's (none by default)."""
        return {}

    def stored_reference(self, xp: Any, inputs: dict[str, Any], shape: Sequence[int]
                         ) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """(reference, error scale) known without computing them (stored answers); None:
        the caller computes them."""
        return None

    def tolerance_text(self, name: str, expected: Any) -> str | None:
        """An output's own tolerance for a verification message; None: the checked rtol/atol."""
        return None

    def c_argtypes(self) -> list[Any] | None:
        """The ctypes signature of the C entry (your own kernel's declared one); None: the
        catalog's fixed harness signature (output, inputs, `long` dims)."""
        return None


# ---- dtype storage ------------------------------------------------------------------------
_NAN16 = {"float16": 0x7E00, "bfloat16": 0x7FC0}


INT_OUTPUTS = ("int16", "uint16", "int32", "uint32", "int64", "uint64")  # custom kernels' outputs


def storage_dtype(dtype: str) -> np.dtype:
    if dtype in INT_OUTPUTS:
        return np.dtype(dtype)
    return np.dtype({"float32": np.float32, "float64": np.float64, "float16": np.float16,
                     "bfloat16": np.uint16}[dtype])


def bits_dtype(dtype: str) -> np.dtype:
    """The unsigned integer type with the storage's width (bitwise comparisons, canaries)."""
    return np.dtype({2: np.uint16, 4: np.uint32, 8: np.uint64}[storage_dtype(dtype).itemsize])


def nan_bits(dtype: str) -> int:
    """The quiet NaN that pre-fills outputs, as a bit pattern of bits_dtype(dtype)."""
    if dtype in INT_OUTPUTS:  # integers have no NaN: a sentinel no kernel writes by accident
        return {2: 0x7E00, 4: 0x7FC00000, 8: 0x7FF8000000000000}[np.dtype(dtype).itemsize]
    return {"float32": 0x7FC00000, "float64": 0x7FF8000000000000}.get(dtype) or _NAN16[dtype]


def to_storage(xp: Any, values: Any, dtype: str) -> Any:
    """Round float values to `dtype` storage (round-to-nearest-even for bfloat16)."""
    if dtype != "bfloat16":
        return xp.ascontiguousarray(values.astype(storage_dtype(dtype)))
    bits = xp.ascontiguousarray(values.astype(xp.float32)).view(xp.uint32)
    rounded = (bits + xp.uint32(0x7FFF) + ((bits >> xp.uint32(16)) & xp.uint32(1))) >> xp.uint32(16)
    return rounded.astype(xp.uint16)


def from_storage(xp: Any, stored: Any, dtype: str) -> Any:
    """Storage -> float64 values."""
    if dtype != "bfloat16":
        return stored.astype(xp.float64)
    widened = (stored.astype(xp.uint32) << xp.uint32(16)).view(xp.float32)
    # An untouched output still holds the verifier's canary, a signalling NaN: widening it
    # raises the invalid flag, which numpy reports as a warning. It stays NaN, which is what
    # the comparison is there to catch, so the flag says nothing here.
    errstate = getattr(xp, "errstate", None)
    with errstate(invalid="ignore") if errstate is not None else contextlib.nullcontext():
        return widened.astype(xp.float64)


def dtype_limits(dtype: str) -> tuple[float, float]:
    """(largest finite, smallest normal) of a dtype."""
    if dtype == "bfloat16":
        return 3.3895313892515355e38, 1.1754943508222875e-38
    info = np.finfo(storage_dtype(dtype))
    return float(info.max), float(info.tiny)


# ---- input distributions ------------------------------------------------------------------
def draw(xp: Any, rng: Any, shape: Sequence[int], distribution: str, limit: float = 1e4,
         tiny: float = 1.1754943508222875e-38) -> Any:
    """Float64 values of a named distribution (the last axis is a 'row'). `limit` bounds the
    large-magnitude draws; `tiny` is the dtype's smallest normal number."""
    shape = tuple(int(d) for d in shape)
    if distribution == "normal":
        return rng.standard_normal(shape)
    if distribution == "uniform":
        return rng.uniform(-1.0, 1.0, shape)
    if distribution == "uniform_large":
        big = min(1e4, limit)
        return rng.uniform(-big, big, shape)
    if distribution == "offset":  # far from zero: catches kernels that drop the mean or max
        return rng.standard_normal(shape) + 8.0
    if distribution == "wide":  # large magnitudes: overflow and stability
        return rng.standard_normal(shape) * 30.0
    if distribution == "small":
        return rng.standard_normal(shape) * 1e-2
    if distribution == "near_limits":
        sign = xp.where(rng.random(shape) < 0.5, -1.0, 1.0)
        a = sign * limit * rng.uniform(0.5, 1.0, shape)
        # some values near the smallest normal number
        return xp.where(rng.random(shape) < 0.1, tiny * rng.uniform(1.0, 8.0, shape), a)
    if distribution == "constant_rows":
        lead = shape[:-1] if len(shape) > 1 else ()
        values = rng.standard_normal(lead) * 3.0
        if len(lead):
            values.reshape(-1)[::4] = 0.0  # every fourth row all zeros
        return xp.ascontiguousarray(xp.broadcast_to(values[..., None] if len(lead) else values, shape))
    if distribution == "sparse":
        a = rng.standard_normal(shape)
        return xp.where(rng.random(shape) < 0.5, 0.0, a)
    raise ValueError(f"unknown input distribution {distribution!r}")


def tile_edge_shapes(ndim: int, tile_params: Sequence[str], goal_shapes: Sequence[Sequence[int]],
                     params: dict[str, list]) -> list[list[int]]:
    """Shapes whose dimensions are not multiples of any tile size: one tiny (smaller than any
    tile), one just past the largest tile, and the first goal shape nudged off every tile
    multiple (capped: the goal shape itself is verified at full size anyway)."""
    tiles = sorted({int(v) for p in tile_params for v in params.get(p, [])
                    if isinstance(v, int) and v > 1})

    def not_multiple(start: int) -> int:
        d = max(1, start)
        while any(d % t == 0 for t in tiles):
            d += 1
        return d

    biggest = tiles[-1] if tiles else 8
    small = [not_multiple(p) for p in (3, 5, 7, 11)][:ndim]
    large = [not_multiple(biggest + 3 + 2 * i) for i in range(ndim)]
    shapes = [small, large]
    if goal_shapes:
        shapes.append([not_multiple(min(d, 4 * biggest) - 1) if d > 2 else not_multiple(d)
                       for d in goal_shapes[0]])
    out: list[list[int]] = []
    goals = [list(g) for g in goal_shapes]
    for s in shapes:
        if s not in out and s not in goals:
            out.append(s)
    return out
