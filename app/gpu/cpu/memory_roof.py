"""The CPU's memory roofs: bandwidth of each level a working set can live in.

A memory-bound kernel whose data fits in L2 is not limited by DRAM bandwidth, so comparing it
with the DRAM copy rate shows figures like "148% of the hardware limit". Here each level of the
hierarchy (L1, L2, L3 as the machine reports them, then DRAM) gets its own roof, measured with a
STREAM-like copy kernel (read n floats, write n floats) and a read-only stream (n words summed)
built by the system compiler, at one thread and at all threads; a level's roof is the faster of
the two. (A copy pays for a read of every line it writes: a kernel that reads more than it writes,
such as an add or a sum, moves its bytes up to 1.5x faster than a copy does, so the copy rate
alone would refuse honest kernels.) A candidate is compared with the roof of the smallest level
that holds its working set.

The cached roofs live outside every cell's reach and carry a MAC (app.gpu.trusted_cache): a
cell that rewrote them (99999 GB/s turns the beyond-roof refusal off) gets them measured again.

A cached roof may have been measured while the machine was loaded: it is a floor, never a
ceiling. Before a figure beyond it is refused, the worker measures the level again beside the
candidate (Probe, same cell, same load, the kernel's thread count) and holds it to the higher
of the two.

The probe is harness code, not a candidate: it is built from the fixed source below.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from app.gpu.trusted_cache import MAC_SUFFIX, load_trusted, store_trusted, trusted_dir
from app.paths import baseline_cache_dir, cache_dir

log = logging.getLogger("kernelswarm.roofs")

PROBE_SOURCE = r"""
#include <stddef.h>
#include <omp.h>
/* reps passes of dst[i] = src[i] * 1.0f + 0.0f over n floats, split over `threads` threads;
   the multiply-add keeps the compiler from turning passes into one memcpy, and the write of
   every pass depends on nothing the previous pass wrote, as in STREAM's copy. */
