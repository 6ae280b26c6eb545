"""The user's Python reference (`module.py:function`, numpy in, arrays out). It runs only in a
worker process (inside the sandbox): the operator calls it from the verification there, and
`probe_reference` checks it (or a reference kernel source) once per run in a worker of its
own. The engine and the GUI only ever parse its text (app.catalog.custom.spec)."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from app.catalog.custom.operator import CustomOperator

_LOADED: dict[str, Callable[..., Any]] = {}  # per process: spec digest -> function


def _function(op: CustomOperator) -> Callable[..., Any]:
    spec = op.spec
    fn = _LOADED.get(spec.digest)
    if fn is None:
        module = types.ModuleType(spec.reference_file.removesuffix(".py") or "reference")
        module.__file__ = spec.reference_file
        exec(compile(spec.reference_text, spec.reference_file, "exec"), module.__dict__)  # noqa: S102 - worker only
        fn = getattr(module, spec.reference_function)
        _LOADED[spec.digest] = fn
    return fn


def run_reference(op: CustomOperator, args: dict[str, Any], checked: Sequence[str]) -> dict[str, Any]:
    """Call the reference with the inputs and scalars as keyword arguments (only those it
    takes, unless it takes **kwargs); its outputs by name."""
    fn = _function(op)
    params = inspect.signature(fn).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        args = {k: v for k, v in args.items() if k in params}
    result = fn(**args)
    if isinstance(result, dict):
        return result
    if isinstance(result, (tuple, list)) and len(checked) != 1:
        if len(result) != len(checked):
            raise ValueError(f"the reference returned {len(result)} arrays; {len(checked)} outputs "
                             f"are checked ({', '.join(checked)})")
        return dict(zip(checked, result))
    if not checked:
        return {}
    return {checked[0]: np.asarray(result)}


class ReferenceProbe:
    """A worker handler (app.gpu.worker) that runs the reference once on the first goal shape."""

    def __init__(self, op: CustomOperator) -> None:
        self.op = op

    def __call__(self, request: tuple, progress: Callable[[str], None]) -> dict[str, Any]:
        shape = list(request[1])
        progress("verify")
        xp = np
        if self.op.language == "cuda" and self.op.spec.reference_source:
            from app.catalog.custom.reference_cuda import ReferenceKernelError, compile_reference

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
    from app.gpu.worker import Deadlines, WorkerPool

    # a CUDA reference kernel is compiled (and, with a GPU, launched) in a GPU cell
    kind = "gpu" if op.language == "cuda" and op.spec.reference_source else "cpu"
    pool = WorkerPool("app.catalog.custom.reference:ReferenceProbe", [(op,)], kind=kind,
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
