"""Operators KernelSwarm can optimise, per backend.

Each backend's operator modules register themselves here; `known_operators(backend)` is what
goal validation and the GUI's operator picker read.
"""

from __future__ import annotations

import importlib
from typing import Any

_REGISTRY: dict[str, dict[str, Any]] = {}
_BACKEND_MODULES = {"cpu": "app.catalog.cpu", "cuda": "app.catalog.cuda"}


def register(backend: str, name: str, operator: Any) -> None:
    _REGISTRY.setdefault(backend, {})[name] = operator


def _load(backend: str) -> None:
    module = _BACKEND_MODULES.get(backend)
    if module and backend not in _REGISTRY:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
        _REGISTRY.setdefault(backend, {})


def known_operators(backend: str) -> dict[str, Any]:
    _load(backend)
    return dict(_REGISTRY.get(backend, {}))


def get_operator(backend: str, name: str) -> Any:
    ops = known_operators(backend)
    if name not in ops:
        raise KeyError(f"unknown operator {name!r} for backend {backend}; known: {', '.join(sorted(ops))}")
    return ops[name]
