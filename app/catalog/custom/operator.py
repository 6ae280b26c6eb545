"""Your own kernel as an app.catalog.protocol.Operator: the cpu backend calls the C function
with the declared signature (ctypes), the cuda backend launches the kernel with Kernel Tuner's
geometry (problem_size / grid_div / block_size_names). Built from a KernelSpec, which is
picklable, so a worker process rebuilds the very same operator.

Tolerances are per output: the verification's table rtol is scaled to 1 (rtol_growth) and each
output's error scale carries its own atol + rtol * |reference| (error_scale). Outputs with
check = false get a NaN reference, which the verification does not compare.
"""

from __future__ import annotations

import ctypes
import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from app.catalog.cuda.base import CudaOperator, Launch
from app.catalog.custom import expr
from app.catalog.custom.reference import run_reference
from app.catalog.custom.spec import Arg, KernelSpec, load_spec
from app.catalog.protocol import RTOL, OperatorBase, dtype_limits
from app.core.space import SearchSpace
from app.goal import Goal

Shape = tuple[int, ...]
DEFAULT_RTOL = {"float32": 1e-4, "float64": 1e-10}
TABLE_RTOL = {d: RTOL[d] for d in ("float32", "float64")}  # the verifier's table (scaled away, see above)
# Reference kernel sources are built and run by the backends: app.gpu.cpu.reference_kernel and
# app.gpu.cuda.reference_kernel register their runners here; each backend's worker imports its own.
REFERENCE_KERNEL_RUNNERS: dict[str, Callable[..., Any]] = {}
REFERENCE_SCAN = 100_000  # configurations tried, in order, for the reference kernel's own


def _reference_runner(language: str) -> Callable[..., Any]:
    try:
        return REFERENCE_KERNEL_RUNNERS[language]
    except KeyError:
        raise RuntimeError(f"no runner for a {language} reference kernel in this process "
                           "(its backend's reference_kernel module registers it)") from None


C_TYPES = {"float32": ctypes.c_float, "float64": ctypes.c_double, "int8": ctypes.c_int8,
           "uint8": ctypes.c_uint8, "int16": ctypes.c_int16, "int32": ctypes.c_int32,
           "uint32": ctypes.c_uint32, "int64": ctypes.c_int64, "uint64": ctypes.c_uint64}
MAX_THREADS_PER_BLOCK = 1024


def _numpy(a: Any) -> np.ndarray:
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def _atol_floor(arg: Arg) -> float:
    """An output's tolerance is relative to its largest value, but never below the smallest
    normal number of its dtype: a float32 output cannot hold a float64 answer of 1e-80 (it is
    0). Integer outputs have no floor."""
    return dtype_limits(arg.dtype)[1] if arg.dtype in RTOL else 0.0


