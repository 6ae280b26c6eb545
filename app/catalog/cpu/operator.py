"""What a CPU operator is: a C kernel template with a fixed call signature, its search space,
a float64 numpy reference, a numpy baseline, and the counts that turn a time into GFLOP/s or GB/s.

The host harness is fixed by this definition: the worker always calls
`ks_kernel(out, inputs..., dims...)` with float pointers and `long` dimensions. Candidates may
replace the template's source (LLM agents), never the harness.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np

from app.catalog.protocol import OperatorBase, draw, tile_edge_shapes, to_storage
from app.core.space import SearchSpace

Shape = tuple[int, ...]
Arrays = dict[str, np.ndarray]

ENTRY_SYMBOL = "ks_kernel"
REFERENCE_SOURCE = "cpu_reference.c"


def kernel_source(file_name: str) -> str:
    """A kernel template shipped as package data under app/catalog/cpu/kernels/."""
    return resources.files("app.catalog.cpu").joinpath("kernels", file_name).read_text(encoding="utf-8")


def thread_counts(cpus: int | None = None) -> list[int]:
    """Powers of two up to the machine's core count, plus the core count itself."""
    cpus = max(1, cpus or os.cpu_count() or 1)
    counts = [1]
    while counts[-1] * 2 <= cpus:
        counts.append(counts[-1] * 2)
    if counts[-1] != cpus:
        counts.append(cpus)
    return counts


@dataclass
class CpuOperator(OperatorBase):
    name: str
    description: str
    shape_help: str  # how a goal shape reads, e.g. "[M, N, K]"
    ndim: int
    kernel_file: str
    reference_symbol: str  # plain C loop in cpu_reference.c with the same signature
    input_shapes: Callable[[Shape], dict[str, Shape]]  # call order after the output pointer
    output_shape: Callable[[Shape], Shape]
    call_dims: Callable[[Shape], tuple[int, ...]]  # the `long` arguments after the pointers
    shape_of: Callable[[Arrays], Shape]  # the goal-style shape of a set of inputs
    reference64: Callable[[Arrays], np.ndarray]  # float64 in, float64 out
    scale64: Callable[[Arrays, np.ndarray], np.ndarray]  # magnitude the tolerance scales with
    numpy_baseline: Callable[[Arrays, np.ndarray], None]  # float32, writes into out
    flops: Callable[[Shape], float]
    bytes_per_shape: Callable[[Shape], float]
    memory_bound: bool  # GB/s, held to the cache levels' roofs; else GFLOP/s, to the FP32 peak
    default_shape: list[int]  # a realistic size, offered when a goal names none
    base_params: dict[str, list]  # THREADS is added per machine
    restrictions: list[str] = field(default_factory=list)
    tile_params: tuple[str, ...] = ()  # parameters whose values are tile sizes (edge shapes)
    near_limit_magnitude: Callable[[Shape], float] = lambda s: float(np.finfo(np.float32).max) / 4
    growth: Callable[[Shape], float] = lambda s: 1.0  # accumulation error grows with size
    # parameters whose values depend on the machine (e.g. the instruction sets it reports)
    machine_params: Callable[[], dict[str, list]] = dict
    # OperatorBase's hooks, as fields so each operator (app.catalog.cpu.ops) sets its own.
    # threaded_baseline: numpy's BLAS workers spin ~0.1 s after each call; timed back to back
    # they take the cores a candidate's threads need (TimingSettings.settle_s)
    threaded_baseline: bool = False
    meaning: str = ""
    family_args: tuple[str, ...] = ()

    # ---- app.catalog.protocol.Operator ----------------------------------------------------
    language = "c"
    dtypes = ("float32",)
    distributions = ("normal", "uniform_large", "near_limits", "constant_rows", "sparse")
    deterministic = True
    output_name = "out"

    @property
    def shape_doc(self) -> str:
        return self.shape_help

    def space(self, dtype: str = "float32") -> SearchSpace:
        return SearchSpace(self.params(), restrictions=list(self.restrictions))

    def output_shapes(self, shape: Sequence[int]) -> dict[str, Shape]:
        return {self.output_name: self.output_shape(tuple(shape))}

    def make_inputs(self, xp: Any, shape: Sequence[int], dtype: str, rng: Any,
                    distribution: str) -> dict[str, Any]:
        limit = self.near_limit_magnitude(tuple(shape))
        tiny = float(np.finfo(np.float32).tiny)
        return {name: to_storage(xp, draw(xp, rng, s, distribution, limit, tiny), dtype)
                for name, s in self.input_shapes(tuple(shape)).items()}

    def reference(self, xp: Any, inputs: dict[str, Any], shape: Sequence[int]) -> dict[str, Any]:
        return {self.output_name: self.reference64(inputs)}

    def error_scale(self, xp: Any, inputs: dict[str, Any], ref: dict[str, Any],
                    shape: Sequence[int]) -> dict[str, Any]:
        return {self.output_name: self.scale64(inputs, ref[self.output_name])}

    def rtol_growth(self, shape: Sequence[int], dtype: str = "float32") -> float:
        return self.growth(tuple(shape))

    def atol(self, shape: Sequence[int], dtype: str, rtol: float) -> float:
        return 1e-30  # float32 results are compared relative to their error scale

    def edge_shapes(self, goal_shapes: Sequence[Sequence[int]], dtype: str,
                    params: dict[str, list]) -> list[list[int]]:
        return tile_edge_shapes(self.ndim, self.tile_params, goal_shapes, params)

    def bytes_moved(self, shape: Sequence[int], dtype: str = "float32") -> float:
        return self.bytes_per_shape(tuple(shape))

    def entry(self, dtype: str = "float32") -> str:
        return ENTRY_SYMBOL

    def template_source(self, dtype: str = "float32") -> str:
        return self.template()

    # ---- CPU specifics ----------------------------------------------------------------------
    def params(self, cpus: int | None = None) -> dict[str, list]:
        return {**self.base_params, **self.machine_params(), "THREADS": thread_counts(cpus)}

    def template(self) -> str:
        return kernel_source(self.kernel_file)

    # class attributes, not dataclass fields: every input is drawn from the check's seed, and
    # the timer may perturb any of them
    inputs_vary = True
    fixed_inputs = ()

    @property
    def perturb_timed_inputs(self) -> bool:
        return not self.memory_bound

    def throughput(self, shape: Shape, seconds: float) -> float:
        amount = self.bytes_per_shape(shape) if self.memory_bound else self.flops(shape)
        return amount / seconds / 1e9 if seconds > 0 else 0.0

    def check_shape(self, shape: Sequence[int], dtype: str = "float32") -> str | None:
        if len(shape) != self.ndim:
            return f"operator {self.name} takes shapes {self.shape_help}, got {list(shape)}"
        return None
