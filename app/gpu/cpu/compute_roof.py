"""The CPU's compute roof: peak FP32 FLOP/s at one thread and at every thread.

A compute-bound kernel (its figure in GFLOP/s) cannot do its FLOPs faster than the FMA units
allow; a figure beyond that is a kernel that skips work or a timing that lies. The peak is
measured, not read from a datasheet: a fixed probe (PROBE_SOURCE, harness code, never a
candidate) built by the system compiler for this machine runs CHAINS independent vector FMA
chains per thread, enough to cover the FMA latency on every unit (12 x 16 lanes with AVX-512,
12 x 8 with AVX2), in registers, no memory traffic. Each sample lasts SAMPLE_S; the roof is the
fastest of SAMPLES (the machine's peak is what it reaches, a busy moment only lowers it).

The figures are cached like the memory roofs (app.gpu.cpu.memory_roof): in the trusted directory,
outside every cell's write set, MAC-checked (app.gpu.trusted_cache), keyed by the compiler,
the CPU model and the core count. A cached peak may have been measured on a loaded machine:
it is a floor, never a ceiling. Before a figure beyond it is refused, the cell measures the
peak again beside the candidate at its thread count (Probe, measure_beside) and the higher of
the two holds.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import platform
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from app.gpu.cpu.memory_roof import build_c_probe, cached_figure, calibrated_reps, seconds
from app.gpu.trusted_cache import trusted_dir

PROBE_SOURCE = r"""
#include <omp.h>
#if defined(__AVX512F__)
#define VB 64
#elif defined(__AVX__)
#define VB 32
#else
#define VB 16
#endif
#define CHAINS 12
typedef float vf __attribute__((vector_size(VB)));
/* reps x CHAINS independent a = a * m + c per thread (one FMA, or a multiply and an add, per
   lane), every accumulator a named register; the sum is returned so nothing is dropped. */
float ks_fma(long reps, int threads, float seed) {
    float total = 0.0f;
    #pragma omp parallel num_threads(threads) reduction(+:total)
    {
        vf a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, m, c;
        for (int l = 0; l < VB / 4; ++l) {
            m[l] = 0.9999f; c[l] = seed * 1e-3f;
            a0[l] = seed + l; a1[l] = a0[l] + 1; a2[l] = a0[l] + 2; a3[l] = a0[l] + 3;
            a4[l] = a0[l] + 4; a5[l] = a0[l] + 5; a6[l] = a0[l] + 6; a7[l] = a0[l] + 7;
            a8[l] = a0[l] + 8; a9[l] = a0[l] + 9; a10[l] = a0[l] + 10; a11[l] = a0[l] + 11;
        }
        for (long r = 0; r < reps; ++r) {
            a0 = a0 * m + c; a1 = a1 * m + c; a2 = a2 * m + c; a3 = a3 * m + c;
            a4 = a4 * m + c; a5 = a5 * m + c; a6 = a6 * m + c; a7 = a7 * m + c;
            a8 = a8 * m + c; a9 = a9 * m + c; a10 = a10 * m + c; a11 = a11 * m + c;
        }
        vf s = ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) + ((a8 + a9) + (a10 + a11));
        for (int l = 0; l < VB / 4; ++l) total += s[l];
    }
    return total;
}
long ks_flops_per_rep(void) { return 2L * CHAINS * (VB / 4); }
"""
# GNU C: vector extensions, and a * m + c contracted into an FMA (ISO C modes forbid it)
FLAGS = ("-O3", "-march=native", "-std=gnu11", "-ffp-contract=fast", "-shared", "-fPIC",
         "-fopenmp")
LEVEL = "FP32"  # the roof's name in a RoofCheck
SAMPLE_S = 0.002  # a sample: far above the timer's resolution, short enough to miss a busy moment
SAMPLES = 9
VERSION = "fma12"  # part of the cache key: a changed probe is measured again
MAX_AGE_S = 7 * 24 * 3600


@dataclass
class ComputeRoof:
    """Peak FP32 GFLOP/s at one thread and at `threads` (every core)."""

    threads: int
    one_thread: float
    all_threads: float

    def gflops(self, threads: int) -> float:
        """The peak for `threads` threads: the one-thread peak times the threads, never above
        what every thread was measured to reach, never below one thread's (a loaded machine
        can measure more threads slower)."""
        if threads <= 1:
            return self.one_thread
        every = self.all_threads if threads >= self.threads else \
            min(self.one_thread * threads, self.all_threads)
        return max(every, self.one_thread)


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Model name")):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "CPU"


def build_probe(compiler: str, directory: Path) -> ctypes.CDLL:
    probe = build_c_probe(compiler, directory, "flops_probe", PROBE_SOURCE, FLAGS, "FLOP/s")
    probe.ks_fma.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_float]
    probe.ks_fma.restype = ctypes.c_float
    probe.ks_flops_per_rep.restype = ctypes.c_long
    return probe


def calibrate(probe: ctypes.CDLL) -> int:
    """Repetitions per thread for a sample of SAMPLE_S, found on one thread (on a busy
    machine a thread team waits for its slowest member, which would end the search early)."""
    probe.ks_fma(1000, 1, 1.0)  # warm: the clock
    return calibrated_reps(lambda reps: probe.ks_fma(reps, 1, 1.0), SAMPLE_S, 1 << 12, 1 << 30)


def rate(probe: ctypes.CDLL, threads: int, samples: int = SAMPLES, reps: int = 0) -> float:
    """GFLOP/s of the probe at `threads` threads: the fastest of `samples` timings."""
    reps = reps or calibrate(probe)
    per_rep = probe.ks_flops_per_rep() * threads
    probe.ks_fma(1000, threads, 1.0)  # warm: the thread team
    return max((per_rep * reps / seconds(probe.ks_fma, reps, threads, 1.0) / 1e9
                for _ in range(samples)), default=0.0)


def measure(compiler: str, threads: int | None = None, samples: int = SAMPLES) -> ComputeRoof:
    threads = threads or os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="kernelswarm-flops-") as tmp:
        probe = build_probe(compiler, Path(tmp))
        reps = calibrate(probe)
        one = rate(probe, 1, samples, reps)
        every = rate(probe, threads, samples, reps) if threads > 1 else one
    return ComputeRoof(threads, one, max(one, every))  # more threads never lower the peak


def cache_key(identity: str) -> str:
    """What a cached peak must match: compiler, CPU model, core count, the probe's version."""
    return f"{identity}|{cpu_model()}|{os.cpu_count()}|{VERSION}"


