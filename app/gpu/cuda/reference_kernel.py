"""A reference kernel source (CUDA): the user's trusted kernel, with the kernel's signature.
Rendered like a candidate (Kernel Tuner's #define preamble, extern "C") at the space's first
valid configuration (CustomOperator.reference_config), compiled with NVRTC (app.gpu.cuda.nvrtc, as candidates are) and launched with the
goal's geometry for that configuration. It runs only in the GPU worker, where the verification's
xp is CuPy; without a GPU it is compile-checked (probe_reference, the preview, the tests).
Importing this module registers the runner with the custom operator (the catalog never imports
backends)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from app.catalog.custom.operator import REFERENCE_KERNEL_RUNNERS
from app.gpu.cuda import nvrtc
from app.gpu.cuda.cubin_symbols import object_sizes
from app.gpu.sandbox.private import private_dir

if TYPE_CHECKING:
    from app.catalog.custom.operator import CustomCudaOperator
    from app.gpu.cuda.nvrtc import CompiledKernel

COMPILE_CHECK_ARCH = "sm_80"  # without a GPU: an arch every supported device can run
_LOADED: dict[tuple, Any] = {}  # per process: (digest, shape, arch) -> (function, launch, module)


class ReferenceKernelError(RuntimeError):
    """The reference kernel cannot be built or launched; the message is one line."""


def reference_config(op: CustomCudaOperator) -> dict[str, Any]:
    return op.reference_config()


def render_reference(op: CustomCudaOperator, shape: Sequence[int]) -> str:
    # compiler messages give the line in the user's file
    body = f'#line 1 "{op.spec.reference_source_name}"\n' + op.spec.reference_source
    return op.render(reference_config(op), list(shape), op.spec.dtype, source=body)


def compile_reference(op: CustomCudaOperator, shape: Sequence[int], arch: str = COMPILE_CHECK_ARCH,
                      cache: Any = None) -> CompiledKernel:
    """The reference's cubin for `shape` (ReferenceKernelError names the file when NVRTC
    refuses it or the entry is missing). Cached in this cell's own scratch by default: a cubin
    in the shared cache could have been planted by another cell (app.gpu.sandbox.private)."""
    if cache is None:
        cache = private_dir("cuda-references")

    spec = op.spec
    try:
        config = reference_config(op)
    except ValueError as exc:
        raise ReferenceKernelError(f"{spec.reference_source_name}: {exc}") from None
    problem = op.static_check(config, list(shape), spec.dtype)
    if problem:
        raise ReferenceKernelError(f"{spec.reference_source_name} at its reference "
                                   f"configuration ({_config_text(config)}): {problem}")
    try:
        return nvrtc.compile_source(render_reference(op, shape), spec.reference_entry, arch,
                                    cache=cache, filename=spec.reference_source_name)
    except nvrtc.CompileError as exc:
        raise ReferenceKernelError(f"{spec.reference_source_name} does not compile with NVRTC: "
                                   f"{exc}") from None


def device_arch(cp: Any) -> str:
    """The current device's target (sm_XX), as the CUDA worker picks it for candidates."""
    device = cp.cuda.Device()
    cc = getattr(device, "compute_capability", None)
    if cc is None:
        props = cp.cuda.runtime.getDeviceProperties(getattr(device, "id", 0))
        cc = f"{props['major']}{props['minor']}"
    return f"sm_{cc}"


def _function(op: CustomCudaOperator, cp: Any, shape: Sequence[int]) -> tuple[Any, Any, Any, Any]:
    try:
        arch = nvrtc.target_arch(device_arch(cp), op.spec.reference_source)
    except nvrtc.CompileError as exc:  # Hopper-only instructions on another device
        raise ReferenceKernelError(f"{op.spec.reference_source_name}: {exc}") from None
    key = (op.spec.digest, tuple(int(d) for d in shape), arch)
    found = _LOADED.get(key)
    if found is None:
        built = compile_reference(op, shape, arch)
        module = cp.cuda.function.Module()
        with open(built.cubin_path, "rb") as fh:
            module.load(fh.read())
        launch = op.launch(reference_config(op), list(shape), op.spec.dtype)
        found = _LOADED[key] = (module.get_function(op.spec.reference_entry), launch, module,
                                object_sizes(built.cubin_path))
    return found


def run_reference_cuda(op: CustomCudaOperator, xp: Any, inputs: dict[str, Any],
                       shape: Sequence[int]) -> dict[str, Any]:
    """The reference kernel's outputs (device arrays in each output's dtype) for the inputs
    (float64 views of the storage arrays, as the verification hands them over)."""
    if not hasattr(xp, "cuda"):
        raise ReferenceKernelError(f"the reference kernel {op.spec.reference_source_name} runs on "
                                   "the GPU only (the verification here is not on a device)")
    fn, launch, module, sizes = _function(op, xp, shape)
    spec = op.spec
    arrays = {a.name: xp.ascontiguousarray(xp.asarray(inputs[a.name]).astype(a.dtype))
              for a in spec.args if a.is_input}
    outputs = {name: (arrays[name].reshape(sizes).copy() if op._arg[name].role == "inout"
                      else xp.zeros(sizes, dtype=op._arg[name].dtype))
               for name, sizes in op.output_shapes(shape).items()}
    args = op.kernel_args(reference_config(op), arrays, outputs, list(shape))
    constants = op.constant_copy(xp, module, arrays, sizes)  # its own __constant__ arrays
    if constants is not None:
        constants()
    fn(launch.grid, launch.block, args, shared_mem=launch.shared_bytes)
    xp.cuda.Device().synchronize()
    return outputs


def _config_text(config: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items()) or "no tunables"


REFERENCE_KERNEL_RUNNERS["cuda"] = run_reference_cuda
