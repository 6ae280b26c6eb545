"""What an LLM agent is told about the kernel it rewrites, taken from the operator definition
(app.catalog.protocol.Operator): the language, the entry symbol and its signature, how tuning
parameters arrive, the template source, and the harness facts a kernel engineer would ask for
(what the harness prepends, how the kernel is called or launched, dtype and shapes, the
verification tolerance, the timing protocol as app.gpu.timed_slots/timing implement it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.goal import Goal

if TYPE_CHECKING:
    from app.catalog.cuda.base import CudaOperator
    from app.catalog.protocol import Operator


@dataclass
class KernelSpec:
    language: str  # "c" or "cuda"
    entry: str  # the symbol the fixed harness calls
    template: str  # the operator's device source (parameters arrive as -D macros)
    params: list[str] = field(default_factory=list)
    contract: str = ""  # prose: what the harness passes and expects
    operator: Any = None  # the catalog operator (None for hand-made specs in tests)
    dtype: str = "float32"
    shapes: list[list[int]] = field(default_factory=list)
    unit: str = ""  # the objective's unit (ms, GB/s, GFLOP/s)

    def signature(self) -> str:
        """The entry's signature as a parser reads it (app.llm.contract: gcc's own declaration
        output for C, pycparser for the CUDA entry); never taken from comments."""
        from app.llm.contract import signature

        got = signature(self.template, self.entry, self.language, tuple(self.params))
        return got.text() if got is not None else f"{self.entry}(...)"

    # ---- harness facts for one configuration -------------------------------------------------
    def prefix(self, config: dict[str, Any]) -> str:
        """CUDA: exactly what the harness puts before the kernel source for `config` and the
        first goal shape (defines, the shared device header). C: nothing (-D flags instead)."""
        if self.operator is None or self.language != "cuda" or not self.shapes:
            return ""
        op: CudaOperator = self.operator  # a CUDA spec's operator is a CUDA one
        try:
            return op.render(dict(config), list(self.shapes[0]), self.dtype, source="")
        except (KeyError, TypeError, ValueError):  # a configuration it cannot render: no prefix
            return ""

    def harness_facts(self, config: dict[str, Any]) -> list[str]:
        """Launch mapping / call, compile command, tolerance and timing, as prompt lines."""
        lines: list[str] = []
        op = self.operator
        if op is not None and self.shapes:
            shape = list(self.shapes[0])
            if self.language == "cuda":
                lines += _cuda_launch_lines(op, dict(config), shape, self.dtype)
            if self.language == "c":
                lines.append("call: " + _c_call(op, shape))
                lines.append("compile: " + _c_compile(config))
                isa = _isa_text()
                if isa:
                    lines.append(f"vector ISA this machine runs: {isa}")
            tol = _tolerance_text(op, shape, self.dtype)
            if tol:
                lines.append(tol)
        lines.append(CUDA_TIMING if self.language == "cuda" else TIMING)
        return lines


def kernel_spec(goal: Goal, params: list[str] | None = None, operator: Any = None) -> KernelSpec:
    """The spec of a goal's operator, read through the catalog's operator protocol
    (app.catalog.protocol.Operator: language, entry, template source, space). `operator`: the
    evaluator's own, resolved for its device (gemm on sm_90 is the wgmma template), when it is
    the goal's operator."""
    from app.catalog import get_operator

    if goal.backend not in ("cpu", "cuda"):
        raise ValueError(f"LLM agents rewrite kernel source; the {goal.backend} backend has none "
                         "(use the cpu or cuda backend)")
    if goal.kernel is not None:  # your own kernel: the LLM rewrites the user's source
        from app.catalog.custom import custom_operator

        op: Operator = custom_operator(goal, goal.backend)
    elif operator is not None and operator.name == goal.operator:
        op = operator
    else:
        op = get_operator(goal.backend, goal.operator)
    names = params if params is not None else list(op.space(goal.dtype).params)
    spec = KernelSpec(op.language, op.entry(goal.dtype), op.template_source(goal.dtype), names,
                      operator=op, dtype=goal.dtype, shapes=[list(s) for s in goal.shapes],
                      unit=_unit(goal, op))
    spec.contract = CONTRACTS[op.language].format(signature=spec.signature(), params=", ".join(names),
                                                  entry=spec.entry)
    return spec


