"""Why the CPU kernels stop short of the memory roof: a profile without hardware counters.

    python bench/cpu_profile.py [--operators softmax,rmsnorm,...,gemm] [--configs previous|defaults]
                                [--before REV] [--rounds 7] [--no-cachegrind] [--no-dram]
                                [--json out.json]

This VM exposes no hardware performance counters (`perf stat -e cycles,instructions` prints
<not supported>), so the profile is built from what can be measured without them:

1. **cachegrind** (`valgrind --tool=cachegrind`, D1 32 KB 8-way, LL = the 1 MB 8-way L2, both
   as the machine reports them): instructions, D1 and LL misses per element (per FLOP for GEMM)
   of one steady-state call (a run with 3 calls minus a run with 1: the same setup and warm-up
   call cancel), on a working set past the L2 (8 MB). valgrind 3.19 does not decode
   AVX-512, so this build is the same source, configuration and compiler flags as the CPU
   backend's plus `-mno-avx512f` (AVX2 code: a VEC=16 loop runs as two 8-lane halves), and
   OpenBLAS runs its Haswell (AVX2) kernel (OPENBLAS_CORETYPE=Haswell). The same binary, run
   natively on an L2-resident working set, gives cycles per element (the clock is measured
   with a dependent add chain), hence an IPC estimate.
2. **in-core ceiling**: the kernel as the backend builds it (-march=native, AVX-512 where the
   configuration asks), 1 thread, on working sets that fit the L1 (16 KB) and the L2 (512 KB),
   in bytes per second with the same byte count the roof uses (op.bytes_moved), next to the
   copy probe of app/gpu/cpu/memory_roof.py on the same working set, measured interleaved. If the
   ceiling is below a level's roof, the kernel is compute-bound there: no memory tuning brings
   it to 90% of that roof.
3. **DRAM**: the kernel and the copy probe on the 512 MB working set of bench/cpu_kernels.py,
   1 thread and all threads, interleaved; and the fixed cost of one call (rows = 0: OpenMP's
   fork/join alone). Next to them, streaming loops with the row kernels' signature (the probe's
   flat loop; y = x * s and y = x * w[col] by rows, 8 and 16 lanes): what one core's stream
   reaches as the loop body grows, with no arithmetic to speak of.

The configurations are the best ones of the last bench/cpu_kernels.py run recorded in
bench/README.md (1 December 2026, tuned per thread count on the templates of that day)
(`--configs previous`), the templates' defaults (`--configs defaults`), the configurations
chosen from this profile's interleaved sweeps of the current templates (`--configs good`), or
the best ones a bench/cpu_kernels.py output printed (`--configs PATH`). `--before REV`
builds the templates of git revision REV with the same configurations and measures them
interleaved with the current ones (before/after of a template change).

The last line is

    memory-bound: in-core ceiling / roof min X% (op; DRAM 1 thread), ... measured DRAM min Z% of roof

GEMM: the tuned kernel against numpy's OpenBLAS, instructions per FLOP and misses per FLOP
under cachegrind (both AVX2), and GFLOP/s natively at 1 thread (AVX-512 tuned kernel vs
OpenBLAS's SkylakeX kernel) against the FMA peak (32 FLOP/cycle x the measured clock).
"""

from __future__ import annotations

import os
import sys

SCRUBBED = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
if any(v in os.environ for v in SCRUBBED):  # before numpy loads OpenBLAS
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    os.execve(sys.executable, [sys.executable, *sys.argv], env)

import argparse
import ctypes
import json
import math
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from app.catalog import get_operator
from app.gpu.cpu import memory_roof as cpu_roof
from app.gpu.cpu import toolchain
from app.paths import cache_dir

MEMORY_OPS = ("softmax", "rmsnorm", "layernorm", "bias_gelu", "transpose")
ALL_OPS = (*MEMORY_OPS, "gemm")

