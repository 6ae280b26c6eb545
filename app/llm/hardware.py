"""The hardware sheet every prompt carries: what a performance engineer looks up first.

CPU: the model, cores, the data caches (sysfs, as the memory roof probe reads them), and the
measured figures when the run has them (per-level copy bandwidth and the FP32
peak, from app.gpu.cpu.memory_roof / app.gpu.cpu.compute_roof). CUDA: the device's resources from a
table by name and compute capability, as KernelBench does (SMs, shared memory and registers per
SM and per block, L2, HBM bandwidth, peak TFLOP/s per dtype from app.gpu.cuda.roofline), the
measured copy bandwidth, the NVRTC options and the target arch.

Every line is the product's own (tables, sysfs, measurements); nothing here comes from a model.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.core.evaluator import Evaluator

log = logging.getLogger(__name__)

# per compute capability: (shared memory per SM KB, per block KB (opt-in), max threads per SM,
# registers per SM, max registers per thread)
ARCH = {
    "90": (228, 227, 2048, 65536, 255), "89": (100, 99, 1536, 65536, 255),
    "86": (100, 99, 1536, 65536, 255), "80": (164, 163, 2048, 65536, 255),
    "75": (64, 64, 1024, 65536, 255), "70": (96, 96, 2048, 65536, 255),
}
# name pattern -> (SMs, L2 MB, HBM/GDDR GB/s datasheet); first match wins
DEVICES: list[tuple[str, tuple[int, int, int]]] = [
    (r"GH200|H200", (132, 50, 4800)), (r"H100.*PCIe", (114, 50, 2000)),
    (r"H100.*NVL", (132, 50, 3900)), (r"H100|H800", (132, 50, 3350)),
    (r"A100", (108, 40, 2039)), (r"A10G", (80, 6, 600)), (r"A10\b", (72, 6, 600)),
    (r"L40S", (142, 96, 864)), (r"L40\b", (142, 96, 864)), (r"L4\b", (58, 48, 300)),
    (r"RTX 4090", (128, 72, 1008)), (r"RTX 4080", (76, 64, 717)),
    (r"RTX 3090", (82, 6, 936)), (r"RTX 3080", (68, 5, 760)), (r"RTX A6000", (84, 6, 768)),
    (r"V100", (80, 6, 900)), (r"T4\b", (40, 4, 320)),
]



def sheet(language: str, device: str, dtype: str, measured: dict[str, Any] | None = None,
          arch: str = "") -> list[str]:
    """The HARDWARE lines for a prompt."""
    measured = measured or {}
    if language == "cuda":
        return _cuda(device, dtype, measured, arch)
    return _cpu(device, measured)


def _cpu(device: str, measured: dict[str, Any]) -> list[str]:
    lines = [f"cpu: {device or _cpu_model() or 'unknown'}, {os.cpu_count() or 1} logical cores"]
    caches = _caches()
    if caches:
        lines.append("data caches: " + ", ".join(caches))
    bw = measured.get("bandwidth_gbs") or {}
    if bw:
        lines.append("measured copy bandwidth, all threads (GB/s): " + ", ".join(
            f"{level} {v:.0f}" for level, v in bw.items() if isinstance(v, (int, float))))
    peak = measured.get("peak_gflops")
    if isinstance(peak, (int, float)) and peak > 0:
        one = measured.get("peak_gflops_one_thread")
        lines.append(f"measured FP32 peak: {peak:.0f} GFLOP/s at every thread"
                     + (f", {one:.0f} at one thread" if isinstance(one, (int, float)) else ""))
    return lines


def _caches() -> list[str]:
    try:
        from app.gpu.cpu.memory_roof import cache_levels

        out = []
        for lv in cache_levels():
            if lv.name == "DRAM" or not lv.size_bytes:
                continue
            size = (f"{lv.size_bytes // 2**20} MiB" if lv.size_bytes >= 2**20
                    else f"{lv.size_bytes // 2**10} KiB")
            out.append(f"{lv.name} {size}" + (f" shared by {lv.shared_by} cores" if lv.shared_by > 1
                                              else " per core"))
        return out
    except (ImportError, OSError, ValueError, AttributeError):
        return []


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def _cuda(device: str, dtype: str, measured: dict[str, Any], arch: str) -> list[str]:
    cc = _cc(device, arch)
    lines = [f"gpu: {device or 'unknown'}"]
    table = next((v for p, v in DEVICES if re.search(p, device, re.IGNORECASE)), None)
    res = ARCH.get(cc)
    if table:
        sms, l2, hbm = table
        lines.append(f"{sms} SMs, L2 {l2} MB, memory bandwidth {hbm} GB/s (datasheet)")
    if res:
        smem, smem_block, threads, regs, per_thread = res
        lines.append(f"per SM: {smem} KB shared memory, {regs} registers, {threads} threads; per "
                     f"block: up to {smem_block} KB dynamic shared memory (opt-in), 1024 threads; "
                     f"up to {per_thread} registers per thread")
    copy = measured.get("copy_gbs")
    if isinstance(copy, (int, float)) and copy > 0:
        lines.append(f"measured device copy bandwidth: {copy:.0f} GB/s")
    try:
        from app.gpu.cuda.roofline import peak_flops

        peaks = {d: peak_flops(device, d) for d in ("float32", "float16", "bfloat16")}
        shown = {d: p for d, p in peaks.items() if p}
        if shown:
            lines.append("peak dense TFLOP/s (datasheet): " + ", ".join(
                f"{d} {p / 1e12:.0f}" + (" (tensor cores)" if d != "float32" else "")
                for d, p in shown.items()) + f"; the goal computes in {dtype}")
    except ImportError:
        pass
    if cc:
        target = "sm_90a when the source uses wgmma/TMA/setmaxnreg, else sm_90" if cc == "90" \
            else f"sm_{cc}"
        lines.append(f"compile: NVRTC --std=c++17 --gpu-architecture={target} -Xptxas=-v "
                     "-DNDEBUG (no -use_fast_math)")
    return lines


def _cc(device: str, arch: str) -> str:
    m = re.search(r"sm_(\d+)", arch) or re.search(r"\bcc (\d)\.?(\d)", device)
    if m:
        return "".join(g for g in m.groups() if g)
    for pattern, cc in ((r"H100|H200|H800|GH200", "90"), (r"A100|A30\b", "80"),
                        (r"L40|L4\b|RTX 40", "89"), (r"A10|RTX 30|A6000", "86"),
                        (r"T4\b|RTX 20", "75"), (r"V100", "70")):
        if re.search(pattern, device, re.IGNORECASE):
            return cc
    return ""


def measured_figures(evaluator: Evaluator) -> dict[str, Any]:
    """What the run's evaluator measured for the sheet (per-level bandwidth, FP32 peak, copy
    bandwidth), each where its roof probe measures it; {} where it has none."""
    out: dict[str, Any] = {}
    try:
        limits = evaluator.limits()
        if limits is not None and limits.copy_bw:
            out["copy_gbs"] = limits.copy_bw / 1e9
        peak = evaluator.peak()
        if peak is not None:
            out["peak_gflops"] = peak.gflops(os.cpu_count() or 1)
            out["peak_gflops_one_thread"] = peak.gflops(1)
        roofs = evaluator.roofs()
        if roofs is not None and roofs.all_threads:
            out["bandwidth_gbs"] = dict(roofs.all_threads)
    except (AttributeError, OSError, RuntimeError, TypeError, ValueError) as exc:
        # a backend that cannot say: the sheet goes without the figure
        log.info("hardware sheet: no measured figures (%s)", exc)
    return out
