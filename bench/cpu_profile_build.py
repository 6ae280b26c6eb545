"""Building for bench/cpu_profile.py: the kernels as the CPU backend builds them, the ctypes
timing harness, the stand-alone driver that cachegrind runs, and a template at an older git
revision (`--before`)."""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path

from app.gpu.cpu import toolchain

ROOT = Path(__file__).resolve().parents[1]

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


def git_source(rev: str, kernel_file: str) -> str:
    """The kernel at `rev`, wherever it lived then (app/catalog/kernels/ before the CPU folder)."""
    for folder in ("app/catalog/cpu/kernels", "app/catalog/kernels"):
        shown = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{folder}/{kernel_file}"],
                               check=False, capture_output=True, text=True)
        if shown.returncode == 0:
            return shown.stdout
    raise RuntimeError(f"{kernel_file} not found at {rev}")
