"""Hardware limits every result is shown against: measured device-to-device copy bandwidth
(once per device and driver, cached on disk) and peak FLOP/s per dtype from a table of known
devices (vendor datasheet figures, dense, no sparsity; leads, not measurements)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.paths import cache_dir

TFLOPS = 1e12

# name pattern -> {dtype: dense TFLOP/s}; first match wins, so specific names come first.
# float16/bfloat16 are tensor-core rates with fp32 accumulation; float32 is the CUDA-core rate.
PEAK_TABLE: list[tuple[str, dict[str, float]]] = [
    (r"GH200", {"float32": 67.0, "float16": 989.4, "bfloat16": 989.4, "float64": 67.0}),
    (r"H200", {"float32": 67.0, "float16": 989.4, "bfloat16": 989.4, "float64": 67.0}),
    (r"H100.*PCIe", {"float32": 51.2, "float16": 756.5, "bfloat16": 756.5, "float64": 51.2}),
    (r"H100.*NVL", {"float32": 60.0, "float16": 835.0, "bfloat16": 835.0, "float64": 60.0}),
    (r"H100", {"float32": 67.0, "float16": 989.4, "bfloat16": 989.4, "float64": 67.0}),
    (r"H800", {"float32": 67.0, "float16": 989.4, "bfloat16": 989.4, "float64": 1.0}),
    (r"A100", {"float32": 19.5, "float16": 312.0, "bfloat16": 312.0, "float64": 19.5}),
    (r"A10G", {"float32": 31.2, "float16": 70.0, "bfloat16": 70.0}),
    (r"A10\b", {"float32": 31.2, "float16": 125.0, "bfloat16": 125.0}),
    (r"L40S", {"float32": 91.6, "float16": 362.1, "bfloat16": 362.1}),
    (r"L40\b", {"float32": 90.5, "float16": 181.0, "bfloat16": 181.0}),
    (r"L4\b", {"float32": 30.3, "float16": 121.0, "bfloat16": 121.0}),
    (r"RTX 4090", {"float32": 82.6, "float16": 165.2, "bfloat16": 165.2}),
    (r"RTX 4080", {"float32": 48.7, "float16": 97.5, "bfloat16": 97.5}),
    (r"RTX 3090", {"float32": 35.6, "float16": 71.0, "bfloat16": 71.0}),
    (r"RTX 3080", {"float32": 29.8, "float16": 59.5, "bfloat16": 59.5}),
    (r"RTX A6000", {"float32": 38.7, "float16": 154.8, "bfloat16": 154.8}),
    (r"V100", {"float32": 15.7, "float16": 125.0, "float64": 7.8}),
    (r"T4\b", {"float32": 8.1, "float16": 65.0}),
]


def peak_flops(device_name: str, dtype: str) -> float | None:
    """Peak FLOP/s for a device and dtype, or None when the device or dtype is not known."""
    for pattern, rates in PEAK_TABLE:
        if re.search(pattern, device_name, re.IGNORECASE):
            rate = rates.get(dtype)
            return rate * TFLOPS if rate else None
    return None


@dataclass
class Limits:
    """A device's ceilings. copy_bw: bytes/s (read + write counted), peak: FLOP/s by dtype."""

    device: str
    copy_bw: float | None
    peak: dict[str, float]

    def time_floor_s(self, flops: float, nbytes: float, dtype: str) -> float | None:
        """The larger of bytes / copy bandwidth and FLOPs / peak: no kernel runs faster."""
        terms = []
        if self.copy_bw and nbytes:
            terms.append(nbytes / self.copy_bw)
        rate = self.peak.get(dtype)
        if rate and flops:
            terms.append(flops / rate)
        return max(terms) if terms else None

    def achieved(self, flops: float, nbytes: float, dtype: str, seconds: float) -> dict[str, float]:
        """GB/s, TFLOP/s and their % of the limits for a measured time."""
        out: dict[str, float] = {}
        if seconds <= 0:
            return out
        if nbytes:
            out["gbps"] = nbytes / seconds / 1e9
            if self.copy_bw:
                out["pct_copy_bw"] = 100.0 * nbytes / seconds / self.copy_bw
        if flops:
            out["tflops"] = flops / seconds / TFLOPS
            rate = self.peak.get(dtype)
            if rate:
                out["pct_peak_flops"] = 100.0 * flops / seconds / rate
        floor = self.time_floor_s(flops, nbytes, dtype)
        if floor:
            out["pct_of_limit"] = 100.0 * floor / seconds
        return out


def bandwidth_cache_path() -> Path:
    return cache_dir() / "roofline.json"


def device_key(name: str, driver: str, ident: str = "") -> str:
    return f"{name}|driver {driver}|{ident}"


def cached_copy_bandwidth(key: str, measure: Callable[[], float], path: Path | None = None,
                          refresh: bool = False) -> tuple[float, bool]:
    """Bandwidth for `key` from the cache file, measuring (and storing) it when missing.
    Returns (bytes/s, came_from_cache)."""
    path = path or bandwidth_cache_path()
    data: dict[str, Any] = {}
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError):
        data = {}
    entry = data.get(key)
    if not refresh and isinstance(entry, dict) and isinstance(entry.get("copy_bw"), (int, float)) \
            and entry["copy_bw"] > 0:
        return float(entry["copy_bw"]), True
    bw = float(measure())
    if not bw > 0:
        raise ValueError(f"measured copy bandwidth {bw} is not positive")
    data[key] = {"copy_bw": bw, "measured_at": time.time()}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)
    return bw, False


def measure_copy_bandwidth(nbytes: int | None = None, repeats: int = 20) -> float:
    """Device-to-device copy bandwidth in bytes/s (bytes read + bytes written over the median
    time of cudaMemcpyAsync device-to-device). Runs on the current CuPy device."""
    import cupy as cp

    dev = cp.cuda.Device()
    l2 = dev.attributes.get("L2CacheSize", 50 << 20)
    free, _ = cp.cuda.runtime.memGetInfo()
    size = nbytes or int(min(max(16 * l2, 1 << 30), free // 4))
    size -= size % 256
    src = cp.empty(size, dtype=cp.uint8)
    dst = cp.empty(size, dtype=cp.uint8)
    src.fill(1)
    times = []
    for i in range(repeats + 3):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        dst.data.copy_from_device_async(src.data, size)
        b.record()
        b.synchronize()
        if i >= 3:
            times.append(cp.cuda.get_elapsed_time(a, b) / 1e3)
    times.sort()
    del src, dst
    return 2.0 * size / times[len(times) // 2]
