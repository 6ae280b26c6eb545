"""What a CUDA catalog operator is (app.catalog.protocol.Operator, plus launch geometry): a .cu template, its search space, how to launch it, inputs,
a float64 reference (NumPy on the CPU, CuPy on the GPU: the same code through `xp`), FLOP and
byte counts, tolerances and library baselines.

Templates are plain CUDA C++ (package data beside this file). Rendering prepends `#define`s for
the configuration, the dtype and the compile-time shape, and inlines common.cuh, so the rendered
text is exactly what NVRTC compiles and what the candidate's key hashes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from app.catalog.protocol import (
    OperatorBase,
    draw,
    from_storage,
    nan_bits,
    storage_dtype,
    to_storage,
)
from app.core.space import SearchSpace

Config = dict[str, Any]
DTYPE_CODES = {"float32": 0, "float16": 1, "bfloat16": 2}
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
# float32 kernels run with -ftz, fast intrinsics and their own reduction order: 10x the table's
# float32 rtol (app.catalog.protocol.RTOL). 16-bit outputs: output rounding dominates, the table holds.
FLOAT32_GROWTH = 10.0
DEFAULT_ATOL = {"float32": 1e-6, "float16": 1e-5, "bfloat16": 1e-5}


@dataclass
class Launch:
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0  # dynamic shared memory
    # Hopper: thread-block clusters (CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION; the grid is a multiple)
    # and persistent kernels, whose grid (here: the number of tiles, the most CTAs with work) is
    # capped at the device's SM count, rounded down to whole clusters, when launched.
    cluster: tuple[int, int, int] = (1, 1, 1)
    persistent: bool = False

    def device_grid(self, sms: int) -> tuple[int, int, int]:
        """The grid launched on a device with `sms` multiprocessors."""
        if not self.persistent:
            return tuple(self.grid)
        per = self.cluster[0] * self.cluster[1] * self.cluster[2]
        x = max(per, min(self.grid[0], (sms // per) * per))
        return (x, self.grid[1], self.grid[2])


@dataclass(frozen=True)
class TensorMapArg:
    """A kernel argument the harness turns into a TMA descriptor (CUtensorMap, made on the host
    by cuTensorMapEncodeTiled, app.gpu.cuda.tma) and passes by value (`const __grid_constant__
    CUtensorMap`): `array` a row-major contiguous device array, `box` the tile TMA moves (innermost
    dimension first, elements), `swizzle` the shared-memory swizzle in bytes (0, 32, 64, 128)."""

    array: Any
    box: tuple[int, ...]
    dtype: str
    swizzle: int = 128


@dataclass
class Step:
    """One kernel of a multi-kernel operator: its entry (extern "C" in the operator's one
    translation unit) and its own launch geometry. Steps run in order on the same stream."""

    kernel: str
    launch: Launch


@dataclass
class Workspace:
    """A named intermediate buffer the harness allocates for a multi-kernel operator (sizes from
    the shape and configuration), pre-filled with NaN (floats) or -1 (integers) so a kernel that
    reads what no earlier kernel wrote shows up in the final outputs; or, with `init`, filled
    once with host data the operator computes from the shape (index tables, cu_seqlens)."""

    shape: tuple[int, ...]
    dtype: str  # a NumPy dtype name: "float32", "uint16" (bf16 bits), "int32", ...
    init: Any = None  # host array copied in when allocated (None: poisoned)


@cache
def template_text(filename: str) -> str:
    return resources.files("app.catalog.cuda").joinpath("kernels", filename).read_text(encoding="utf-8")


# Storage and input distributions are the catalog's, shared with the CPU operators.
__all__ = ["draw", "from_storage", "nan_bits", "storage_dtype", "to_storage"]


class CudaOperator(OperatorBase):
    """Base class; subclasses fill in the operator-specific parts. The CUDA harness
    (app.gpu.cuda.worker) calls every hook here directly; the defaults are one kernel, one
    launch, no workspaces."""

    name = ""
    language = "cuda"
    kernel_name = ""
    template = ""
    description = ""
    shape_doc = "[rows, cols]"
    dtypes: tuple[str, ...] = ("float32", "float16", "bfloat16")
    distributions: tuple[str, ...] = ("normal", "uniform", "offset")
    deterministic = True
    input_names: tuple[str, ...] = ()
    output_names: tuple[str, ...] = ("y",)
    device_specific = False  # True: for_device picks another template per compute capability

    # ---- the design space -------------------------------------------------------------
    def space(self, dtype: str) -> SearchSpace:
        raise NotImplementedError

    def recommended(self, dtype: str, shape: list[int]) -> list[Config]:
        """Hand-picked configurations known to be good starting points."""
        return []

    # ---- checks -----------------------------------------------------------------------
    def check_dtype(self, dtype: str) -> None:
        if dtype not in self.dtypes:
            raise ValueError(f"operator {self.name} supports dtypes {', '.join(self.dtypes)}, not {dtype}")

    def check_shape(self, shape: list[int], dtype: str) -> str | None:
        """Why this shape cannot be run at all (None: fine)."""
        if len(shape) != 2:
            return f"{self.name} takes shapes {self.shape_doc}, got {shape}"
        return None

    def static_check(self, config: Config, shape: list[int], dtype: str) -> str | None:
        """Why this configuration cannot run this shape (decided before compiling)."""
        return None

    # ---- source and launch ------------------------------------------------------------
    def defines(self, config: Config, shape: list[int], dtype: str) -> dict[str, Any]:
        return dict(config)

    def render(self, config: Config, shape: list[int], dtype: str, source: str | None = None) -> str:
        """The complete translation unit. `source` replaces the template's device code (LLM
        rewrites); the header with the parameters and helpers stays the harness's."""
        lines = [f"// KernelSwarm {self.name} {dtype} shape={list(shape)}",
                 f"#define KS_DTYPE {DTYPE_CODES[dtype]}"]
        for k, v in self.defines(config, shape, dtype).items():
            lines.append(f"#define {k} {int(v) if isinstance(v, bool) else v}")
        body = source if source is not None else template_text(self.template_for(dtype))
        headers = "".join(template_text(h) + "\n" for h in ("common.cuh", *self.headers_for(dtype)))
        return "\n".join(lines) + "\n" + headers + body

    def headers_for(self, dtype: str) -> tuple[str, ...]:
        """Shared device headers (kernels/*.cuh) inlined after common.cuh, part of the harness
        prefix: ampere.cuh (cp.async, ldmatrix, mma.sync), hopper.cuh (mbarrier, TMA, wgmma)."""
        return ()

    def for_device(self, compute_capability: str) -> CudaOperator:
        """The operator as it runs on a device of this compute capability ('90', '80'): itself,
        unless a template exists only for some architectures (gemm: wgmma + TMA on sm_90)."""
        return self

    def template_for(self, dtype: str) -> str:
        return self.template

    def kernel_for(self, dtype: str) -> str:
        return self.kernel_name

    def launch(self, config: Config, shape: list[int], dtype: str) -> Launch:
        raise NotImplementedError

    # ---- multi-kernel operators (one source, several entries, workspaces) -----------------
    def kernels(self, dtype: str) -> tuple[str, ...]:
        """Every entry the source must define (the first is the one compiled and named)."""
        return (self.kernel_for(dtype),)

    def steps(self, config: Config, shape: list[int], dtype: str) -> list[Step]:
        """The kernels one call runs, in order (default: the one kernel)."""
        return [Step(self.kernel_for(dtype), self.launch(config, shape, dtype))]

    def workspaces(self, config: Config, shape: list[int], dtype: str) -> dict[str, Workspace]:
        """Intermediate buffers by name, allocated by the harness outside the timed region."""
        return {}

    def step_args(self, config: Config, index: int, inputs: dict[str, Any], outputs: dict[str, Any],
                  workspaces: dict[str, Any], shape: list[int]) -> tuple:
        """Arguments of step `index` (default: kernel_args, for the single kernel)."""
        return self.kernel_args(config, inputs, outputs, shape)

    def launch_prelude(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> Callable[[], None] | None:
        """Run before every launch, inside the timed call (your own kernel: in/out arrays start
        from their inputs); None: nothing to run."""
        return None

    # ---- data -------------------------------------------------------------------------
    def input_shapes(self, shape: list[int]) -> dict[str, tuple[int, ...]]:
        """Row-style default: the first input has the goal shape, the others are per column."""
        first, *rest = self.input_names
        return {first: tuple(shape), **{n: (shape[-1],) for n in rest}}

    def make_inputs(self, xp: Any, shape: list[int], dtype: str, rng: Any,
                    distribution: str) -> dict[str, Any]:
        """Inputs in storage dtype, drawn with `rng` (a NumPy or CuPy Generator: on the GPU
        the inputs are made on the device, so large shapes cost no host time)."""
        raise NotImplementedError

    def output_shapes(self, shape: list[int]) -> dict[str, tuple[int, ...]]:
        return {"y": tuple(shape)}

    def kernel_args(self, config: Config, inputs: dict[str, Any], outputs: dict[str, Any],
                    shape: list[int]) -> tuple:
        raise NotImplementedError

    def reference(self, xp: Any, inputs: dict[str, Any], shape: list[int]) -> dict[str, Any]:
        """Float64 outputs from float64 inputs (already converted from storage)."""
        raise NotImplementedError

    def error_scale(self, xp: Any, inputs: dict[str, Any], ref: dict[str, Any],
                    shape: list[int]) -> dict[str, Any]:
        return {k: xp.abs(v) for k, v in ref.items()}

    def rtol_growth(self, shape: list[int], dtype: str) -> float:
        return FLOAT32_GROWTH if dtype == "float32" else 1.0

    def atol(self, shape: list[int], dtype: str, rtol: float) -> float:
        return DEFAULT_ATOL[dtype]

    def edge_shapes(self, goal_shapes: Any, dtype: str, params: dict[str, list] | None = None) -> list[list[int]]:
        """Small shapes that are not multiples of any tile, for verification (app.catalog.protocol)."""
        return self.small_shapes(list(goal_shapes[0]), dtype) if goal_shapes else []

    def small_shapes(self, shape: list[int], dtype: str) -> list[list[int]]:
        """Operator-specific edge shapes near one goal shape."""
        return []

    # ---- the harness contract (app.catalog.protocol) -------------------------------------
    def entry(self, dtype: str) -> str:
        return self.kernel_for(dtype)

    def template_source(self, dtype: str) -> str:
        return template_text(self.template_for(dtype))

    # ---- roofline ---------------------------------------------------------------------
    def flops(self, shape: list[int]) -> float:
        return 0.0

    def bytes_moved(self, shape: list[int], dtype: str) -> float:
        """Fewest bytes through device memory: each input read once, each output written once."""
        raise NotImplementedError

    @property
    def memory_bound(self) -> bool:
        return True

    inputs_vary = True  # every input is drawn from the check's seed
    fixed_inputs: tuple[str, ...] = ()
    # off for the catalog's CUDA operators, as before the protocol named it: perturbing inputs
    # inside the event-timed loop has not been measured on a GPU yet (its cost would count in
    # the kernel's time); a custom CUDA kernel (app.catalog.custom) has it when compute-bound
    perturb_timed_inputs = False

    # ---- baselines ----------------------------------------------------------------------
    def baselines(self, dtype: str) -> dict[str, Callable[..., dict[str, Any]]]:
        """name -> fn(lib_module, device_inputs, shape) returning device outputs (storage dtype).
        Names start with the library ('cupy:', 'cublas:', 'torch:')."""
        return {}

    def compiled_baselines(self, dtype: str) -> dict[str, Callable[..., dict[str, Any]]]:
        """Baselines a compiler builds at their first call ('triton:', 'torch.compile:'), as
        `baselines`. They start ptxas and a C compiler, so only the trusted baseline cell runs
        them (app.gpu.cuda.worker.make_baseline_handler), never the sealed candidate cell."""
        return {}


def largest_dividing_vec(cols: int, vec: int) -> int:
    """The widest vector <= vec that divides the row length (rows stay vector-aligned)."""
    while vec > 1 and cols % vec:
        vec //= 2
    return vec


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)