# The best configurations of the bench/cpu_kernels.py run in bench/README.md (1 December 2026),
# per operator and thread count (THREADS is added when built).
PREVIOUS_BEST = {
    ("softmax", 1): {"VEC": 8, "ACC": 2, "ONLINE": 0, "CHUNK": 64, "EXP_IMPL": 1},
    ("softmax", 2): {"VEC": 16, "ACC": 4, "ONLINE": 0, "CHUNK": 64, "EXP_IMPL": 1},
    ("rmsnorm", 1): {"VEC": 4, "ACC": 1, "ACC_DOUBLE": 0, "CHUNK": 4},
    ("rmsnorm", 2): {"VEC": 8, "ACC": 2, "ACC_DOUBLE": 0, "CHUNK": 64},
    ("layernorm", 1): {"VEC": 8, "STATS": 1, "CHUNK": 64},
    ("layernorm", 2): {"VEC": 16, "STATS": 0, "CHUNK": 64},
    ("bias_gelu", 1): {"VEC": 8, "ERF_IMPL": 1, "CHUNK": 16},
    ("bias_gelu", 2): {"VEC": 16, "ERF_IMPL": 1, "CHUNK": 1},
    ("transpose", 1): {"TILE": 16, "WRITE_MAJOR": 1, "VEC": 4},
    ("transpose", 2): {"TILE": 4, "WRITE_MAJOR": 1, "VEC": 4},
    ("gemm", 1): {"MR": 8, "NV": 1, "KC": 512, "MC": 96, "NC": 1024, "UK": 4, "ORDER": 1,
                  "PAR": 1, "PF": 1, "SHARE_B": 1, "ISA": 2},
    ("gemm", 2): {"MR": 6, "NV": 1, "KC": 256, "MC": 96, "NC": 2048, "UK": 1, "ORDER": 1,
                  "PAR": 0, "PF": 0, "SHARE_B": 0, "ISA": 2},
}

# Configurations chosen in this profile's sessions from interleaved sweeps of the current
# templates (in core at 1 thread and at DRAM size; bench/cpu_profile.md), for --configs good.
GOOD = {
    "softmax": {"VEC": 16, "ACC": 1, "ONLINE": 0, "CHUNK": 64, "EXP_IMPL": 1},
    "rmsnorm": {"VEC": 8, "ACC": 2, "ACC_DOUBLE": 0, "CHUNK": 64},
    "layernorm": {"VEC": 16, "STATS": 1, "CHUNK": 64},
    "bias_gelu": {"VEC": 16, "ERF_IMPL": 2, "CHUNK": 64},
    "transpose": {"TILE": 128, "WRITE_MAJOR": 1, "VEC": 8},
}

# working sets (rows, cols); bytes as op.bytes_moved counts them
L1_SHAPE = {"transpose": [32, 64]}  # 16 KB of x + y
L1_DEFAULT = [2, 1024]
L2_SHAPE = {"transpose": [256, 256]}  # 512 KB of x + y
L2_DEFAULT = [32, 2048]
CG_SHAPE = [512, 2048]  # 8 MB: past the L2 that cachegrind's LL models
DRAM_SHAPE = [16384, 4096]  # 512 MB, as bench/cpu_kernels.py
GEMM_CG = [512, 512, 512]
GEMM_NATIVE = ([512, 512, 512], [1024, 1024, 1024])
D1 = "32768,8,64"
LL = "1048576,8,64"
SAMPLE_S = 0.02  # each timed sample lasts at least this long
STAT = "best"  # the statistic reported (see interleave)
FMA_FLOP_PER_CYCLE = 32  # 2 FMA pipes x 16 fp32 lanes (Zen 4 runs 512-bit FMAs as 2 x 256)

HARNESS_C = r"""
#define _GNU_SOURCE
#include <time.h>
typedef void (*f2_2)(float *, const float *, long, long);
typedef void (*f3_2)(float *, const float *, const float *, long, long);
typedef void (*f4_2)(float *, const float *, const float *, const float *, long, long);
typedef void (*f3_3)(float *, const float *, const float *, long, long, long);

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* reps calls of fn(p[0..nptr), d[0..ndim)); seconds per call */
double ks_run(void *fn, int nptr, float **p, int ndim, const long *d, long reps) {
    const double t0 = now();
    for (long r = 0; r < reps; ++r) {
        if (nptr == 2 && ndim == 2) ((f2_2)fn)(p[0], p[1], d[0], d[1]);
        else if (nptr == 3 && ndim == 2) ((f3_2)fn)(p[0], p[1], p[2], d[0], d[1]);
        else if (nptr == 4 && ndim == 2) ((f4_2)fn)(p[0], p[1], p[2], p[3], d[0], d[1]);
        else if (nptr == 3 && ndim == 3) ((f3_3)fn)(p[0], p[1], p[2], d[0], d[1], d[2]);
        else return -1.0;
    }
    return (now() - t0) / (double)reps;
}

/* the core clock in GHz: a chain of dependent 1-cycle integer adds */
double ks_clock_ghz(long iters) {
    long x = 0, n = iters, one = 1;
    const double t0 = now();
    /* register operands: newer cores fold chains of immediate adds at rename (21.8 "GHz") */
    __asm__ volatile("1:\n\t"
                     "add %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\t"
                     "add %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\tadd %2, %0\n\t"
                     "dec %1\n\tjnz 1b" : "+r"(x), "+r"(n) : "r"(one));
    return 8.0 * iters / (now() - t0) / 1e9;
}
"""

