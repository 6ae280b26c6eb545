"""The user's Python reference (`module.py:function`, numpy in, arrays out). It runs only in a
worker process (inside the sandbox): the operator calls it from the verification there, and
app.gpu.custom_reference.probe checks it (or a reference kernel source) once per run in a worker
of its own. The engine and the GUI only ever parse its text (app.catalog.custom.spec)."""

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
