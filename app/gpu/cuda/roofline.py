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


def device_key(name: str, driver: str, ident: str = "") -> str:
    return f"{name}|driver {driver}|{ident}"


MAX_AGE_S = 7 * 24 * 3600.0  # a stored roof older than this is measured again
SPOT_TOLERANCE = 0.05  # a quick re-measurement further than this from the stored roof: re-measure


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _stale_reason(entry: Any, now: float, max_age_s: float) -> str:
    if not isinstance(entry, dict) or not isinstance(entry.get("copy_bw"), (int, float)) \
            or entry["copy_bw"] <= 0:
        return "none stored"
    stale = now - float(entry.get("measured_at", 0.0)) > max_age_s
    return f"older than {max_age_s / 86400:.0f} days" if stale else ""


def cached_copy_bandwidth(key: str, measure: Callable[[], float], path: Path | None = None,
                          refresh: bool = False, *, spot_check: Callable[[], float] | None = None,
                          clocks: Callable[[], dict[str, float]] | None = None,
                          max_age_s: float = MAX_AGE_S, now: Callable[[], float] = time.time,
                          ) -> tuple[float, bool]:
    """Copy bandwidth for `key`, from the cache file or measured (and stored, with the clocks it
    was measured at). A stored value is measured again when missing, older than `max_age_s`, or
    when a quick `spot_check` measurement disagrees with it by more than 5% (so one bad first
    measurement does not skew every "% of roof" for good). `spot_check` and `clocks` default to
    the `measure` callable's own (CopyRoof has both). Returns (bytes/s, came_from_cache)."""
    path = path or cache_dir() / "roofline.json"
    spot_check = spot_check or getattr(measure, "spot_check", None)
    clocks = clocks or getattr(measure, "clocks", None)
    data = _load(path)
    entry = data.get(key)
    why = "refresh asked" if refresh else _stale_reason(entry, now(), max_age_s)
    spot: float | None = None
    if not why and spot_check is not None:
        spot = float(spot_check())
        stored = float(entry["copy_bw"])
        if spot > 0 and abs(spot - stored) / stored > SPOT_TOLERANCE:
            why = f"spot check {spot / 1e9:.0f} GB/s vs stored {stored / 1e9:.0f} GB/s"
    if not why:
        return float(entry["copy_bw"]), True
    bw = float(measure())
    if not bw > 0:
        raise ValueError(f"measured copy bandwidth {bw} is not positive")
    record: dict[str, Any] = {"copy_bw": bw, "measured_at": now(), "why": why}
    if spot is not None:
        record["spot_check"] = spot
    record.update({f"{name}_bw": v for name, v in (getattr(measure, "parts", None) or {}).items()})
    if clocks is not None:
        try:
            record["clocks"] = dict(clocks())
        except Exception:  # noqa: BLE001 - clocks are a record, not a must
            record["clocks"] = {}
    data[key] = record
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    tmp.replace(path)
    return bw, False


# A grid-stride copy moving 16 bytes per thread and load (uint4), several in flight per thread:
# on Hopper it can beat cudaMemcpy device-to-device, which would make an honest kernel look
# faster than the roof.
VECTOR_COPY = r"""
extern "C" __global__ void __launch_bounds__(256) ks_vector_copy(const uint4* __restrict__ src,
                                                                 uint4* __restrict__ dst, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
        dst[i] = a; dst[i + stride] = b; dst[i + 2 * stride] = c; dst[i + 3 * stride] = d;
    }
    for (; i < n; i += stride) dst[i] = src[i];
}
"""


def _median_seconds(cp: Any, run: Callable[[], None], repeats: int, warmup: int = 3) -> float:
    times = []
    for i in range(repeats + warmup):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        run()
        b.record()
        b.synchronize()
        if i >= warmup:
            times.append(cp.cuda.get_elapsed_time(a, b) / 1e3)
    return sorted(times)[len(times) // 2]


class CopyRoof:
    """Copy bandwidth of the current CuPy device (bytes read + written per second): the better
    of a device-to-device cudaMemcpy and a vectorised copy kernel, each the median of `repeats`
    event-timed copies of a buffer well beyond L2. `spot_check()` is the same, with few repeats;
    `clocks()` the SM and memory clocks now; `parts` the two figures of the last measurement."""

    def __init__(self) -> None:
        self.parts: dict[str, float] = {}
        self.error = ""

    def __call__(self, nbytes: int | None = None, repeats: int = 20) -> float:
        import cupy as cp

        dev = cp.cuda.Device()
        l2 = dev.attributes.get("L2CacheSize", 50 << 20)
        free, _ = cp.cuda.runtime.memGetInfo()
        size = nbytes or int(min(max(16 * l2, 1 << 30), free // 4))
        size -= size % 256
        src, dst = cp.empty(size, dtype=cp.uint8), cp.empty(size, dtype=cp.uint8)
        src.fill(1)
        memcpy = 2.0 * size / _median_seconds(
            cp, lambda: dst.data.copy_from_device_async(src.data, size), repeats)
        self.parts, self.error = {"memcpy": memcpy}, ""
        try:
            kernel = cp.RawKernel(VECTOR_COPY, "ks_vector_copy")
            blocks = int(dev.attributes.get("MultiProcessorCount", 132)) * 8
            args = (src, dst, cp.int64(size // 16))
            dst.fill(0)
            vector = 2.0 * size / _median_seconds(cp, lambda: kernel((blocks,), (256,), args), repeats)
            if not bool((dst[-4096:] == 1).all()):  # a copy that did not copy is no roof
                raise RuntimeError("the vectorised copy kernel did not copy")
            self.parts["vector_kernel"] = vector
        except Exception as exc:  # noqa: BLE001 - the memcpy alone is still a roof
            self.error = f"vectorised copy kernel: {exc}"[:200]
        return max(self.parts.values())

    def spot_check(self) -> float:
        saved = dict(self.parts)
        try:
            return self(repeats=5)
        finally:
            self.parts = saved

    def clocks(self) -> dict[str, float]:
        import cupy as cp

        from app.gpu.cuda import telemetry

        reading = telemetry.read(cp.cuda.Device().id)
        return {k: reading[k] for k in ("sm_clock_mhz", "mem_clock_mhz", "power_w", "temperature_c")
                if k in reading}


measure_copy_bandwidth = CopyRoof()
