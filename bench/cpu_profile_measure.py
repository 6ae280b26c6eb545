"""The measurements of bench/cpu_profile.py: a memory-bound operator (cachegrind, in-core
ceiling, call overhead, DRAM), the streaming loops at DRAM size, and GEMM against OpenBLAS."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from cpu_profile_build import Builder, git_source
from cpu_profile_cachegrind import (
    cachegrind,
    cblas_symbol,
    driver_args,
    native_driver,
    openblas_path,
)
from cpu_profile_configs import config_for
from cpu_profile_timing import STAT, Copy, Kernel, Workset, calibrate, interleave
from threadpoolctl import threadpool_limits

from app.catalog import get_operator

# working sets (rows, cols); bytes as op.bytes_moved counts them
L1_SHAPE = {"transpose": [32, 64]}  # 16 KB of x + y
L1_DEFAULT = [2, 1024]
L2_SHAPE = {"transpose": [256, 256]}  # 512 KB of x + y
L2_DEFAULT = [32, 2048]
CG_SHAPE = [512, 2048]  # 8 MB: past the L2 that cachegrind's LL models
DRAM_SHAPE = [16384, 4096]  # 512 MB, as bench/cpu_kernels.py
GEMM_CG = [512, 512, 512]
GEMM_NATIVE = ([512, 512, 512], [1024, 1024, 1024])


def profile_memory_op(name: str, b: Builder, probe, roofs, args, ghz: float) -> dict:
    op = get_operator("cpu", name)
    sources = {"now": op.template()}
    if args.before:
        sources = {"before": git_source(args.before, op.kernel_file), **sources}
    row: dict = {"operator": name, "config": {}, "cmd": {}}
    for t in (1, 2):
        row["config"][t] = {**config_for(name, t, args.configs), "THREADS": t}
        row["cmd"][t] = b.command(row["config"][t])
    cfg1 = row["config"][1]

    # 1. cachegrind on the AVX2 build + its native cycles per element at L2
    if not args.no_cachegrind:
        ws_cg = Workset.make(op, CG_SHAPE)
        ws_l2 = Workset.make(op, L2_SHAPE.get(name, L2_DEFAULT))
        row["cg"] = {}
        for tag, src in sources.items():
            lib = b.kernel(src, cfg1, ("-mno-avx512f",))
            cg = cachegrind(b.driver, driver_args(lib, "ks_kernel", "ks", ws_cg), "ks_kernel*", b.work)
            n = ws_cg.elements
            sec = native_driver(b.driver, driver_args(lib, "ks_kernel", "ks", ws_l2))
            row["cg"][tag] = {"instr_per_elem": cg["Ir"] / n, "d1_per_elem": cg["D1"] / n,
                              "ll_per_elem": cg["LL"] / n, "llr_per_elem": cg["LLr"] / n,
                              "llw_per_elem": cg["LLw"] / n, "loads_per_elem": cg["Dr"] / n,
                              "stores_per_elem": cg["Dw"] / n,
                              "avx2_sec_per_elem_l2": sec / ws_l2.elements}
        row["cg_shape"] = CG_SHAPE

    # 2. in-core: 1 thread, L1 and L2 working sets, with the copy probe interleaved
    row["incore"] = {}
    libs1 = {tag: b.kernel(src, cfg1) for tag, src in sources.items()}
    for level, shape in (("L1", L1_SHAPE.get(name, L1_DEFAULT)), ("L2", L2_SHAPE.get(name, L2_DEFAULT))):
        ws = Workset.make(op, shape)
        contestants = {tag: Kernel(b.harness, lib, ws) for tag, lib in libs1.items()}
        contestants["copy"] = Copy(probe, ws.nbytes, 1)
        stats = interleave(contestants, args.rounds)
        row["incore"][level] = {
            "shape": shape, "bytes": ws.nbytes, "roof_level": roofs.level_for(ws.nbytes, 1).name,
            **{f"{k}_gbs": ws.nbytes / s[STAT] / 1e9 for k, s in stats.items() if k != "copy"},
            **{f"{k}_sec_per_elem": s[STAT] / ws.elements
               for k, s in stats.items() if k != "copy"},
            "copy_gbs": contestants["copy"].nbytes / stats["copy"][STAT] / 1e9}
    # fixed cost of a call: rows = 0 (fork/join and nothing else), 1 and 2 threads
    row["empty_us"] = {}
    for t in (1, 2):
        lib = b.kernel(sources["now"], row["config"][t])
        ws = Workset.make(op, [0, 1024] if name != "transpose" else [0, 64])
        k = Kernel(b.harness, lib, ws)
        reps = calibrate(k, 0.02)
        row["empty_us"][t] = min(k(reps) for _ in range(5)) * 1e6

    # 3. DRAM: 512 MB, 1 and 2 threads, interleaved with the copy probe on the same bytes
    if not args.no_dram:
        row["dram"] = {}
        ws = Workset.make(op, DRAM_SHAPE)
        for t in (1, 2):
            contestants = {}
            for tag, src in sources.items():
                contestants[tag] = Kernel(b.harness, b.kernel(src, row["config"][t]), ws)
            contestants["copy"] = Copy(probe, ws.nbytes, t)
            stats = interleave(contestants, args.dram_rounds, min_s=0.05)
            level, roof = roofs.roof_for(ws.nbytes, t)
            row["dram"][t] = {
                "level": level, "roof_gbs": roof,
                **{f"{k}_gbs": ws.nbytes / s[STAT] / 1e9 for k, s in stats.items() if k != "copy"},
                **{f"{k}_spread": (s["p90"] - s["p10"]) / s["median"] for k, s in stats.items()},
                **{f"{k}_median_gbs": ws.nbytes / s["median"] / 1e9 for k, s in stats.items() if k != "copy"},
                "copy_gbs": contestants["copy"].nbytes / stats["copy"][STAT] / 1e9}
            del contestants
        del ws
    return row


# Streaming loops with the row kernels' signature (y, x, w, rows, cols), at DRAM size: what a
# single core's stream reaches as the loop body grows (the probe's flat loop, then row loops
# with a scalar or an L1-resident weight row, 8 or 16 lanes). THREADS and LANES come as -D.
STREAMS = {
    "flat copy (the probe's loop)": ("flat", 16),
    "rows y = x * s, 8 lanes": ("scalar", 8),
    "rows y = x * s, 16 lanes": ("scalar", 16),
    "rows y = x * w[col], 8 lanes": ("weight", 8),
    "rows y = x * w[col], 16 lanes": ("weight", 16),
}
STREAM_C = r"""
void ks_kernel(float *restrict y, const float *restrict x, const float *restrict w, long rows,
               long cols) {
#if KIND == 0
    (void)w;
    const long n = rows * cols;
#pragma omp parallel for num_threads(THREADS) schedule(static)
    for (long i = 0; i < n; ++i) y[i] = x[i] * 1.0f + 0.0f;
#else
#pragma omp parallel for num_threads(THREADS) schedule(static, 4)
    for (long r = 0; r < rows; ++r) {
        const float *restrict xr = x + r * cols;
        float *restrict yr = y + r * cols;
#pragma omp simd simdlen(LANES)
#if KIND == 1
        for (long k = 0; k < cols; ++k) yr[k] = xr[k] * 1.5f;
#else
        for (long k = 0; k < cols; ++k) yr[k] = xr[k] * w[k];
#endif
    }
#endif
}
"""


def profile_streams(b: Builder, probe, roofs, args) -> dict:
    """The loops of STREAMS and the copy probe at DRAM size, 1 thread and 2, interleaved."""
    op = get_operator("cpu", "rmsnorm")  # (y, x, w, rows, cols) and 8 bytes per element
    ws = Workset.make(op, DRAM_SHAPE)
    out = {}
    for t in (1, 2):
        contestants = {name: Kernel(b.harness, b.kernel(STREAM_C, {
            "KIND": {"flat": 0, "scalar": 1, "weight": 2}[kind], "LANES": lanes, "THREADS": t}), ws)
            for name, (kind, lanes) in STREAMS.items()}
        contestants["copy probe"] = Copy(probe, ws.nbytes, t)
        stats = interleave(contestants, args.dram_rounds, min_s=0.05)
        out[t] = {k: (contestants[k].nbytes if k == "copy probe" else ws.nbytes) / s[STAT] / 1e9
                  for k, s in stats.items()}
        out[t]["roof"] = roofs.roof_for(ws.nbytes, t)[1]
    return out


def profile_gemm(b: Builder, args, ghz: float) -> dict:
    op = get_operator("cpu", "gemm")
    row: dict = {"operator": "gemm"}
    blas = openblas_path()
    cfg = {**config_for("gemm", 1, args.configs), "THREADS": 1}
    row["config"] = cfg
    if not args.no_cachegrind:
        # AVX2 for valgrind: the same blocking, ISA=1 (AVX2+FMA), MR*NV within its registers
        cfg2 = {**cfg, "ISA": 1}
        if cfg2.get("MR", 6) * cfg2.get("NV", 2) > 14:
            cfg2.update({"MR": 6, "NV": 2})
        row["cg_config"] = cfg2
        ws = Workset.make(op, GEMM_CG)
        flop = op.flops(tuple(GEMM_CG))
        lib = b.kernel(op.template(), cfg2, ("-mno-avx512f",))
        ent = {"tuned": (driver_args(lib, "ks_kernel", "ks", ws), "ks_kernel*", {})}
        if blas:
            sym = cblas_symbol(blas)
            env = {"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_NUM_THREADS": "1"}
            ent["openblas"] = (driver_args(Path(blas), sym, "cblas", ws), sym, env)
        row["cg"] = {}
        for tag, (dargs, toggle, env) in ent.items():
            cg = cachegrind(b.driver, dargs, toggle, b.work, env)
            sec = native_driver(b.driver, dargs, env)
            row["cg"][tag] = {"instr_per_flop": cg["Ir"] / flop, "d1_per_kflop": 1e3 * cg["D1"] / flop,
                              "ll_per_kflop": 1e3 * cg["LL"] / flop,
                              "loads_per_flop": cg["Dr"] / flop,
                              "gflops": flop / sec / 1e9, "sec": sec, "instr": cg["Ir"]}
    # native: the AVX-512 tuned kernel vs numpy (OpenBLAS SkylakeX), 1 thread, interleaved
    row["native"] = {}
    lib = b.kernel(op.template(), cfg)
    for shape in GEMM_NATIVE:
        ws = Workset.make(op, shape)
        k = Kernel(b.harness, lib, ws)
        A, B, C = ws.arrays[1].reshape(shape[0], shape[2]), ws.arrays[2].reshape(shape[2], shape[1]), np.empty((shape[0], shape[1]), np.float32)

        def numpy_call(reps: int, A=A, B=B, C=C) -> float:
            t0 = time.perf_counter()
            for _ in range(reps):
                np.matmul(A, B, out=C)
            return (time.perf_counter() - t0) / reps

        with threadpool_limits(limits=1, user_api="blas"):
            stats = interleave({"tuned": k, "openblas": numpy_call}, args.rounds)
        flop = op.flops(tuple(shape))
        row["native"][shape[0]] = {k2: {"gflops": flop / s[STAT] / 1e9}
                                   for k2, s in stats.items()}
    return row