void ks_copy(float *restrict dst, const float *restrict src, long n, long reps, int threads) {
    #pragma omp parallel num_threads(threads)
    {
        for (long r = 0; r < reps; ++r) {
            /* the same static split every pass: no barrier needed between passes */
            #pragma omp for schedule(static) nowait
            for (long i = 0; i < n; ++i) dst[i] = src[i] * 1.0f + 0.0f;
        }
    }
}
/* reps passes reading n words; integer xor vectorizes (a float sum would be one long chain) */
unsigned ks_read(const unsigned *restrict src, long n, long reps, int threads) {
    unsigned total = 0;
    #pragma omp parallel num_threads(threads) reduction(^:total)
    {
        for (long r = 0; r < reps; ++r) {
            unsigned acc = (unsigned)r;
            #pragma omp for schedule(static) nowait
            for (long i = 0; i < n; ++i) acc ^= src[i];
            total ^= acc;
        }
    }
    return total;
}
"""
FLAGS = ("-O3", "-march=native", "-std=c11", "-shared", "-fPIC", "-fopenmp")
SAMPLE_S = 0.02  # each sample runs at least this long (timer resolution is not the limit)
DRAM_MIN_BYTES = 64 * 2**20
DRAM_MAX_BYTES = 1 * 2**30


@dataclass(frozen=True)
class CacheLevel:
    name: str  # "L1", "L2", "L3", "DRAM"
    size_bytes: int  # capacity of one instance (0 for DRAM: unbounded)
    shared_by: int  # CPUs sharing one instance


@dataclass
class Roofs:
    """Bandwidth in GB/s per level, at 1 thread and at `threads` (all cores)."""

    levels: list[CacheLevel]
    threads: int
    one_thread: dict[str, float] = field(default_factory=dict)
    all_threads: dict[str, float] = field(default_factory=dict)
    # as measured, before the hierarchy was made monotone (for reports)
    measured_one_thread: dict[str, float] = field(default_factory=dict)
    measured_all_threads: dict[str, float] = field(default_factory=dict)

    def level_for(self, working_set_bytes: float, threads: int = 1) -> CacheLevel:
        """The smallest level whose capacity (what `threads` threads can use of it) holds the
        working set; DRAM when none does."""
        for level in self.levels:
            if level.name == "DRAM":
                return level
            instances = max(1, min(threads, os.cpu_count() or 1) // max(1, level.shared_by))
            if working_set_bytes <= level.size_bytes * instances:
                return level
        return self.levels[-1]

    def bandwidth(self, level: str, threads: int = 1) -> float | None:
        """GB/s at this level for `threads` threads: the one-thread roof scaled by the thread
        count, never above what all threads were measured to reach."""
        one, every = self.one_thread.get(level), self.all_threads.get(level)
        if one is None:
            return every
        if threads <= 1 or every is None:
            return one
        return min(one * threads, every) if threads < self.threads else every

    def roof_for(self, working_set_bytes: float, threads: int = 1) -> tuple[str, float | None]:
        level = self.level_for(working_set_bytes, threads)
        return level.name, self.bandwidth(level.name, threads)

    def to_dict(self) -> dict:
        return {"threads": self.threads, "one_thread": self.one_thread,
                "all_threads": self.all_threads,
                "levels": [vars(level) for level in self.levels]}


def _parse_size(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
    return int(text.rstrip("KMG") or 0) * scale


def _count_cpus(cpu_list: str) -> int:
    count = 0
    for part in cpu_list.strip().split(","):
        if "-" in part:
            lo, hi = part.split("-")
            count += int(hi) - int(lo) + 1
        elif part:
            count += 1
    return max(1, count)


def cache_levels(sysfs: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> list[CacheLevel]:
    """Data caches of CPU 0, smallest first, then DRAM. Falls back to common sizes when the
    system does not say (non-Linux, containers without sysfs)."""
    levels: dict[int, CacheLevel] = {}
    for index in sorted(sysfs.glob("index*")):
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            number = int((index / "level").read_text())
            size = _parse_size((index / "size").read_text())
            shared = _count_cpus((index / "shared_cpu_list").read_text())
        except (OSError, ValueError):
            continue
        if size > 0:
            levels[number] = CacheLevel(f"L{number}", size, shared)
    if not levels:
        cpus = os.cpu_count() or 1
        levels = {1: CacheLevel("L1", 32 * 2**10, 1), 2: CacheLevel("L2", 1 * 2**20, 1),
                  3: CacheLevel("L3", 16 * 2**20, cpus)}
    return [levels[k] for k in sorted(levels)] + [CacheLevel("DRAM", 0, os.cpu_count() or 1)]


def build_c_probe(compiler: str, directory: Path, name: str, source: str,
                  flags: tuple[str, ...], what: str) -> ctypes.CDLL:
    """Build a harness probe (fixed source, never a candidate) and load it."""
    src, lib = directory / f"{name}.c", directory / f"{name}.so"
    src.write_text(source)
    proc = subprocess.run([compiler, *flags, str(src), "-o", str(lib)], capture_output=True,
                          text=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"the {what} probe does not compile: {proc.stderr.strip()[:300]}")
    return ctypes.CDLL(str(lib))


def _build_probe(compiler: str, directory: Path) -> ctypes.CDLL:
    probe = build_c_probe(compiler, directory, "roof_probe", PROBE_SOURCE, FLAGS, "bandwidth")
    probe.ks_copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_long,
                              ctypes.c_int]
    probe.ks_copy.restype = None
    probe.ks_read.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_int]
    probe.ks_read.restype = ctypes.c_uint
    return probe


def seconds(call: Callable[..., object], *args: Any) -> float:
    """How long `call(*args)` took."""
    t0 = time.perf_counter()
    call(*args)
    return time.perf_counter() - t0


def calibrated_reps(run: Callable[[int], object], sample_s: float, reps: int, cap: int) -> int:
    """Repetitions, doubled from `reps` up to `cap`, for which `run(reps)` lasts `sample_s`."""
    while seconds(run, reps) < sample_s and reps < cap:
        reps *= 2
    return reps


def _rate(run: Callable[[int], object], bytes_per_pass: int, samples: int) -> float:
    """GB/s of `run(reps)` moving `bytes_per_pass` per pass, the 90th percentile of `samples`
    timings (a roof is what the level can reach)."""
    run(1)  # warm: pages, threads, caches
    reps = calibrated_reps(run, SAMPLE_S, 1, 1 << 20)  # one sample lasts SAMPLE_S
    rates = [bytes_per_pass * reps / seconds(run, reps) / 1e9 for _ in range(samples)]
    return float(np.percentile(rates, 90))


def _copy_rate(probe: ctypes.CDLL, working_set: int, threads: int, samples: int) -> float:
    """GB/s of the faster of the copy kernel (one half of `working_set` bytes into the other)
    and the read-only stream over all of it: one buffer, so one allocation for both."""
    n = max(1024, working_set // 8)  # floats in each half
    buf = np.ones(2 * n, dtype=np.float32)
    src, dst = buf[:n], buf[n:]
    copy = _rate(lambda reps: probe.ks_copy(dst.ctypes.data, src.ctypes.data, n, reps, threads),
                 8 * n, samples)
    read = _rate(lambda reps: probe.ks_read(buf.ctypes.data, 2 * n, reps, threads), 8 * n, samples)
    return max(copy, read)


def _capacity(level: CacheLevel, threads: int) -> int:
    return level.size_bytes * max(1, threads // max(1, level.shared_by))


def probe_size(level: CacheLevel, levels: list[CacheLevel], threads: int) -> int:
    """A working set inside `level` and outside the level below: half the level, but no more
    than four times the level below (the roof is what the level reaches at its fast end)."""
    caches = [lv for lv in levels if lv.name != "DRAM"]
    if level.name == "DRAM":
        biggest = max((_capacity(lv, threads) for lv in caches), default=0)
        return int(min(max(4 * biggest, DRAM_MIN_BYTES), DRAM_MAX_BYTES))
    below = [lv for lv in caches if lv.size_bytes < level.size_bytes]
    size = _capacity(level, threads) // 2
    if below:
        size = min(size, 4 * _capacity(below[-1], threads))
    return max(4096, size)


def _monotone(rates: dict[str, float], levels: list[CacheLevel]) -> dict[str, float]:
    """A smaller working set never has a lower roof than a larger one: each level's roof is at
    least the roof of every level below it in the hierarchy (noise cannot invert them)."""
    out, floor = {}, 0.0
    for level in reversed(levels):
        floor = max(floor, rates[level.name])
        out[level.name] = floor
    return {lv.name: out[lv.name] for lv in levels}


def measure(compiler: str, threads: int | None = None, samples: int = 7,
            levels: list[CacheLevel] | None = None) -> Roofs:
    """Measure every level at one thread and at `threads` (default: every core)."""
    threads = threads or os.cpu_count() or 1
    levels = levels or cache_levels()
    roofs = Roofs(levels=levels, threads=threads)
    with tempfile.TemporaryDirectory(prefix="kernelswarm-roof-") as tmp:
        probe = _build_probe(compiler, Path(tmp))
        for level in levels:
            one = _copy_rate(probe, probe_size(level, levels, 1), 1, samples)
            roofs.one_thread[level.name] = one
            roofs.all_threads[level.name] = one if threads <= 1 else _copy_rate(
                probe, probe_size(level, levels, threads), threads, samples)
    roofs.measured_one_thread = dict(roofs.one_thread)
    roofs.measured_all_threads = dict(roofs.all_threads)
    roofs.one_thread = _monotone(roofs.one_thread, levels)
    roofs.all_threads = _monotone(roofs.all_threads, levels)
    return roofs


ROOFS_VERSION = "copy-or-read"  # part of the cache key: older files held copy rates only
ROOFS_MAX_AGE_S = 7 * 24 * 3600  # re-measured weekly: a BIOS, kernel or DIMM change moves them


def cache_key(identity: str) -> str:
    """What a cached roof file must match: the compiler, the core count, the probe's kind."""
    return f"{identity}|{os.cpu_count()}|{ROOFS_VERSION}"