# What the fixed harness does, per kernel language.
CONTRACTS = {
    "c": ("C11 compiled by the system compiler with OpenMP into a shared library; the fixed "
          "harness looks up the symbol `{entry}` and calls `{signature}`. Tuning parameters "
          "({params}) arrive as -D macros: read them, give defaults only under #ifndef, never "
          "redefine them. Helpers must be static. Every output element must be written on every "
          "call."),
    "cuda": ("CUDA C++ compiled with NVRTC; the harness looks up the kernel `{entry}` by that "
             "exact name (keep it extern \"C\") and launches `{signature}` with the grid and "
             "block the configuration implies. Tuning parameters ({params}) arrive as #defines "
             "the harness prepends, with the shared device header (see HARNESS PREFIX; do not "
             "repeat or #include it). Only device code: no streams, events, host callbacks, "
             "clocks or runtime API calls."),
}

# app.gpu.timed_slots and app.gpu.timing, as they are (TimingSettings defaults).
TIMING = ("timing: the harness times each call from outside (never the kernel itself): 2 warm-up "
          "calls, then 5 to 40 samples interleaved with the baselines until (p90-p10)/median is "
          "under 5% or 3 s are spent; the objective is from the median. Calls rotate over 3 "
          "input/output slots (never the same slot twice in a row); before each timed call, "
          "outside the timed window, 4 elements of every input are replaced by other values of "
          "the same array and the outputs are poisoned (NaN between guard canaries). After "
          "timing, every slot's outputs are verified against the reference of its current "
          "inputs: write every output element on every call and cache nothing between calls.")


# app.gpu.cuda.timing (Protocol defaults) with app.gpu.timed_slots, as they are.
CUDA_TIMING = ("timing: the harness times each call from outside (never the kernel itself) with "
               "two CUDA events around the launch(es) on its stream, the L2 cache flushed before "
               "every sample (no call starts with the previous call's data in L2): 3 warm-up "
               "calls, then 10 to 200 samples in batches of 10, interleaved with the baselines, "
               "until the median is known to 0.5% or 3 s are spent; the objective is from the "
               "median; batches taken while the GPU throttled (heat, hardware slowdown, power "
               "brake) are retaken. Calls rotate over input/output slots; before each timed call, "
               "outside the timed window, a few input elements change and the outputs are "
               "poisoned; after timing every slot's outputs are verified: write every output "
               "element on every call and cache nothing between calls.")


def _cuda_launch_lines(op: CudaOperator, config: dict[str, Any], shape: list[int], dtype: str) -> list[str]:
    """How the harness launches the kernel, or each kernel of a multi-kernel operator in order
    (its own grid and block), and the workspaces it allocates between them."""
    keep = ("(the grid and block follow from the tuning parameters; keep your kernels' indexing "
            "consistent with them)")
    try:
        steps = op.steps(config, shape, dtype)
        if len(steps) <= 1:
            launch = op.launch(config, shape, dtype)
            return [(f"launch for shape {_shape(shape)} and this configuration: grid "
                     f"{tuple(launch.grid)}, block {tuple(launch.block)}, dynamic shared memory "
                     f"{launch.shared_bytes} bytes {keep}")]
        lines = [(f"launches for shape {_shape(shape)} and this configuration, in this order on "
                  f"one stream, timed together as one call {keep}:")]
        for i, step in enumerate(steps, 1):
            launch = step.launch
            lines.append(f"  {i}. {step.kernel}: grid {tuple(launch.grid)}, block "
                         f"{tuple(launch.block)}, dynamic shared memory "
                         f"{launch.shared_bytes} bytes")
        spaces = op.workspaces(config, shape, dtype)
        if spaces:
            lines.append("workspaces the harness allocates (poisoned with NaN/-1 unless filled "
                         "from the shape; only the final outputs are verified): " + ", ".join(
                             f"{name} {_shape(list(w.shape))} {w.dtype}"
                             + (" (filled)" if w.init is not None else "")
                             for name, w in spaces.items()))
        return lines
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return ["launch: the grid and block the configuration implies"]