DRIVER_C = r"""
/* driver LIB SYMBOL MODE REPS NDIM DIMS... NARR SIZES...: loads the kernel (or OpenBLAS), makes
   page-aligned arrays (output first), calls once, then REPS times; prints seconds per call.
   MODE ks: SYMBOL(out, in..., dims...); MODE cblas: row-major sgemm C = A B, dims M N K. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
typedef void (*f2_2)(float *, const float *, long, long);
typedef void (*f3_2)(float *, const float *, const float *, long, long);
typedef void (*f4_2)(float *, const float *, const float *, const float *, long, long);
typedef void (*f3_3)(float *, const float *, const float *, long, long, long);
typedef void (*cblas_t)(long, long, long, long, long, long, float, const float *, long,
                        const float *, long, float, float *, long);
int main(int argc, char **argv) {
    if (argc < 6) return 2;
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    if (!lib) { fprintf(stderr, "%s\n", dlerror()); return 3; }
    void *fn = dlsym(lib, argv[2]);
    if (!fn) { fprintf(stderr, "no symbol %s\n", argv[2]); return 4; }
    const int cblas = strcmp(argv[3], "cblas") == 0;
    const long reps = atol(argv[4]);
    int a = 5;
    const int ndim = atoi(argv[a++]);
    long d[3] = {0, 0, 0};
    for (int i = 0; i < ndim; ++i) d[i] = atol(argv[a++]);
    const int narr = atoi(argv[a++]);
    float *p[4] = {0, 0, 0, 0};
    unsigned long long s = 88172645463325252ull;
    for (int i = 0; i < narr; ++i) {
        const long n = atol(argv[a++]);
        if (posix_memalign((void **)&p[i], 4096, (size_t)n * sizeof(float) + 64)) return 5;
        for (long k = 0; k < n; ++k) {  /* roughly normal values, w and b near 1 and 0 */
            float u = 0.0f;
            for (int j = 0; j < 4; ++j) { s ^= s << 13; s ^= s >> 7; s ^= s << 17; u += (s >> 40) * 0x1p-24f; }
            p[i][k] = (u - 2.0f) * 1.7f;
        }
    }
    struct timespec t0, t1;
    for (long r = -1; r < reps; ++r) {
        if (r == 0) clock_gettime(CLOCK_MONOTONIC, &t0);
        if (cblas) ((cblas_t)fn)(101, 111, 111, d[0], d[1], d[2], 1.0f, p[1], d[2], p[2], d[1], 0.0f, p[0], d[1]);
        else if (narr == 2 && ndim == 2) ((f2_2)fn)(p[0], p[1], d[0], d[1]);
        else if (narr == 3 && ndim == 2) ((f3_2)fn)(p[0], p[1], p[2], d[0], d[1]);
        else if (narr == 4 && ndim == 2) ((f4_2)fn)(p[0], p[1], p[2], p[3], d[0], d[1]);
        else if (narr == 3 && ndim == 3) ((f3_3)fn)(p[0], p[1], p[2], d[0], d[1], d[2]);
        else return 6;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%.9g\n", reps > 0 ? ((t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec)) / reps : 0.0);
    return 0;
}
"""


# ---- building ---------------------------------------------------------------------------------
class Builder:
    """Kernels built as app.gpu.cpu.compile_library builds candidates (the toolchain's flags and
    -D per parameter), optionally with extra flags; the harness and the driver."""

    def __init__(self, work: Path) -> None:
        self.tc = toolchain()
        self.work = work
        self.count = 0
        self.harness = self._harness()
        self.driver = self._driver()

    def _cc(self, args: list[str]) -> None:
        proc = subprocess.run([self.tc.compiler, *args], capture_output=True, text=True,
                              timeout=180, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"compile failed: {' '.join(args)[:300]}\n{proc.stderr[:2000]}")

    def _harness(self) -> ctypes.CDLL:
        src, lib = self.work / "harness.c", self.work / "harness.so"
        src.write_text(HARNESS_C)
        self._cc(["-O2", "-shared", "-fPIC", str(src), "-o", str(lib)])
        h = ctypes.CDLL(str(lib))
        h.ks_run.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                             ctypes.c_void_p, ctypes.c_long]
        h.ks_run.restype = ctypes.c_double
        h.ks_clock_ghz.argtypes = [ctypes.c_long]
        h.ks_clock_ghz.restype = ctypes.c_double
        return h

    def _driver(self) -> Path:
        src, exe = self.work / "driver.c", self.work / "driver"
        src.write_text(DRIVER_C)
        self._cc(["-O2", "-std=gnu11", str(src), "-o", str(exe), "-Wl,--no-as-needed", "-lm", "-ldl"])
        return exe

    def kernel(self, source: str, config: dict, extra: tuple[str, ...] = ()) -> Path:
        self.count += 1
        src = self.work / f"k{self.count}.c"
        lib = self.work / f"k{self.count}.so"
        src.write_text(source)
        self._cc([*self.tc.flags, *extra, *(f"-D{k}={v}" for k, v in config.items()), str(src),
                  "-o", str(lib)])
        return lib

    def command(self, config: dict, extra: tuple[str, ...] = ()) -> str:
        return " ".join([os.path.basename(self.tc.compiler), *self.tc.flags, *extra,
                         *(f"-D{k}={v}" for k, v in config.items()), "kernel.c"])


