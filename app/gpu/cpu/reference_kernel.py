"""A custom goal's reference kernel source (C): the user's trusted version of the kernel, with
the kernel's signature. It runs only in a worker (inside the sandbox): built once per content
through compile_library (which a sealed worker routes to its compile helper), with the goal's
defines and the space's first valid configuration (CustomOperator.reference_config), then called on copies of the inputs. Importing
this module registers the runner with the custom operator (the catalog never imports backends)."""

from __future__ import annotations

import ctypes
import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from app.catalog.custom.operator import REFERENCE_KERNEL_RUNNERS
from app.gpu.cpu.toolchain import compile_library, kernels_dir, toolchain

if TYPE_CHECKING:
    from app.catalog.custom.operator import CustomOperator

_LOADED: dict[str, Any] = {}  # per process: build key -> the loaded function


def reference_defines(op: CustomOperator, shape: Sequence[int]) -> dict[str, Any]:
    try:
        config = op.reference_config()
    except ValueError as exc:
        raise RuntimeError(f"{op.spec.reference_source_name}: {exc}") from None
    return {**op.spec.param_defines(shape), **config}


def _function(op: CustomOperator, shape: Sequence[int]) -> Any:
    spec, tc = op.spec, toolchain()
    defines = reference_defines(op, shape)
    key = hashlib.sha256(repr((spec.reference_source, spec.reference_entry, sorted(defines.items()),
                               tc.identity, tc.flags)).encode()).hexdigest()[:16]
    if (fn := _LOADED.get(key)) is not None:
        return fn
    lib = kernels_dir() / f"reference-source-{key}.so"
    if not lib.exists():
        ok, log = compile_library(spec.reference_source, defines, lib, tc, 120)
        if not ok:
            first = next((ln for ln in log.splitlines() if "error" in ln), log.strip()[:300])
            raise RuntimeError(f"{spec.reference_source_name} does not compile: {first.strip()}")
    try:
        fn = getattr(ctypes.CDLL(str(lib)), spec.reference_entry)
    except AttributeError:
        raise RuntimeError(f"{spec.reference_source_name} exports no function "
                           f"{spec.reference_entry!r} (static?)") from None
    fn.argtypes, fn.restype = op.c_argtypes(), None
    _LOADED[key] = fn
    return fn


def run_reference_kernel(op: CustomOperator, arrays: dict[str, np.ndarray],
                         shape: Sequence[int]) -> dict[str, np.ndarray]:
    """The reference kernel's outputs (in each output's dtype) for the inputs in `arrays`."""
    fn = _function(op, shape)
    inputs = {a.name: np.array(arrays[a.name], dtype=a.dtype, order="C", copy=True)
              for a in op.spec.args if a.is_input}
    outputs = {name: np.zeros(sizes, dtype=op._arg[name].dtype)
               for name, sizes in op.output_shapes(shape).items()}
    op.prepare_call(fn, inputs, outputs, shape)()
    return outputs


REFERENCE_KERNEL_RUNNERS["c"] = run_reference_kernel
