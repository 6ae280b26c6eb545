"""Library baselines on the GPU: cuBLAS through cupy.matmul, CuPy composed ops, PyTorch ops when
torch is importable. Each baseline is prepared once (inputs converted outside the timed region)
and returns `(run, fetch)`: run() launches the library work, fetch() gives its outputs as CuPy
arrays in the catalog's storage dtype for verification."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from app.catalog.protocol import to_storage

Prepared = tuple[Callable[[], Any], Callable[[], dict[str, Any]]]


def torch_or_none() -> Any:
    try:
        return importlib.import_module("torch")
    except Exception:  # noqa: BLE001 - a broken torch install (CUDA mismatch...) is "no torch"
        return None


def cupy_supports(dtype: str) -> bool:
    return dtype in ("float32", "float16")  # bfloat16 arrays are uint16 bits to CuPy


def widen(cp: Any, x: Any) -> Any:
    """float32 values of a stored array; bfloat16 (uint16 bits to CuPy) by a 16-bit shift."""
    if x.dtype == cp.uint16:
        return (x.astype(cp.uint32) << 16).view(cp.float32)
    return x.astype(cp.float32)


def narrow(cp: Any, y: Any, like: Any) -> Any:
    """float32 values stored as `like` is (app.catalog.protocol.to_storage: bfloat16 rounded
    to nearest even, in float32), so composed baselines run without torch too."""
    if like.dtype == cp.uint16:
        return to_storage(cp, y, "bfloat16")
    return y.astype(like.dtype)


def to_torch(torch: Any, arr: Any, dtype: str) -> Any:
    if dtype == "bfloat16":
        import cupy

        return torch.from_dlpack(arr.view(cupy.int16)).view(torch.bfloat16)
    return torch.from_dlpack(arr)


def from_torch(torch: Any, tensor: Any, dtype: str) -> Any:
    import cupy

    tensor = tensor.contiguous()
    if dtype == "bfloat16":
        return cupy.from_dlpack(tensor.view(torch.int16)).view(cupy.uint16)
    return cupy.from_dlpack(tensor)


def cupy_baseline(compute: Callable[..., Any], names: tuple[str, ...], out_name: str = "y") -> Callable[..., Prepared]:
    """Wrap `compute(*inputs) -> cupy array` as a prepared baseline."""

    def make(inputs: dict[str, Any], shape: list[int], dtype: str) -> Prepared:
        args = [inputs[n] for n in names]
        box: dict[str, Any] = {}

        def run() -> None:
            box[out_name] = compute(*args)

        return run, lambda: {out_name: box[out_name]}

    return make


def torch_baseline(compute: Callable[..., Any], names: tuple[str, ...], out_name: str = "y") -> Callable[..., Prepared]:
    """Wrap `compute(torch, *tensors) -> tensor` as a prepared baseline."""

    def make(inputs: dict[str, Any], shape: list[int], dtype: str) -> Prepared:
        torch = torch_or_none()
        if torch is None:
            raise RuntimeError("torch is not importable")
        tensors = [to_torch(torch, inputs[n], dtype) for n in names]
        box: dict[str, Any] = {}

        def run() -> None:
            box[out_name] = compute(torch, *tensors)

        return run, lambda: {out_name: from_torch(torch, box[out_name], dtype)}

    return make


def row_major_gemm_ex(m: int, n: int, k: int) -> tuple[int, int, int, str, int, str, int, int]:
    """cuBLAS is column-major: a row-major C[m, n] = A[m, k] @ B[k, n] is the column-major
    C^T[n, m] = B^T[n, k] @ A^T[k, m] on the same buffers, with no transposes.
    (rows, cols, inner, first operand, its leading dim, second operand, its leading dim, ldc)."""
    return n, m, k, "b", n, "a", k, n


def cublas_gemm_ex(dtype: str) -> Callable[..., Prepared]:
    """C = A @ B through cuBLAS's gemmEx (fp32 accumulation, tensor cores) by CuPy's binding:
    the library GEMM for bfloat16 without torch (cupy.matmul takes no bfloat16)."""

    def make(inputs: dict[str, Any], shape: list[int], _dtype: str) -> Prepared:
        import cupy
        import numpy
        from cupy_backends.cuda.libs import cublas

        m, n, k = (int(d) for d in shape)
        kind = {"bfloat16": cupy.cuda.runtime.CUDA_R_16BF, "float16": cupy.cuda.runtime.CUDA_R_16F}[dtype]
        rows, cols, inner, first, ld_first, second, ld_second, ldc = row_major_gemm_ex(m, n, k)
        a, b = (cupy.ascontiguousarray(inputs[name]) for name in ("a", "b"))
        operands = {"a": a, "b": b}
        c = cupy.empty((m, n), dtype=a.dtype)
        one, zero = numpy.array(1.0, numpy.float32), numpy.array(0.0, numpy.float32)
        handle = cupy.cuda.device.get_cublas_handle()

        def run() -> None:
            cublas.setStream(handle, cupy.cuda.get_current_stream().ptr)
            mode = cublas.getPointerMode(handle)
            cublas.setPointerMode(handle, cublas.CUBLAS_POINTER_MODE_HOST)  # alpha, beta: host
            try:
                cublas.gemmEx(handle, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, rows, cols, inner,
                              one.ctypes.data, operands[first].data.ptr, kind, ld_first,
                              operands[second].data.ptr, kind, ld_second, zero.ctypes.data,
                              c.data.ptr, kind, ldc, cublas.CUBLAS_COMPUTE_32F,
                              cublas.CUBLAS_GEMM_DEFAULT_TENSOR_OP)
            finally:
                cublas.setPointerMode(handle, mode)

        return run, lambda: {"c": c}

    return make