# ---- arrays and calls ---------------------------------------------------------------------------
def aligned(n: int) -> np.ndarray:
    """n float32 on their own page (as the kernel host's arena gives them)."""
    raw = np.empty(n + 1024 + 16, np.float32)
    off = (-raw.ctypes.data % 4096) // 4
    return raw[off:off + n]


@dataclass
class Workset:
    op: object
    shape: list[int]
    arrays: list[np.ndarray] = field(default_factory=list)  # output first

    @classmethod
    def make(cls, op, shape: list[int], seed: int = 7) -> Workset:
        rng = np.random.default_rng(seed)
        s = tuple(shape)
        out = aligned(int(np.prod(op.output_shape(s))))
        out[:] = 0.0
        arrays = [out]
        for name, ishape in op.input_shapes(s).items():
            a = aligned(int(np.prod(ishape)))
            if name in ("w",):
                a[:] = 1.0 + 0.1 * rng.standard_normal(a.size, dtype=np.float32)
            elif name == "b" and op.name != "bias_gelu":
                a[:] = 0.1 * rng.standard_normal(a.size, dtype=np.float32)
            else:
                a[:] = rng.standard_normal(a.size, dtype=np.float32)
            arrays.append(a)
        return cls(op, list(shape), arrays)

    @property
    def nbytes(self) -> float:
        return float(self.op.bytes_moved(tuple(self.shape)))

    @property
    def elements(self) -> int:
        return int(np.prod(self.op.output_shape(tuple(self.shape))))


class Kernel:
    """A built kernel bound to a working set: call(reps) -> seconds per call."""

    def __init__(self, harness: ctypes.CDLL, lib: Path, ws: Workset) -> None:
        self.lib = ctypes.CDLL(str(lib))
        self.fn = ctypes.cast(self.lib.ks_kernel, ctypes.c_void_p).value
        self.h = harness
        self.bind(ws)

    def bind(self, ws: Workset) -> None:
        self.ws = ws
        self.ptrs = (ctypes.c_void_p * len(ws.arrays))(*(a.ctypes.data for a in ws.arrays))
        dims = ws.op.call_dims(tuple(ws.shape))
        self.dims = (ctypes.c_long * len(dims))(*dims)
        self.nptr, self.ndim = len(ws.arrays), len(dims)

    def __call__(self, reps: int) -> float:
        t = self.h.ks_run(self.fn, self.nptr, self.ptrs, self.ndim, self.dims, reps)
        if t < 0:
            raise RuntimeError("unsupported signature")
        return t