def _shape(shape: list[int]) -> str:
    return "x".join(map(str, shape))


def _unit(goal: Goal, op: Operator) -> str:
    from app.core.units import objective_unit

    return objective_unit(goal.objective.metric, op.memory_bound)


def _c_call(op: Any, shape: list[int]) -> str:
    """How the harness calls a catalog C kernel: output pointer, input pointers, `long` dims."""
    try:
        inputs = list(op.input_shapes(tuple(shape)))
        dims = op.call_dims(tuple(shape))
        out = op.output_shape(tuple(shape))
    except (AttributeError, KeyError, TypeError, ValueError):  # custom kernels: the signature
        return "the harness calls the entry with the arguments of its signature"
    return (f"arguments for shape {_shape(shape)}: the output pointer [{_shape(list(out))}] "
            "float32, then the inputs "
            + ", ".join(f"{n} [{_shape(list(s))}]" for n, s in op.input_shapes(tuple(shape)).items())
            + f" (row-major, contiguous), then the dimensions {tuple(int(d) for d in dims)} as long"
            if inputs else f"dimensions {tuple(dims)}")


def _c_compile(config: dict[str, Any]) -> str:
    from app.gpu.cpu.toolchain import BASE_FLAGS

    return " ".join(["cc", *BASE_FLAGS, "-fopenmp", *(f"-D{k}={v}" for k, v in config.items()),
                     "kernel.c", "-o", "kernel.so"])


def _isa_text() -> str:
    try:
        from app.catalog.cpu.isa import ISA_NAMES, isa_levels

        return ", ".join(ISA_NAMES[i] for i in isa_levels())
    except (ImportError, OSError, KeyError):
        return ""


def _tolerance_text(op: Any, shape: list[int], dtype: str) -> str:
    if op.spec is not None:  # your own kernel: per output
        return _custom_tolerance_text(op.spec)
    try:
        from app.gpu.verify import tolerance_for

        tol = tolerance_for(op, shape, dtype)
    except (AttributeError, KeyError, TypeError, ValueError):
        return ""
    if op.judge_output is not None:  # the operator judges its outputs as a whole (e.g. KDA)
        why = (op.judge_output.__doc__ or "a norm-based check").strip().splitlines()[0]
        return (f"verification: dtype {dtype}; each output judged as a whole against the float64 "
                f"reference: {why.rstrip('.')}, tolerance {tol.rtol:.1e}; on the goal shapes and "
                "edge shapes, with several input distributions")
    return (f"verification: dtype {dtype}; |got - ref| <= {tol.atol:.1e} + {tol.rtol:.1e} * "
            "|ref| per element (float64 reference), on the goal shapes and edge shapes that are "
            "not multiples of any tile, with several input distributions")


def _custom_tolerance_text(spec: Any) -> str:
    """A user kernel's outputs each have their own tolerance (app.catalog.custom.operator)."""
    from app.catalog.custom.operator import DEFAULT_RTOL

    parts = []
    for a in spec.args:
        if not a.is_output:
            continue
        if not a.check:
            parts.append(f"{a.name}: not checked")
            continue
        rtol = a.rtol if a.rtol is not None else DEFAULT_RTOL.get(spec.dtype, 1e-4)
        atol = f"{a.atol:.1e}" if a.atol is not None else f"{rtol:.1e} * max|ref|"
        parts.append(f"{a.name}: |got - ref| <= {atol} + {rtol:.1e} * |ref| per element")
    return ("verification against the user's reference, per output: " + "; ".join(parts)
            + "; on the goal's shapes")