class CustomOperator(OperatorBase):
    """A custom C kernel (and the shared part of a custom CUDA kernel)."""

    custom = True
    meaning = "custom"  # app.catalog.families: your fill, plus the families within its range
    reference_symbol = ""  # no plain C reference loop: the cpu backend measures no baselines
    distributions = ("normal",)  # each argument says how its values are drawn

    def __init__(self, spec: KernelSpec) -> None:
        self.spec = spec
        self.name = f"custom-{spec.entry}-{spec.digest}"
        self.description = f"your kernel {spec.entry} ({spec.source_name})"
        self.language = spec.language
        self.dtypes = (spec.dtype,)
        self.deterministic = spec.deterministic
        self._arg = {a.name: a for a in spec.args}

    def __getstate__(self) -> dict[str, Any]:
        return {"spec": self.spec}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["spec"])  # type: ignore[misc]

    # ---- the space --------------------------------------------------------------------------
    @property
    def shape_doc(self) -> str:
        return "[" + ", ".join(self.spec.dims) + "]"

    shape_help = shape_doc

    @property
    def restrictions(self) -> list[str]:
        return list(self.spec.restrictions)

    def params(self, cpus: int | None = None) -> dict[str, list]:
        return {k: list(v) for k, v in self.spec.tune_params.items()}

    def space(self, dtype: str = "float32") -> SearchSpace:
        return SearchSpace(self.params(), restrictions=self.restrictions)

    def reference_config(self) -> dict[str, Any]:
        """Where a reference kernel source runs: the first configuration, in the order the
        tunables and their values are listed (Kernel Tuner's), that meets the restrictions and
        fits the hardware's limits; ValueError when none of the first REFERENCE_SCAN does.
        Found once per operator (the scan can take a second on a large space)."""
        found = self.__dict__.get("_reference_config")
        if found is None:
            found = next(self.valid_configs(REFERENCE_SCAN), None)
            if found is None:
                raise ValueError(f"none of the first {REFERENCE_SCAN:,} configurations (in the "
                                 "order the tunables and values are listed) meets the restrictions "
                                 "and fits a block, so the reference kernel has none to run at")
            self.__dict__["_reference_config"] = found
        return dict(found)

    def valid_configs(self, scan: int) -> Iterator[dict[str, Any]]:
        """The configurations among the first `scan` in listed order that meet the
        restrictions and fit the hardware's limits."""
        params, space = self.params(), self.space()
        for values in itertools.islice(itertools.product(*params.values()), scan):
            config = dict(zip(params, values))
            if space.is_valid(config) and self._fits(config):
                yield config

    def _fits(self, config: dict[str, Any]) -> bool:
        return True

    def check_shape(self, shape: Sequence[int], dtype: str = "float32") -> str | None:
        if len(shape) != len(self.spec.dims):
            return f"your kernel takes shapes {self.shape_doc}, got {list(shape)}"
        return None

    # ---- data -------------------------------------------------------------------------------
    def _sizes(self, arg: Arg, shape: Sequence[int]) -> Shape:
        env = self.spec.dims_env(shape)
        return tuple(expr.as_int(s, env) for s in arg.shape)

    def scalar(self, arg: Arg, shape: Sequence[int]) -> Any:
        return np.dtype(arg.dtype).type(expr.evaluate(arg.value, self.spec.dims_env(shape)))

    def input_shapes(self, shape: Sequence[int]) -> dict[str, Shape]:
        return {a.name: self._sizes(a, shape) for a in self.spec.args if a.is_input}

    def output_shapes(self, shape: Sequence[int]) -> dict[str, Shape]:
        return {a.name: self._sizes(a, shape) for a in self.spec.args if a.is_output}

    def output_dtypes(self, dtype: str) -> dict[str, str]:
        """Outputs stored in their own (integer) dtype (app.gpu.verify.make_outputs)."""
        return {a.name: a.dtype for a in self.spec.args if a.is_output and a.dtype != dtype}

    def make_inputs(self, xp: Any, shape: Sequence[int], dtype: str, rng: Any,
                    distribution: str = "normal") -> dict[str, Any]:
        out = {}
        for a in self.spec.args:
            if a.is_input:
                out[a.name] = xp.ascontiguousarray(self._draw(xp, a, self._sizes(a, shape), rng))
        return out

    def _draw(self, xp: Any, a: Arg, sizes: Shape, rng: Any) -> Any:
        if a.data is not None:
            return xp.asarray(a.data.reshape(sizes)).copy()
        if a.seed is not None:
            rng = xp.random.default_rng(a.seed)
        if a.fill == "zeros":
            values = xp.zeros(sizes)
        elif a.fill == "ones":
            values = xp.ones(sizes)
        elif a.fill == "arange":
            values = xp.arange(int(np.prod(sizes))).reshape(sizes)
        elif a.fill == "uniform":
            values = rng.uniform(a.low, a.high, sizes)
        elif a.fill == "randint":
            values = rng.integers(int(a.low), int(a.high), sizes)
        else:
            values = rng.standard_normal(sizes) * (a.high - a.low) / 2 + (a.high + a.low) / 2
        return values.astype(a.dtype)

    # ---- correctness ------------------------------------------------------------------------
    def reference(self, xp: Any, inputs: dict[str, Any], shape: Sequence[int]) -> dict[str, Any]:
        """Float64 outputs; NaN for outputs that are not checked."""
        outs = self.output_shapes(shape)
        if self.spec.expected:
            # stored answers hold for the stored inputs only; other inputs (the timer perturbs
            # a few elements between timed calls) get no answer: NaN is not compared
            stored = all(np.array_equal(_numpy(inputs[a.name]), a.data.reshape(_numpy(inputs[a.name]).shape))
                         for a in self.spec.args if a.is_input and a.data is not None)
            got = {k: np.asarray(v, dtype=np.float64) for k, v in self.spec.expected.items()} if stored else {}
        elif self.spec.reference_source and self.language == "cuda":
            run = _reference_runner("cuda")
            got = {k: _numpy(v) for k, v in run(self, xp, inputs, shape).items()}
        elif self.spec.reference_source:
            got = _reference_runner("c")(self, {k: _numpy(v) for k, v in inputs.items()}, shape)
        else:
            args = {a.name: _numpy(inputs[a.name]).astype(a.dtype) for a in self.spec.args if a.is_input}
            args.update({a.name: self.scalar(a, shape).item() for a in self.spec.args
                         if a.role == "scalar"})
            checked = [a.name for a in self.spec.args if a.is_output and a.check]
            got = run_reference(self, args, checked) if checked else {}  # check = false on all
        ref = {}
        for name, s in outs.items():
            if name in got and self._arg[name].check:
                values = np.asarray(got[name], dtype=np.float64)
                if values.size != int(np.prod(s)):
                    raise ValueError(f"the reference returned {values.size} values for {name!r}; "
                                     f"the output has shape {list(s)}")
                ref[name] = xp.asarray(values.reshape(s))
            else:
                ref[name] = xp.full(s, np.nan)
        return ref

    def stored_reference(self, xp: Any, inputs: dict[str, Any], shape: Sequence[int]
                         ) -> tuple[dict[str, Any], dict[str, Any]] | None:
        """(reference, error scale) from the stored answers when the inputs (storage arrays)
        are the stored ones, else None (the caller computes them). Worked out once per process
        and shape: the answer to the same inputs is the same for every candidate (it costs a
        float64 copy of each output held for the worker's life)."""
        if not self.spec.expected or any(a.data is None for a in self.spec.args if a.is_input):
            return None
        for a in self.spec.args:
            if a.is_input:
                got = _numpy(inputs[a.name])
                if got.dtype != a.data.dtype or not np.array_equal(got, a.data.reshape(got.shape)):
                    return None
        key = tuple(int(d) for d in shape)
        cache = self.__dict__.setdefault("_stored", {})
        if key not in cache:
            with np.errstate(all="ignore"):
                ref = self.reference(xp, {k: v for k, v in inputs.items()}, shape)
                cache[key] = (ref, self.error_scale(xp, inputs, ref, shape))
        return cache[key]

    def error_scale(self, xp: Any, inputs: dict[str, Any], ref: dict[str, Any],
                    shape: Sequence[int]) -> dict[str, Any]:
        scale = {}
        for name, r in ref.items():
            a = self._arg[name]
            rtol = a.rtol if a.rtol is not None else DEFAULT_RTOL[self.spec.dtype]
            mag = xp.abs(xp.where(xp.isfinite(r), r, 0.0))
            atol = a.atol if a.atol is not None else max(
                rtol * float(mag.max() if mag.size else 0.0), _atol_floor(a))
            scale[name] = atol + rtol * mag if a.check else xp.full(r.shape, np.inf)
        return scale

    def tolerance_text(self, name: str, expected: Any) -> str:
        """The output's own tolerance, for a verification message (the verifier's rtol/atol are
        1 and 0 here: error_scale holds the real ones)."""
        a = self._arg[name]
        rtol = a.rtol if a.rtol is not None else DEFAULT_RTOL[self.spec.dtype]
        if a.atol is not None:
            return f"rtol {rtol:.2e}, atol {a.atol:.1e}"
        finite = abs(expected[abs(expected) < math.inf])
        top = float(finite.max()) if finite.size else 0.0
        floor = _atol_floor(a)
        if rtol * top < floor:
            return f"rtol {rtol:.2e}, atol {floor:.1e} (the smallest normal {a.dtype})"
        return f"rtol {rtol:.2e}, atol {rtol * top:.1e} = rtol × max |expected| {top:.4g}"

    def rtol_growth(self, shape: Sequence[int], dtype: str = "float32") -> float:
        return 1.0 / TABLE_RTOL.get(dtype, 1e-5)  # rtol 1: error_scale holds each output's tolerance

    def atol(self, shape: Sequence[int], dtype: str, rtol: float) -> float:
        return 0.0

    def edge_shapes(self, goal_shapes: Sequence[Sequence[int]], dtype: str,
                    params: dict[str, list]) -> list[list[int]]:
        return []  # a user's kernel is checked at the sizes the goal names

    # ---- counts -----------------------------------------------------------------------------
    def flops(self, shape: Sequence[int]) -> float:
        return float(expr.evaluate(self.spec.flops, self.spec.dims_env(shape))) if self.spec.flops else 0.0

    def bytes_moved(self, shape: Sequence[int], dtype: str = "float32") -> float:
        if self.spec.bytes:
            return float(expr.evaluate(self.spec.bytes, self.spec.dims_env(shape)))
        total = 0
        for a in self.spec.args:
            if a.is_array:
                n = int(np.prod(self._sizes(a, shape))) * np.dtype(a.dtype).itemsize
                total += n * (2 if a.role == "inout" else 1)
        return float(total)

    @property
    def memory_bound(self) -> bool:
        return not self.spec.flops

    def throughput(self, shape: Shape, seconds: float) -> float:
        amount = self.flops(shape) if self.spec.flops else self.bytes_moved(shape)
        return amount / seconds / 1e9 if seconds > 0 else 0.0

    # ---- source -----------------------------------------------------------------------------
    def entry(self, dtype: str = "float32") -> str:
        return self.spec.entry

    def template(self) -> str:
        if self.language != "c":
            return self.spec.source
        fixed = self.spec.param_defines([1] * len(self.spec.dims))
        header = "".join(f"#define {k} {v}\n" for k, v in fixed.items())
        return header + self.spec.source

    def template_source(self, dtype: str = "float32") -> str:
        return self.template()

    @property
    def inputs_vary(self) -> bool:
        """Whether a check's seed changes any input (app.gpu.verify.plan_checks): not when
        every input is read from a file, has its own seed or a constant fill."""
        return any(a.data is None and a.seed is None and a.fill not in ("zeros", "ones", "arange")
                   for a in self.spec.args if a.is_input)

    @property
    def perturb_timed_inputs(self) -> bool:
        return self.inputs_vary and not self.memory_bound

    @property
    def fixed_inputs(self) -> tuple[str, ...]:
        """Inputs the timer must not perturb (app.gpu.timed_slots): those the goal marks fixed,
        and every input of a goal judged by stored answers."""
        return tuple(a.name for a in self.spec.args if a.is_input
                     and (a.fixed or (self.spec.expected and a.data is not None)))

    # ---- the C harness (app.gpu.cpu) --------------------------------------------------------
    def c_argtypes(self) -> list[Any]:
        return [ctypes.c_void_p if a.is_array else C_TYPES[a.dtype] for a in self.spec.args]

    def prepare_call(self, fn: Any, inputs: dict[str, Any], outputs: dict[str, Any],
                     shape: Sequence[int]) -> Callable[[], None]:
        """A zero-argument call with the pointers resolved now. An in/out array starts from its
        input values at every call (the copy is part of the timed call: the timer poisons
        outputs between calls)."""
        args: list[Any] = []
        copies = []
        for a in self.spec.args:
            if a.role == "scalar":
                args.append(self.scalar(a, shape).item())
            elif a.role == "input":
                args.append(inputs[a.name].ctypes.data)
            else:
                if a.role == "inout":
                    copies.append((outputs[a.name], inputs[a.name]))
                args.append(outputs[a.name].ctypes.data)
        if not copies:
            return lambda: fn(*args)

        def call() -> None:
            for dst, src in copies:
                np.copyto(dst, src)
            fn(*args)

        return call