def default_file() -> Path:
    return trusted_dir() / "cpu-compute-roof.json"


def cached(compiler: str, identity: str, cache_file: Path | None = None,
           max_age_s: float = MAX_AGE_S, refresh: bool = False) -> tuple[ComputeRoof, bool]:
    """The peak measured on this machine with this compiler, from `cache_file` (default:
    default_file(); a file in the trusted directory or the cells' cache is used only with its
    MAC, as the memory roofs are) when fresh and intact; (roof, from_cache)."""
    return cached_figure(cache_file or default_file(), cache_key(identity), identity, max_age_s,
                         refresh, lambda: measure(compiler), encode, decode)


def encode(roof: ComputeRoof, identity: str) -> bytes:
    return json.dumps({"threads": roof.threads, "one_thread": roof.one_thread,
                       "all_threads": roof.all_threads, "key": cache_key(identity),
                       "measured_at": time.time()}).encode()


def decode(data: dict) -> ComputeRoof:
    """The peak in a cache file's parsed JSON (encode's counterpart; raises on a damaged one)."""
    return ComputeRoof(int(data["threads"]), float(data["one_thread"]), float(data["all_threads"]))


@functools.cache
def _built_in_cell(compiler: str) -> tuple[tempfile.TemporaryDirectory, ctypes.CDLL]:
    """The probe inside a worker cell, built once per compiler for the process's life into the
    cell's own scratch directory (a library in the shared cache could have been replaced by an
    earlier cell), with the directory it lives in."""
    tmp = tempfile.TemporaryDirectory(prefix="kernelswarm-flops-")
    return tmp, build_probe(compiler, Path(tmp.name))


def measure_beside(compiler: str, threads: int) -> dict[str, float]:
    """{LEVEL: GFLOP/s} measured now in this cell with `compiler` at `threads` threads, the
    candidate's process idle meanwhile."""
    return {LEVEL: rate(_built_in_cell(compiler)[1], max(1, threads))}
