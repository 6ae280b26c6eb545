"""Baselines a compiler builds: Triton's fused kernels (app.catalog.cuda.triton_kernels) and
torch.compile (Inductor, which writes Triton too). Both compile on their first call by starting
ptxas and a C compiler, so they run only in the trusted baseline cell. Each maker has the
shape of app.catalog.cuda.baselines': `make(inputs, shape, dtype) -> (run, fetch)`, with the
work (compilation included) done once before anything is timed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.catalog.cuda.baselines import Prepared, from_torch, to_torch, torch_or_none

COMPILERS = ("triton", "torch.compile")  # the compiled baselines' kinds (their names' prefixes)


def compiled_kinds(baselines: dict[str, Any], compilers: tuple[str, ...]) -> dict[str, Any]:
    """The baselines whose kind (the name before ':') is one of `compilers`."""
    return {n: b for n, b in baselines.items() if n.split(":", 1)[0] in compilers}


def _torch(why: str) -> Any:
    torch = torch_or_none()
    if torch is None:
        raise RuntimeError(f"torch is not importable ({why})")
    return torch


def triton_baseline(op_name: str, names: tuple[str, ...], eps: float | None = None,
                    out_name: str = "y") -> Callable[..., Prepared]:
    """The Triton kernel of `op_name` on the inputs `names` (in its argument order); the output
    has the first input's shape and dtype, and the row length is the shape's last size."""

    def make(inputs: dict[str, Any], shape: list[int], dtype: str) -> Prepared:
        torch = _torch("Triton's baselines launch on torch tensors")
        from app.catalog.cuda import triton_kernels

        tensors = [to_torch(torch, inputs[n], dtype) for n in names]
        out = torch.empty_like(tensors[0])
        n_cols = int(shape[-1])
        if op_name != "bias_gelu":
            triton_kernels.row_block(n_cols)  # a row too long for one program: say so now

        def run() -> None:
            triton_kernels.launch(op_name, tensors, out, n_cols, eps)

        return run, lambda: {out_name: from_torch(torch, out, dtype)}

    return make


def torch_compiled_baseline(compute: Callable[..., Any], names: tuple[str, ...],
                            out_name: str = "y") -> Callable[..., Prepared]:
    """`compute(torch, *tensors)` through torch.compile (default mode, static shapes: one
    graph per goal shape, as a deployment would compile it)."""

    def make(inputs: dict[str, Any], shape: list[int], dtype: str) -> Prepared:
        torch = _torch("torch.compile")
        compiled = torch.compile(lambda *ts: compute(torch, *ts), dynamic=False, fullgraph=True)
        tensors = [to_torch(torch, inputs[n], dtype) for n in names]
        box: dict[str, Any] = {}

        def run() -> None:
            box[out_name] = compiled(*tensors)

        return run, lambda: {out_name: from_torch(torch, box[out_name], dtype)}

    return make
