"""Checks a custom goal's reference once per run, in a worker of its own (a CPU cell, or a GPU
cell for a CUDA reference kernel): the Python reference is called, a reference kernel is built
and run (compile-checked with NVRTC where there is no GPU). One line when it fails."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from app.catalog.custom.operator import CustomOperator
from app.gpu.cpu import reference_kernel  # noqa: F401 - registers the C reference runner
from app.gpu.cuda.reference_kernel import ReferenceKernelError, compile_reference
from app.gpu.worker import Deadlines, WorkerPool


class ReferenceProbe:
    """A worker handler (app.gpu.worker) that runs the reference once on the first goal shape."""

    def __init__(self, op: CustomOperator) -> None:
        self.op = op

    def __call__(self, request: tuple, progress: Callable[[str], None]) -> dict[str, Any]:
        shape = list(request[1])
        progress("verify")
        xp = np
        if self.op.language == "cuda" and self.op.spec.reference_source:
            xp = _gpu_array_module()
            if xp is None:  # no GPU here: NVRTC still checks that it compiles
                try:
                    compile_reference(self.op, shape)
                except ReferenceKernelError as exc:
                    return {"ok": False, "detail": str(exc)}
                return {"ok": True, "detail": "compile-checked with NVRTC (no GPU)"}
        inputs = self.op.make_inputs(xp, shape, self.op.spec.dtype, xp.random.default_rng(1))
        x64 = {k: v.astype(np.float64) for k, v in inputs.items()}
        try:
            with np.errstate(all="ignore"):
                self.op.reference(xp, x64, shape)
        except Exception as exc:  # noqa: BLE001 - the user's code: any error is the answer
            text = str(exc) if type(exc).__name__ == "ReferenceKernelError" else f"{type(exc).__name__}: {exc}"
            return {"ok": False, "detail": text}
        return {"ok": True, "detail": ""}


def _gpu_array_module() -> Any:
    """CuPy when a GPU is visible to this worker, else None."""
    try:
        import cupy

        return cupy if cupy.cuda.runtime.getDeviceCount() > 0 else None
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no device: no GPU
        return None


def probe_reference(op: CustomOperator, shape: Sequence[int], timeout_s: float = 60.0) -> str | None:
    """None when the reference runs on `shape`; otherwise what went wrong, in one line."""
    if not (op.spec.reference_text or op.spec.reference_source):
        return None
    # a CUDA reference kernel is compiled (and, with a GPU, launched) in a GPU cell
    kind = "gpu" if op.language == "cuda" and op.spec.reference_source else "cpu"
    pool = WorkerPool("app.gpu.custom_reference.probe:ReferenceProbe", [(op,)], kind=kind,
                      name="reference-", recycle_after=1)
    try:
        reply = pool.call(("probe", list(shape)), Deadlines(compile_s=timeout_s, run_s=timeout_s))
    finally:
        pool.close()
    if reply.fault is not None:
        return f"the reference did not finish: {reply.fault.detail}"
    if not reply.result.get("ok"):
        if op.spec.reference_source:
            return (f"the reference kernel {op.spec.reference_source_name} "
                    f"({op.spec.reference_entry}) failed: {reply.result['detail']}")
        return f"{op.spec.reference_file}:{op.spec.reference_function} raised {reply.result['detail']}"
    return None
