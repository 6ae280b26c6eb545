"""Timing for bench/cpu_profile.py: page-aligned working sets, a built kernel or the roof's copy
probe as a callable (reps -> seconds per call), interleaved samples and the core clock."""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

SAMPLE_S = 0.02  # each timed sample lasts at least this long
STAT = "best"  # the statistic reported (see interleave)


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



def clock_ghz(h: ctypes.CDLL) -> float:
    """The fastest of 15 short add chains (4 ms each): on a shared core a longer one is
    likely to be descheduled part of the time and read a lower clock."""
    return max(h.ks_clock_ghz(2_000_000) for _ in range(15))
