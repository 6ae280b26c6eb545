#!/usr/bin/env python3
"""First contact with a GPU machine, in seconds, before anything long runs.

    python3 scripts/gpu_preflight.py [--out DIR] [--dry-run]

Checks, each timed and recorded (JSON at DIR/preflight.json):
  versions     Python, NumPy, CuPy (and which CUDA it was built for), NVRTC
  headers      where cuda_fp16.h / cuda_bf16.h are found; an fp16 + bf16 kernel compiles
  catalog      one catalog template compiles with NVRTC for the device's architecture
  launch       one kernel launches, its output verified, timed with CUDA events      [device]
  nvml         driver, compute mode, MIG, clocks, power limit, throttle reasons       [device]
  device       properties: SMs, memory, L2, shared memory per block                   [device]
  torch        torch and Triton available, a DLPack round trip, a tiny bf16 matmul    [device]
  triton       one of the catalog's Triton baselines compiles for the architecture (no device
               needed); the C compiler Triton's launcher needs; one launch checked [device]
  cell         another compiles inside a baseline cell (the sandbox lets Triton start its
               ptxas); on a device also Triton's driver module, built and loaded there

`--dry-run` runs every step that needs no device (on a machine without a GPU it is what
scripts/gpu-check --dry-run calls) and marks the others "skipped". A must-have that fails
(CuPy, NVRTC, headers, catalog compile, launch) ends the preflight with one line naming it and
exit status 1; the JSON is written either way.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MUST_HAVE = ("versions", "headers", "catalog", "launch")
HALF_KERNEL = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
extern "C" __global__ void ks_half(const __half *a, const __nv_bfloat16 *b, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __half2float(a[i]) + __bfloat162float(b[i]);
}
"""
AXPY_KERNEL = r"""
extern "C" __global__ void ks_axpy(const float *x, float *y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""


class Step:
    def __init__(self, name: str, report: dict) -> None:
        self.name, self.report = name, report

    def __enter__(self) -> dict:
        self.t0 = time.perf_counter()
        self.entry = {"ok": None, "seconds": 0.0}
        self.report["steps"][self.name] = self.entry
        return self.entry

    def __exit__(self, kind, exc, tb) -> bool:
        self.entry["seconds"] = round(time.perf_counter() - self.t0, 3)
        if isinstance(exc, KeyboardInterrupt):  # the time limit (timeout -s INT): stop here
            self.entry["ok"], self.entry["error"] = False, "interrupted (time limit)"
            return False
        if exc is not None:
            self.entry["ok"] = False
            self.entry["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
            self.entry["traceback"] = "".join(traceback.format_exception(kind, exc, tb))[-3000:]
        elif self.entry["ok"] is None and "skipped" not in self.entry:
            self.entry["ok"] = True
        return True  # recorded; the next step runs


def skip(entry: dict, why: str) -> None:
    entry["ok"], entry["skipped"] = None, why


def versions(entry: dict) -> None:
    import numpy

    entry.update(python=sys.version.split()[0], platform=platform.platform(), numpy=numpy.__version__)
    import cupy

    entry["cupy"] = cupy.__version__
    entry["cupy_package"] = next((d for d in ("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy")
                                  if _installed(d)), "?")
    from app.gpu.cuda import nvrtc

    entry["nvrtc"] = nvrtc.nvrtc_version()
    entry["include_options"] = nvrtc.include_options()


def _installed(dist: str) -> bool:
    from importlib import metadata

    try:
        metadata.version(dist)
        return True
    except metadata.PackageNotFoundError:
        return False


def headers(entry: dict, arch: str, cache: Path) -> None:
    from app.gpu.cuda import nvrtc

    found = {}
    for option in nvrtc.include_options():
        base = Path(option[2:])
        for name in ("cuda_fp16.h", "cuda_bf16.h"):
            if (base / name).exists():
                found.setdefault(name, str(base / name))
    entry["found"] = found
    if len(found) < 2:
        raise RuntimeError(f"cuda_fp16.h/cuda_bf16.h not found in {nvrtc.include_options()}")
    built = nvrtc.compile_source(HALF_KERNEL, "ks_half", arch, cache=cache)
    entry["compiled"] = {"registers": built.resource().registers, "seconds": round(built.compile_s, 3)}


def catalog(entry: dict, arch: str, cache: Path) -> None:
    """The softmax template at its first valid configuration, rendered and compiled."""
    from app.catalog import get_operator
    from app.gpu.cuda import nvrtc

    op = get_operator("cuda", "softmax")
    space = op.space("float32")
    import random

    config = space.sample(random.Random(0))
    shape = [256, 1024]
    source = op.render(config, shape, "float32")
    kernel = op.entry("float32") if hasattr(op, "entry") else op.kernel_for("float32")
    built = nvrtc.compile_source(source, kernel, arch, cache=cache)
    res = built.resource(kernel)
    entry.update(operator="softmax", config=config, kernel=kernel, registers=res.registers,
                 spill_stores=res.spill_stores, seconds=round(built.compile_s, 3))


def launch(entry: dict) -> None:
    import cupy as cp
    import numpy as np

    n = 1 << 20
    x = cp.arange(n, dtype=cp.float32)
    y = cp.ones(n, dtype=cp.float32)
    kernel = cp.RawKernel(AXPY_KERNEL, "ks_axpy")
    block = 256
    kernel(((n + block - 1) // block,), (block,), (x, y, np.float32(2.0), np.int32(n)))
    cp.cuda.Device().synchronize()
    expected = 2.0 * np.arange(n, dtype=np.float32) + 1.0
    if not np.array_equal(cp.asnumpy(y), expected):
        raise RuntimeError("the axpy kernel's output is wrong")
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(20):
        start.record()
        kernel(((n + block - 1) // block,), (block,), (x, y, np.float32(2.0), np.int32(n)))
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop))
    median = float(np.median(times))
    entry.update(verified=True, median_ms=round(median, 5),
                 gbs=round(3 * 4 * n / (median / 1e3) / 1e9, 1))


def nvml(entry: dict) -> None:
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        entry["driver"] = _text(pynvml.nvmlSystemGetDriverVersion())
        entry["name"] = _text(pynvml.nvmlDeviceGetName(handle))
        modes = {0: "default", 1: "exclusive_thread", 2: "prohibited", 3: "exclusive_process"}
        entry["compute_mode"] = modes.get(pynvml.nvmlDeviceGetComputeMode(handle), "?")
        try:
            current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
            entry["mig"] = bool(current)
        except pynvml.NVMLError as exc:
            entry["mig"] = f"n/a ({exc})"
        entry["sm_clock_mhz"] = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
        entry["max_sm_clock_mhz"] = pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)
        entry["power_limit_w"] = pynvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000
        entry["throttle_reasons"] = hex(pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
        entry["temperature_c"] = pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)
    finally:
        pynvml.nvmlShutdown()


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def device(entry: dict) -> str:
    import cupy as cp

    props = cp.cuda.runtime.getDeviceProperties(0)
    cc = f"{props['major']}{props['minor']}"
    entry.update(name=_text(props["name"]), compute_capability=cc,
                 sms=props["multiProcessorCount"], memory_gib=round(props["totalGlobalMem"] / 2**30, 1),
                 l2_mib=round(props["l2CacheSize"] / 2**20, 1),
                 shared_per_block_optin_kib=props.get("sharedMemPerBlockOptin", 0) // 1024)
    return cc


def torch_and_triton(entry: dict) -> None:
    import cupy as cp

    try:
        import torch
    except Exception as exc:  # noqa: BLE001
        skip(entry, f"torch not importable: {exc}")
        return
    entry["torch"] = torch.__version__
    entry["torch_cuda"] = torch.cuda.is_available()
    x = cp.arange(16, dtype=cp.float32)
    t = torch.from_dlpack(x)
    back = cp.from_dlpack(t * 2)
    entry["dlpack_round_trip"] = bool(cp.allclose(back, x * 2))
    a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    c = (a @ a).float()
    entry["bf16_matmul"] = bool(torch.isfinite(c).all().item())
    try:
        import triton

        entry["triton"] = triton.__version__
    except Exception as exc:  # noqa: BLE001 - a baseline fewer, not a failure
        entry["triton"] = f"not importable: {exc}"


def _triton_or_skip(entry: dict) -> Any:
    """Triton, or None with the step marked skipped: not a must-have (without it the Triton
    baselines are missing from the report, which says so)."""
    try:
        import triton
    except Exception as exc:  # noqa: BLE001
        skip(entry, f"triton not importable: {exc}")
        return None
    return triton


def _compute_capability(arch: str) -> int:
    return int("".join(ch for ch in arch if ch.isdigit()))


def triton_baselines(entry: dict, arch: str, on_device: bool) -> None:
    """Triton compiles for the device, its launcher has a C compiler, one launch is right."""
    triton = _triton_or_skip(entry)
    if triton is None:
        return
    import shutil

    from app.catalog.cuda import triton_kernels

    entry["triton"] = triton.__version__
    cc = _compute_capability(arch)
    # one kernel here and one in the cell: seconds, not the minute a cold compile of all takes
    # (the dry run's tests and the benchmark's baselines build every one)
    sizes = triton_kernels.compile_all(cc, names=("softmax",), dtypes=("bfloat16",))
    entry["compiled"] = f"softmax bf16 for sm_{cc} ({sizes['softmax']['bfloat16']} B cubin)"
    compiler = next((shutil.which(c) for c in (os.environ.get("CC"), "cc", "gcc", "clang")
                     if c and shutil.which(c)), None)
    entry["c_compiler"] = compiler or "none found: Triton cannot build its launcher"
    if not on_device:
        return
    import torch

    x = torch.randn(8, 1000, device="cuda", dtype=torch.float16)
    y = torch.empty_like(x)
    triton_kernels.launch("softmax", [x], y, 1000)
    err = float((y.float() - torch.softmax(x.float(), dim=-1)).abs().max())
    entry["softmax_max_error"] = err
    if not err < 1e-3:
        raise RuntimeError(f"Triton's softmax is off by {err}")


class TritonCellProbe:
    """Handler of a baseline cell ("gpu_preflight:TritonCellProbe"): Triton's compiles there,
    as the cell will run them, and on a device the C module Triton builds to reach the driver
    (with the libcuda the parent found: the cell may not run ldconfig)."""

    def __call__(self, request, progress):
        import triton

        from app.catalog.cuda import triton_kernels

        sizes = triton_kernels.compile_all(request[1], names=("rmsnorm",), dtypes=("float16",))
        out = {"compiled": f"rmsnorm fp16 for sm_{request[1]} ({sizes['rmsnorm']['float16']} B cubin)",
               "libcuda": os.environ.get("TRITON_LIBCUDA_PATH", "")}
        if request[2]:
            from triton.runtime import driver

            out["driver"] = type(driver.active).__name__
            out["device"] = driver.active.get_current_device()
        out["triton"] = triton.__version__
        return out


def baseline_cell(entry: dict, arch: str, on_device: bool) -> None:
    if _triton_or_skip(entry) is None:
        return
    from app.gpu.worker import Deadlines, WorkerPool

    cc = _compute_capability(arch)
    pool = WorkerPool("gpu_preflight:TritonCellProbe", [()], name="preflight-baseline-", kind="baseline")
    try:
        reply = pool.call(("probe", cc, on_device), Deadlines(compile_s=60, run_s=60))
        entry["protections"] = pool.workers[0].protections
    finally:
        pool.close()
    if reply.fault is not None:
        raise RuntimeError(f"the baseline cell failed: {reply.fault.detail} {reply.fault.log[-500:]}")
    entry.update(reply.result)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "out/gpu-check"))
    p.add_argument("--dry-run", action="store_true", help="only the steps that need no device")
    p.add_argument("--arch", default="sm_90", help="target for the compile steps in a dry run")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("CUPY_CACHE_DIR", tempfile.mkdtemp(prefix="cupy-cache-"))
    cache = Path(tempfile.mkdtemp(prefix="kernelswarm-preflight-"))
    report: dict = {"dry_run": args.dry_run, "steps": {}, "started": time.time()}
    arch = args.arch
    try:
        with Step("versions", report) as entry:
            versions(entry)
        if not args.dry_run:
            with Step("device", report) as entry:
                arch = f"sm_{device(entry)}"
        with Step("headers", report) as entry:
            headers(entry, arch, cache)
        with Step("catalog", report) as entry:
            catalog(entry, arch, cache)
        for name, fn in (("launch", launch), ("nvml", nvml), ("torch", torch_and_triton)):
            with Step(name, report) as entry:
                if args.dry_run:
                    skip(entry, "dry run: needs a device")
                else:
                    fn(entry)
        with Step("triton", report) as entry:
            triton_baselines(entry, arch, on_device=not args.dry_run)
        with Step("cell", report) as entry:
            baseline_cell(entry, arch, on_device=not args.dry_run)
    except KeyboardInterrupt:  # the checks not run yet are missing from the report, which says so
        report["interrupted"] = next(reversed(report["steps"]), "")
    report["seconds"] = round(time.time() - report["started"], 2)
    # a must-have that never ran (interrupted before it) counts as failed
    failed = [n for n in MUST_HAVE if report["steps"].get(n, {}).get("ok") is False
              or n not in report["steps"]]
    report["verdict"] = "ok" if not failed else f"failed: {', '.join(failed)}"
    (out / "preflight.json").write_text(json.dumps(report, indent=2, default=str))
    if failed:
        first = report["steps"].get(failed[0], {"error": "not reached before the time limit"})
        print(f"preflight: {failed[0]} failed: {first.get('error')} (details in {out / 'preflight.json'})")
        return 1
    done = [n for n, s in report["steps"].items() if s.get("ok")]
    cut = f"; interrupted in {report['interrupted']}" if report.get("interrupted") else ""
    print(f"preflight: ok in {report['seconds']} s ({', '.join(done)}"
          f"{'; dry run' if args.dry_run else ''}{cut})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