class Copy:
    """The roof's copy probe (app.gpu.cpu.memory_roof) over a working set of `nbytes` (src + dst)."""

    def __init__(self, probe: ctypes.CDLL, nbytes: float, threads: int) -> None:
        self.n = max(1024, int(nbytes) // 8)
        self.src, self.dst = aligned(self.n), aligned(self.n)
        self.src[:] = 1.0
        self.dst[:] = 0.0
        self.probe, self.threads = probe, threads
        self.nbytes = 8.0 * self.n

    def __call__(self, reps: int) -> float:
        t0 = time.perf_counter()
        self.probe.ks_copy(self.dst.ctypes.data, self.src.ctypes.data, self.n, reps, self.threads)
        return (time.perf_counter() - t0) / reps


def calibrate(fn, min_s: float = SAMPLE_S) -> int:
    fn(1)
    reps = 1
    while True:
        t = fn(reps) * reps
        if t >= min_s or reps >= 1 << 24:
            return reps
        reps = max(reps * 2, int(reps * min_s / max(t, 1e-9) * 1.2))


def interleave(contestants: dict, rounds: int, min_s: float = SAMPLE_S) -> dict[str, dict]:
    """Samples round by round (order rotated), each after a warm-up; best (STAT), median, p10,
    p90 of the seconds per call. The machine is shared: another engineer's processes only ever
    add time to a sample, so the reported figure is the best sample of every contestant (the
    copy roof is likewise a high percentile of the probe's rates)."""
    reps = {k: calibrate(fn, min_s) for k, fn in contestants.items()}
    samples: dict[str, list[float]] = {k: [] for k in contestants}
    names = list(contestants)
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            contestants[k](max(1, reps[k] // 8))  # warm: its own threads and caches
            samples[k].append(contestants[k](reps[k]))
    return {k: {"best": float(np.min(v)), "median": float(np.median(v)),
                "p10": float(np.percentile(v, 10)), "p90": float(np.percentile(v, 90)), "n": len(v)}
            for k, v in samples.items()}


# ---- cachegrind -----------------------------------------------------------------------------------
CG_TOTAL = re.compile(r"^summary:\s+(.*)$", re.MULTILINE)
CG_EVENTS = re.compile(r"^events:\s+(.*)$", re.MULTILINE)


def cachegrind(driver: Path, args: list[str], toggle: str, work: Path, env: dict | None = None,
               reps: tuple[int, int] = (1, 3)) -> dict[str, float]:
    """Events of one steady-state call: a run with reps[1] calls minus a run with reps[0] (the
    same deterministic setup and warm-up call in both, so only the extra calls remain;
    cachegrind has no --toggle-collect). `toggle` names the entry point, for the report."""
    totals = []
    for n in reps:
        out = work / f"cg.{os.getpid()}.{n}.out"
        cmd = ["valgrind", "--tool=cachegrind", "--cache-sim=yes", f"--D1={D1}", f"--LL={LL}",
               f"--I1={D1}", f"--cachegrind-out-file={out}",
               str(driver), args[0], args[1], args[2], str(n), *args[3:]]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800,
                              env={**os.environ, **(env or {})}, check=False)
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"cachegrind failed: {proc.stderr[-1500:]}")
        text = out.read_text()
        events = CG_EVENTS.search(text).group(1).split()
        values = [float(v) for v in CG_TOTAL.search(text).group(1).split()]
        totals.append(dict(zip(events, values)))
        out.unlink()
    per = (reps[1] - reps[0])
    d = {k: (totals[1][k] - totals[0].get(k, 0.0)) / per for k in totals[1]}
    return {"Ir": d["Ir"], "D1": d["D1mr"] + d["D1mw"], "D1r": d["D1mr"], "D1w": d["D1mw"],
            "LL": d["DLmr"] + d["DLmw"], "LLr": d["DLmr"], "LLw": d["DLmw"],
            "Dr": d["Dr"], "Dw": d["Dw"]}


def driver_args(lib: Path, symbol: str, mode: str, ws: Workset) -> list[str]:
    dims = ws.op.call_dims(tuple(ws.shape))
    return [str(lib), symbol, mode, str(len(dims)), *map(str, dims), str(len(ws.arrays)),
            *(str(a.size) for a in ws.arrays)]


def native_driver(driver: Path, args: list[str], env: dict | None = None, min_s: float = 0.05) -> float:
    """Seconds per call of the driver run natively (the binary cachegrind ran)."""
    reps = 4
    while True:
        proc = subprocess.run([str(driver), *args[:3], str(reps), *args[3:]], capture_output=True,
                              text=True, timeout=600, env={**os.environ, **(env or {})}, check=True)
        t = float(proc.stdout.strip())
        if t * reps >= min_s or reps > 1 << 22:
            break
        reps = max(reps * 2, int(reps * min_s / max(t * reps, 1e-9) * 1.3))
    best = t
    for _ in range(6):  # best of seven: the other engineer's load only slows a run down
        proc = subprocess.run([str(driver), *args[:3], str(reps), *args[3:]], capture_output=True,
                              text=True, timeout=600, env={**os.environ, **(env or {})}, check=True)
        best = min(best, float(proc.stdout.strip()))
    return best


# ---- the profile ------------------------------------------------------------------------------------
def openblas_path() -> str | None:
    blas = [i for i in threadpool_info() if i.get("internal_api") == "openblas"]
    blas.sort(key=lambda i: "numpy" not in str(i.get("filepath", "")))
    return blas[0]["filepath"] if blas else None


def openblas_arch() -> str:
    blas = [i for i in threadpool_info() if i.get("internal_api") == "openblas"]
    return f"OpenBLAS {blas[0].get('version')} {blas[0].get('architecture')}" if blas else "no OpenBLAS"


def cblas_symbol(path: str) -> str:
    lib = ctypes.CDLL(path)
    for name in ("scipy_cblas_sgemm64_", "cblas_sgemm64_", "cblas_sgemm"):
        if hasattr(lib, name):
            return name
    raise RuntimeError("no cblas_sgemm in numpy's OpenBLAS")


def git_source(rev: str, kernel_file: str) -> str:
    """The kernel at `rev`, wherever it lived then (app/catalog/kernels/ before the CPU folder)."""
    for folder in ("app/catalog/cpu/kernels", "app/catalog/kernels"):
        shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{folder}/{kernel_file}"],
                               check=False, capture_output=True, text=True)
        if shown.returncode == 0:
            return shown.stdout
    raise RuntimeError(f"{kernel_file} not found at {rev}")