class CustomCudaOperator(CustomOperator, CudaOperator):
    """A custom CUDA kernel: the cuda worker's operator hooks (app.gpu.cuda.worker). Everything
    CustomOperator defines wins (it comes first); CudaOperator supplies the CUDA hooks this
    class does not override with their one-kernel defaults (steps, workspaces, kernels, ...)."""

    def recommended(self, dtype: str, shape: list[int]) -> list[dict[str, Any]]:
        return []

    def check_dtype(self, dtype: str) -> None:
        if dtype != self.spec.dtype:
            raise ValueError(f"your kernel is verified in {self.spec.dtype}, not {dtype}")

    def baselines(self, dtype: str) -> dict[str, Any]:
        return {}

    def kernel_for(self, dtype: str) -> str:
        return self.spec.entry

    def block(self, config: dict[str, Any]) -> tuple[int, int, int]:
        defaults = (256, 1, 1)  # Kernel Tuner's defaults for block sizes that are not tuned
        names = self.spec.block_size_names
        dims = [int(config.get(names[i], defaults[i])) if i < len(names) else 1 for i in range(3)]
        return dims[0], dims[1], dims[2]

    def _env(self, config: dict[str, Any], shape: Sequence[int]) -> dict[str, Any]:
        env: dict[str, Any] = dict(self.spec.dims_env(shape))
        env.update(self.spec.param_defines(shape))
        block = self.block(config)
        for i, name in enumerate(self.spec.block_size_names[:3]):
            env[name] = block[i]
        for i, name in enumerate(("block_size_x", "block_size_y", "block_size_z")):
            env.setdefault(name, block[i])
        env.update(config)
        return env

    def launch(self, config: dict[str, Any], shape: list[int], dtype: str = "float32") -> Launch:
        env = self._env(config, shape)
        sizes = [expr.as_int(p, env) for p in self.spec.problem_size] + [1, 1, 1]
        grid = []
        for axis in range(3):
            div = 1.0
            for d in self.spec.grid_div[axis]:
                div *= float(expr.evaluate(d, env))
            grid.append(max(1, math.ceil(sizes[axis] / div)))
        return Launch(grid=(grid[0], grid[1], grid[2]), block=self.block(config))

    def _fits(self, config: dict[str, Any]) -> bool:
        return math.prod(self.block(config)) <= MAX_THREADS_PER_BLOCK

    def static_check(self, config: dict[str, Any], shape: list[int], dtype: str) -> str | None:
        threads = math.prod(self.block(config))
        if threads > MAX_THREADS_PER_BLOCK:
            return f"{threads} threads per block; a block has at most {MAX_THREADS_PER_BLOCK}"
        return None

    def render(self, config: dict[str, Any], shape: list[int], dtype: str = "float32",
               source: str | None = None) -> str:
        """Kernel Tuner's preamble: the tunables, block and grid sizes as #defines, then the
        source (wrapped in extern "C" so the entry keeps its name)."""
        launch = self.launch(config, shape, dtype)
        lines = [f"// KernelSwarm {self.name} shape={list(shape)}", "#define kernel_tuner 1"]
        values: dict[str, Any] = {}
        for i, axis in enumerate("xyz"):
            values[f"block_size_{axis}"] = launch.block[i]
            values[f"grid_size_{axis}"] = launch.grid[i]
        values.update(self.spec.param_defines(shape))
        values.update(config)
        for k, v in values.items():
            lines.append(f"#define {k} {int(v) if isinstance(v, bool) else v}")
        body = source if source is not None else self.spec.source
        if 'extern "C"' not in body and "template" not in body:
            includes = [ln for ln in body.splitlines() if ln.lstrip().startswith("#include")]
            # an include leaves an empty line: the body keeps its line numbers (#line, errors)
            rest = ["" if ln.lstrip().startswith("#include") else ln for ln in body.splitlines()]
            body = "\n".join(includes) + '\nextern "C" {\n' + "\n".join(rest) + "\n}\n"
        return "\n".join(lines) + "\n" + body

    def kernel_args(self, config: dict[str, Any], inputs: dict[str, Any], outputs: dict[str, Any],
                    shape: list[int]) -> tuple:
        args: list[Any] = []
        for a in self.spec.args:
            if not a.is_param:
                continue  # a __constant__ array (constant_copy)
            if a.role == "scalar":
                args.append(self.scalar(a, shape))
            elif a.role == "input":
                args.append(inputs[a.name])
            else:
                args.append(outputs[a.name])
        return tuple(args)

    @property
    def has_constants(self) -> bool:
        return any(a.role == "constant" for a in self.spec.args)

    def constant_copy(self, xp: Any, module: Any, inputs: dict[str, Any],
                      sizes: dict[str, int]) -> Callable[[], None] | None:
        """Run before every launch, beside launch_prelude: each constant array copied to the
        module's __constant__ symbol of its name (Kernel Tuner's cmem_args), so what the timer
        perturbs reaches the kernel. `sizes`: the cubin's symbol sizes (cubin_symbols); a
        symbol missing or smaller than its array is a ValueError naming it."""
        pairs = []
        for a in self.spec.args:
            if a.role != "constant":
                continue
            src = inputs[a.name]
            size = sizes.get(a.name)
            if size is None:
                raise ValueError(f"the compiled kernel has no __constant__ array {a.name}")
            if size < src.nbytes:
                raise ValueError(f"the __constant__ array {a.name} holds {size} bytes; the "
                                 f"argument has {src.nbytes} ({src.size} x {src.dtype})")
            ptr = module.get_global_var(a.name)
            if isinstance(ptr, int):  # CuPy: a bare device address (wrapped as RawModule does)
                device = xp.cuda.runtime.getDevice()
                ptr = xp.cuda.MemoryPointer(xp.cuda.UnownedMemory(ptr, src.nbytes, module, device), 0)
            pairs.append((xp.ndarray(src.shape, src.dtype, ptr), src))
        return _copier(pairs)

    def launch_prelude(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> Callable[[], None] | None:
        """Run before every launch (app.gpu.cuda.worker): in/out arrays start from their inputs
        (a device copy, part of the timed launch: the timer poisons outputs between calls)."""
        return _copier([(outputs[a.name], inputs[a.name]) for a in self.spec.args
                        if a.role == "inout"])

    def template(self) -> str:
        return self.spec.source


def _copier(pairs: list[tuple[Any, Any]]) -> Callable[[], None] | None:
    """A call copying each (destination, source) pair; None when there are none."""
    if not pairs:
        return None

    def copy() -> None:
        for dst, src in pairs:
            dst[...] = src

    return copy


def operator_from_spec(spec: KernelSpec) -> CustomOperator:
    return CustomCudaOperator(spec) if spec.language == "cuda" else CustomOperator(spec)


def custom_operator(goal: Goal, backend: str) -> CustomOperator:
    """The operator of a goal with a [kernel] table (GoalError names a wrong field)."""
    return operator_from_spec(load_spec(goal, backend))
