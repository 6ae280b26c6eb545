"""Library baselines on the GPU: cuBLAS through cupy.matmul, CuPy composed ops, PyTorch ops when
torch is importable. Each baseline is prepared once (inputs converted outside the timed region)
and returns `(run, fetch)`: run() launches the library work, fetch() gives its outputs as CuPy
arrays in the catalog's storage dtype for verification."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

Prepared = tuple[Callable[[], Any], Callable[[], dict[str, Any]]]


def torch_or_none() -> Any:
    try:
        return importlib.import_module("torch")
    except Exception:
        return None


def cupy_supports(dtype: str) -> bool:
    return dtype in ("float32", "float16")  # bfloat16 arrays are uint16 bits to CuPy


def widen(cp: Any, x: Any) -> Any:
    """float32 values of a stored array; bfloat16 (uint16 bits to CuPy) by a 16-bit shift."""
    if x.dtype == cp.uint16:
        return (x.astype(cp.uint32) << 16).view(cp.float32)
    return x.astype(cp.float32)


def narrow(cp: Any, y: Any, like: Any) -> Any:
    """float32 values stored as `like` is; bfloat16 rounded to nearest even (the GPU's own
    __float2bfloat16_rn for finite values), so composed baselines run without torch too."""
    if like.dtype == cp.uint16:
        u = cp.ascontiguousarray(y, dtype=cp.float32).view(cp.uint32)
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(cp.uint16)
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