def clock_ghz(h: ctypes.CDLL) -> float:
    """The fastest of 15 short add chains (4 ms each): on a shared core a longer one is
    likely to be descheduled part of the time and read a lower clock."""
    return max(h.ks_clock_ghz(2_000_000) for _ in range(15))


def config_for(op_name: str, threads: int, which: str) -> dict:
    if which == "previous":
        return dict(PREVIOUS_BEST[(op_name, threads)])
    if which == "defaults":
        return {}
    if which == "good":
        return dict(GOOD.get(op_name, PREVIOUS_BEST.get((op_name, threads), {})))
    return dict(BENCH_BEST.get((op_name, threads), {}))


BENCH_BEST: dict[tuple[str, int], dict] = {}
TUNED_LINE = re.compile(r"^tuned (\w+)\s+(\d+) thr .*; best (.*)$", re.MULTILINE)


def read_bench_configs(path: str) -> dict[tuple[str, int], dict]:
    """The best configurations a bench/cpu_kernels.py run printed ('tuned OP T thr ... best
    K=V ...'), THREADS left out."""
    found = {}
    for op_name, threads, config in TUNED_LINE.findall(Path(path).read_text()):
        pairs = dict(item.split("=") for item in config.split())
        pairs.pop("THREADS", None)
        found[(op_name, int(threads))] = {k: int(v) for k, v in pairs.items()}
    return found


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


# ---- report -----------------------------------------------------------------------------------------
def f(v, d=2, w=7) -> str:
    return f"{v:>{w}.{d}f}" if v is not None and isinstance(v, (int, float)) and math.isfinite(v) else f"{'-':>{w}}"


