"""The cuda backend: NVRTC compile, GPU worker processes, CUDA-event timing, NVML telemetry,
roofline limits. Importing this package does not import CuPy; CudaEvaluator is loaded lazily."""

from __future__ import annotations

from typing import Any

__all__ = ["CudaEvaluator", "visible_devices"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from app.gpu.cuda import evaluator

        return getattr(evaluator, name)
    raise AttributeError(name)
