"""GPU tests: marked `gpu`, skipped cleanly where no NVIDIA GPU with a working driver is visible."""

from __future__ import annotations

import pytest


def gpu_count() -> int:
    try:
        from cupy.cuda import runtime

        return int(runtime.getDeviceCount())
    except Exception:  # noqa: BLE001 - no CuPy, no driver or no device: no GPU
        return 0


def pytest_collection_modifyitems(config, items):
    have = gpu_count() > 0
    for item in items:
        if "tests/gpu" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)
            if not have:
                item.add_marker(pytest.mark.skip(reason="no NVIDIA GPU with a working driver"))