def default_file() -> Path:
    """Where the roofs are cached: the trusted directory, which no cell may write."""
    return trusted_dir() / "cpu-roofs.json"


def encode(roofs: Roofs, identity: str) -> bytes:
    """The cache file's bytes for `roofs` measured now with the compiler `identity`."""
    return json.dumps({**roofs.to_dict(), "key": cache_key(identity), "measured_at": time.time(),
                       "measured_one_thread": roofs.measured_one_thread,
                       "measured_all_threads": roofs.measured_all_threads}).encode()


def decode(data: dict) -> Roofs:
    """The roofs in a cache file's parsed JSON (encode's counterpart; raises on a damaged one)."""
    levels = [CacheLevel(**lv) for lv in data["levels"]]
    return Roofs(levels, data["threads"], data["one_thread"], data["all_threads"],
                 data.get("measured_one_thread", {}), data.get("measured_all_threads", {}))


def _must_be_signed(path: Path) -> bool:
    """A roof file in the trusted directory, or anywhere a cell may write (the cache and the
    baseline cell's cache), or one written with a MAC, is used only with a matching MAC; a
    file given explicitly elsewhere (a test's planted roofs, a user's own) is taken as given."""
    real = os.path.realpath(path)
    for d in (trusted_dir(), cache_dir(), baseline_cache_dir()):
        if real.startswith(os.path.realpath(d) + os.sep):
            return True
    return os.path.exists(f"{path}{MAC_SUFFIX}")