def report(rows: list[dict], roofs, ghz: float, load: tuple, args) -> list[str]:
    out = []
    p = out.append
    p(f"machine: {os.cpu_count()} cores, clock {ghz:.2f} GHz (dependent add chain), load average "
      f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} at start, {os.getloadavg()[0]:.2f} at end; "
      f"{openblas_arch()}")
    p("roofs (cached copy probe, p90) GB/s: 1 thread " +
      " ".join(f"{k} {v:.0f}" for k, v in roofs.one_thread.items()) + "; all threads " +
      " ".join(f"{k} {v:.0f}" for k, v in roofs.all_threads.items()))
    p(f"configurations: {args.configs}" + {"previous": " (bench/README.md run of 1 December 2026)",
                                             "defaults": " (template defaults)",
                                             "good": " (GOOD: chosen from this profile's sweeps; GEMM: previous)"}.get(args.configs, " (best of that bench/cpu_kernels.py run)"))
    mem = [r for r in rows if r["operator"] in MEMORY_OPS]
    for r in rows:
        if r["operator"] == "streams":
            continue
        p(f"  {r['operator']}: " + (" | ".join(f"{t} thr {' '.join(f'{k}={v}' for k, v in c.items())}" for t, c in r["config"].items())
                                   if r["operator"] != "gemm" else " ".join(f"{k}={v}" for k, v in r["config"].items())))
    tags = ["before", "now"] if args.before else ["now"]
    if any("cg" in r for r in mem):
        p("")
        p(f"cachegrind (AVX2 build, 1 thread, {'x'.join(map(str, CG_SHAPE))} = 8 MB working set, "
          f"D1 {D1}, LL {LL} = L2; one steady-state call); IPC = instructions / cycles of the same "
          f"binary natively at the L2 working set")
        p(f"{'operator':<10} {'build':<7} {'instr/el':>8} {'loads/el':>8} {'D1 miss/el':>10} "
          f"{'LL miss/el':>10} {'(ideal)':>7} {'cyc/el':>7} {'IPC':>5}")
        for r in mem:
            for tag in tags:
                c = r.get("cg", {}).get(tag)
                if not c:
                    continue
                ideal = 0.125  # one 64-byte line of x and one of y per 16 floats
                cyc = c["avx2_sec_per_elem_l2"] * ghz * 1e9
                c["avx2_cycles_per_elem_l2"], c["ipc"] = cyc, c["instr_per_elem"] / cyc
                p(f"{r['operator']:<10} {tag:<7} {f(c['instr_per_elem'], 2, 8)} {f(c['loads_per_elem'], 2, 8)} "
                  f"{f(c['d1_per_elem'], 3, 10)} {f(c['ll_per_elem'], 3, 10)} {f(ideal, 3, 7)} "
                  f"{f(cyc, 2, 7)} {f(c['ipc'], 2, 5)}")
    if mem:
        p("")
        p("in-core, 1 thread (-march=native build), best-sample GB/s of op.bytes_moved, copy probe interleaved on the same bytes")
    p(f"{'operator':<10} {'build':<7} {'L1 GB/s':>8} {'cyc/el':>7} {'copy L1':>8} {'L2 GB/s':>8} {'cyc/el':>7} "
      f"{'copy L2':>8} {'ceiling':>8} {'/DRAM1':>7} {'/L2 roof':>8} {'call us 1/2 thr':>16}") if mem else None
    for r in mem:
        for tag in tags:
            l1, l2 = r["incore"]["L1"], r["incore"]["L2"]
            for lv in (l1, l2):
                lv[f"{tag}_cyc_per_elem"] = lv[f"{tag}_sec_per_elem"] * ghz * 1e9
            ceiling = max(l1[f"{tag}_gbs"], l2[f"{tag}_gbs"])
            r.setdefault("ceiling", {})[tag] = ceiling
            p(f"{r['operator']:<10} {tag:<7} {f(l1[f'{tag}_gbs'], 1, 8)} {f(l1[f'{tag}_cyc_per_elem'], 2, 7)} "
              f"{f(l1['copy_gbs'], 1, 8)} {f(l2[f'{tag}_gbs'], 1, 8)} {f(l2[f'{tag}_cyc_per_elem'], 2, 7)} "
              f"{f(l2['copy_gbs'], 1, 8)} {f(ceiling, 1, 8)} "
              f"{f(100 * ceiling / roofs.one_thread['DRAM'], 0, 6)}% {f(100 * ceiling / roofs.one_thread['L2'], 0, 7)}% "
              f"{f(r['empty_us'][1], 2, 7)} {f(r['empty_us'][2], 2, 7)}")
    if any("dram" in r for r in mem):
        p("")
        p(f"DRAM working set {'x'.join(map(str, DRAM_SHAPE))} (512 MB), best-sample GB/s (± = p10-p90 spread / median), copy probe interleaved on the same bytes")
        p(f"{'operator':<10} {'thr':>3} {'build':<7} {'GB/s':>7} {'±':>4} {'copy GB/s':>9} {'% copy':>7} "
          f"{'roof':>5} {'% roof':>7} {'serial model':>12}")
        for r in mem:
            for t in (1, 2):
                d = r.get("dram", {}).get(t)
                if not d:
                    continue
                for tag in tags:
                    gbs = d[f"{tag}_gbs"]
                    c = r["ceiling"][tag]
                    # no overlap of compute and memory: 1 / (1/roof + 1/ceiling) (per thread)
                    serial = 1.0 / (1.0 / d["roof_gbs"] + 1.0 / (c * t))
                    p(f"{r['operator']:<10} {t:>3} {tag:<7} {f(gbs, 1, 7)} {100 * d[f'{tag}_spread']:>3.0f}% "
                      f"{f(d['copy_gbs'], 1, 9)} {f(100 * gbs / d['copy_gbs'], 0, 6)}% {f(d['roof_gbs'], 0, 5)} "
                      f"{f(100 * gbs / d['roof_gbs'], 0, 6)}% {f(100 * serial / d['roof_gbs'], 0, 11)}%")
    streams = next((r for r in rows if r["operator"] == "streams"), None)
    if streams:
        p("")
        p("streaming loops at DRAM size (512 MB), best-sample GB/s, interleaved with the copy probe")
        p(f"{'loop':<32} {'1 thread':>9} {'2 threads':>10}")
        for k in streams["figures"][1]:
            p(f"{k:<32} {f(streams['figures'][1][k], 1, 9)} {f(streams['figures'][2][k], 1, 10)}")
    g = next((r for r in rows if r["operator"] == "gemm"), None)
    if g:
        p("")
        if "cg" in g:
            p(f"GEMM {'x'.join(map(str, GEMM_CG))} under cachegrind (AVX2: tuned with "
              f"{' '.join(f'{k}={v}' for k, v in g['cg_config'].items())}; OpenBLAS OPENBLAS_CORETYPE=Haswell, 1 thread)")
            p(f"{'kernel':<9} {'instr/FLOP':>10} {'loads/FLOP':>10} {'D1 miss/kFLOP':>13} {'LL miss/kFLOP':>13} "
              f"{'GFLOP/s':>8} {'FLOP/cyc':>8} {'IPC':>5}")
            for tag, c in g["cg"].items():
                c["flop_per_cycle"] = c["gflops"] / ghz
                c["ipc"] = c["instr"] / (c["sec"] * ghz * 1e9)
                p(f"{tag:<9} {f(c['instr_per_flop'], 4, 10)} {f(c['loads_per_flop'], 4, 10)} {f(c['d1_per_kflop'], 3, 13)} "
                  f"{f(c['ll_per_kflop'], 4, 13)} {f(c['gflops'], 1, 8)} {f(c['flop_per_cycle'], 1, 8)} {f(c['ipc'], 2, 5)}")
        p(f"GEMM native, 1 thread, interleaved (tuned AVX-512 vs numpy/OpenBLAS); FMA peak "
          f"{FMA_FLOP_PER_CYCLE} FLOP/cycle x {ghz:.2f} GHz = {FMA_FLOP_PER_CYCLE * ghz:.0f} GFLOP/s")
        for size, d in g["native"].items():
            for v in d.values():
                v["peak"] = v["gflops"] / (ghz * FMA_FLOP_PER_CYCLE)
            p(f"  {size}^3: tuned {d['tuned']['gflops']:.1f} GFLOP/s ({100 * d['tuned']['peak']:.0f}% of peak), "
              f"OpenBLAS {d['openblas']['gflops']:.1f} ({100 * d['openblas']['peak']:.0f}%), "
              f"tuned/OpenBLAS {d['tuned']['gflops'] / d['openblas']['gflops']:.2f}x")
    if mem:
        tag = "now"
        worst = min(mem, key=lambda r: r["ceiling"][tag] / roofs.one_thread["DRAM"])
        worst_l2 = min(mem, key=lambda r: r["ceiling"][tag] / roofs.one_thread["L2"])
        line = (f"memory-bound: in-core ceiling / roof min "
                f"{100 * worst['ceiling'][tag] / roofs.one_thread['DRAM']:.0f}% ({worst['operator']}; DRAM 1 thread), "
                f"{100 * worst_l2['ceiling'][tag] / roofs.one_thread['L2']:.0f}% ({worst_l2['operator']}; L2 1 thread)")
        fr = [(r["dram"][t][f"{tag}_gbs"] / r["dram"][t]["roof_gbs"], r["operator"], t)
              for r in mem if "dram" in r for t in (1, 2)]
        if fr:
            m = min(fr)
            line += f"; measured DRAM min {100 * m[0]:.0f}% of roof ({m[1]}, {m[2]} thr)"
        p("")
        p(line)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operators", default=",".join(ALL_OPS))
    parser.add_argument("--configs", default="previous",
                        help="previous (the README's run), defaults (the templates'), good (GOOD), or the path of "
                             "a bench/cpu_kernels.py output whose 'tuned ... best' lines are used")
    parser.add_argument("--before", help="git revision whose templates are measured next to the current ones")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved samples in cache")
    parser.add_argument("--dram-rounds", type=int, default=7, help="interleaved samples at DRAM size")
    parser.add_argument("--no-cachegrind", action="store_true")
    parser.add_argument("--no-dram", action="store_true")
    parser.add_argument("--no-streams", action="store_true", help="skip the streaming loops at DRAM size")
    parser.add_argument("--json", help="write the raw figures here")
    args = parser.parse_args(argv)
    if args.configs not in ("previous", "defaults", "good"):
        BENCH_BEST.update(read_bench_configs(args.configs))
    ops = [o.strip() for o in args.operators.split(",") if o.strip()]
    bad = [o for o in ops if o not in ALL_OPS]
    if bad:
        parser.error(f"unknown operator(s) {bad}; choose from {', '.join(ALL_OPS)}")
    if not args.no_cachegrind and not shutil.which("valgrind"):
        print("valgrind not found: cachegrind columns skipped", file=sys.stderr)
        args.no_cachegrind = True
    load = os.getloadavg()
    tc = toolchain()
    roofs, _ = cpu_roof.cached(tc.compiler, tc.identity, cache_dir() / "cpu-roofs.json")
    rows = []
    with tempfile.TemporaryDirectory(prefix="ks-cpuprof-") as tmp:
        work = Path(tmp)
        b = Builder(work)
        probe = cpu_roof._build_probe(tc.compiler, work)
        ghz = clock_ghz(b.harness)
        if not args.no_dram and not args.no_streams:
            print("streaming loops ...", file=sys.stderr, flush=True)
            rows.append({"operator": "streams", "figures": profile_streams(b, probe, roofs, args)})
        for name in ops:
            print(f"profiling {name} ...", file=sys.stderr, flush=True)
            ghz = max(ghz, clock_ghz(b.harness))
            if name == "gemm":
                rows.append(profile_gemm(b, args, ghz))
            else:
                rows.append(profile_memory_op(name, b, probe, roofs, args, ghz))
        lines = report(rows, roofs, ghz, load, args)
    print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "ghz": ghz, "load": load,
                                               "roofs": roofs.to_dict()}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