def _read(path: Path) -> bytes | None:
    if _must_be_signed(path):
        return load_trusted(path)  # a tampered file is discarded (logged) and measured again
    try:
        return path.read_bytes()
    except OSError:
        return None


def read_cached(path: Path, key: str, max_age_s: float, decode: Callable[[dict], Any]) -> Any:
    """decode() of the cache file at `path` when it is intact (signed where it must be),
    measured for `key` and younger than `max_age_s`; None otherwise (measure again)."""
    raw = _read(path)
    if raw is not None:
        try:
            data = json.loads(raw)
            if data.get("key") == key and time.time() - data.get("measured_at", 0) < max_age_s:
                return decode(data)
        except (ValueError, KeyError, TypeError, AttributeError):
            pass  # a damaged cache is measured again
    return None


def cached_figure(cache_file: Path, key: str, identity: str, max_age_s: float, refresh: bool,
                  measure_now: Callable[[], Any], encode_figure: Callable[[Any, str], bytes],
                  decode_figure: Callable[[dict], Any]) -> tuple[Any, bool]:
    """A machine figure (the memory roofs, the FP32 peak) from `cache_file` when fresh and
    intact (read_cached), else measured now and stored signed; (figure, from_cache)."""
    figure = None if refresh else read_cached(cache_file, key, max_age_s, decode_figure)
    if figure is not None:
        return figure, True
    figure = measure_now()
    try:
        store_trusted(cache_file, encode_figure(figure, identity))
    except OSError as exc:  # not kept (another user's file, a read-only home): still this
        # run's roof; without it the guard against figures beyond the hardware would be off
        log.warning("the measured figure could not be kept in %s (%s): it is measured again "
                    "next time", cache_file, exc)
    return figure, False


def cached(compiler: str, identity: str, cache_file: Path | None = None,
           max_age_s: float = ROOFS_MAX_AGE_S, refresh: bool = False) -> tuple[Roofs, bool]:
    """The roofs measured on this machine with this compiler, from `cache_file` (default:
    default_file()) when fresh and intact; (roofs, from_cache)."""
    return cached_figure(cache_file or default_file(), cache_key(identity), identity, max_age_s,
                         refresh, lambda: measure(compiler), encode, decode)


class Probe:
    """The probe inside a worker cell, built once into the cell's own scratch directory (a
    library in the shared cache could have been replaced by an earlier cell), measuring one
    level again beside a candidate: same cell, same load, the candidate's thread count."""

    def __init__(self, compiler: str) -> None:
        self.compiler = compiler
        self._dir: tempfile.TemporaryDirectory | None = None
        self._probe: ctypes.CDLL | None = None

    def rate(self, level: CacheLevel, levels: list[CacheLevel], threads: int,
             samples: int = 5) -> float:
        """GB/s at `level` for `threads` threads, measured now."""
        return _copy_rate(self._built(), probe_size(level, levels, threads), threads, samples)

    def rate_at(self, working_set: int, threads: int, samples: int = 5) -> float:
        """GB/s streaming a working set of the candidate's own size, measured now: where its
        data really lives, whatever the cache sizes the machine reports (a VM's may be off)."""
        size = int(min(max(4096, working_set), DRAM_MAX_BYTES))
        return _copy_rate(self._built(), size, threads, samples)

    def _built(self) -> ctypes.CDLL:
        if self._probe is None:
            self._dir = tempfile.TemporaryDirectory(prefix="kernelswarm-roof-")
            self._probe = _build_probe(self.compiler, Path(self._dir.name))
        return self._probe
