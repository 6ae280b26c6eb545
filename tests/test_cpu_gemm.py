"""The packed, register-blocked GEMM template: every SIMD path this machine reports verifies on
shapes with tails (not multiples of MR, NR, the vector width, KC, MC or NC), under both loop
orders and both ways of splitting work between threads; a path the compiler target lacks does
not build; the template passes the preprocessor checks; the evaluator runs it end to end."""

from __future__ import annotations

import ctypes
import itertools
import random
import subprocess

import numpy as np
import pytest

from app.catalog.cpu.isa import AVX2, AVX512, PORTABLE, isa_levels, machine_isa_levels
from app.catalog.cpu.operator import kernel_source
from app.catalog.cpu.ops import GEMM
from app.core.types import Candidate
from app.goal import Goal
from app.gpu.cpu import (
    CpuEvaluator,
    CpuSettings,
    c_checks,
    compile_library,
    find_compiler,
    toolchain,
)
from app.gpu.timing import TimingSettings
from app.gpu.worker import Deadlines

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")

WIDTH = {PORTABLE: 4, AVX2: 8, AVX512: 16}
# a tiny blocking, so that small shapes cross KC, MC and NC blocks
SMALL_BLOCKS = {"KC": 16, "MC": 20, "NC": 40, "UK": 4, "PF": 1}


def build(tmp_path, config: dict, flags: tuple[str, ...] | None = None):
    tc = toolchain()
    lib = tmp_path / ("gemm-" + "-".join(f"{k}{v}" for k, v in sorted(config.items())) + ".so")
    if flags is None:
        ok, log = compile_library(kernel_source("cpu_gemm.c"), config, lib, tc, 120)
    else:
        src = tmp_path / "kernel.c"
        src.write_text(kernel_source("cpu_gemm.c"))
        proc = subprocess.run([tc.compiler, *flags, *(f"-D{k}={v}" for k, v in config.items()),
                               str(src), "-o", str(lib)], check=False, capture_output=True,
                              text=True)
        ok, log = proc.returncode == 0, proc.stderr
    if not ok:
        return None, log
    fn = ctypes.CDLL(str(lib)).ks_kernel
    fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long] * 3
    fn.restype = None
    return fn, log


def gemm_error(fn, m: int, n: int, k: int, seed: int = 0) -> float:
    """Largest error relative to sum |a||b| (the scale of a dot product's rounding)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.full((m, n), np.nan, np.float32)  # every element must be written
    fn(c.ctypes.data, a.ctypes.data, b.ctypes.data, m, n, k)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64) + 1e-30
    err = np.abs(c - ref) / scale
    return float(np.max(err)) if np.all(np.isfinite(c)) else float("inf")


def tail_shapes(mr: int, nr: int) -> list[tuple[int, int, int]]:
    """Shapes below, at and past one micro-tile and past the small blocks, none a multiple of
    the vector width, plus K = 1 and a shape that is only tails."""
    return [(1, 1, 1), (mr - 1 or 1, nr - 1, 3), (mr + 1, nr + 1, 17), (2 * mr + 3, 3 * nr + 5, 41),
            (43, 83, 35), (7, 1, 9), (1, 29, 5), (mr, nr, 16)]


CONFIGS = [(mr, nv, order, par, threads)
           for (mr, nv), order, par, threads in itertools.product(
               [(4, 1), (6, 2), (8, 3), (14, 2)], [0, 1], [0, 1], [1, 2])
           if (order, par, threads) in {(0, 0, 1), (1, 0, 2), (0, 1, 2), (1, 1, 1)}]
SHARE_B = {(0, 0, 1): 0, (1, 0, 2): 0}  # the others share the packed B block


@pytest.mark.parametrize("isa", machine_isa_levels())
@pytest.mark.parametrize("mr, nv, order, par, threads", CONFIGS)
@pytest.mark.slow
def test_every_simd_path_verifies_on_tail_shapes(tmp_path, isa, mr, nv, order, par, threads):
    if isa == AVX2 and mr * nv > 14:
        pytest.skip("the space keeps AVX2 micro-tiles within its 16 registers")
    config = {"ISA": isa, "MR": mr, "NV": nv, "ORDER": order, "PAR": par, "THREADS": threads,
              "SHARE_B": SHARE_B.get((order, par, threads), 1), **SMALL_BLOCKS}
    fn, log = build(tmp_path, config)
    assert fn is not None, log
    for m, n, k in tail_shapes(mr, nv * WIDTH[isa]):
        assert gemm_error(fn, m, n, k) < 1e-5, (config, (m, n, k))


@pytest.mark.parametrize("isa", machine_isa_levels())
@pytest.mark.slow
def test_default_blocking_verifies_past_one_block(tmp_path, isa):
    """The shipped block sizes on a shape crossing KC and MC with tails everywhere."""
    mr, nv = (12, 2) if isa == AVX512 else (6, 2)
    for share_b in (0, 1):
        config = {"ISA": isa, "MR": mr, "NV": nv, "KC": 128, "MC": 96, "NC": 256, "THREADS": 2,
                  "SHARE_B": share_b}
        fn, log = build(tmp_path, config)
        assert fn is not None, log
        assert gemm_error(fn, 203, 301, 263) < 1e-5


def test_a_simd_path_the_target_lacks_does_not_build(tmp_path):
    flags = ("-O3", "-std=c11", "-shared", "-fPIC", "-march=x86-64")  # SSE2 only
    for isa in (AVX2, AVX512):
        fn, log = build(tmp_path, {"ISA": isa, "MR": 4, "NV": 1}, flags)
        assert fn is None and "needs" in log
    fn, log = build(tmp_path, {"ISA": PORTABLE, "MR": 4, "NV": 2}, flags)
    assert fn is not None, log
    assert gemm_error(fn, 13, 11, 7) < 1e-5


def test_isa_levels_follow_the_reported_flags():
    assert isa_levels({"avx2", "fma", "avx512f"}, "x86_64") == [AVX512, AVX2, PORTABLE]
    assert isa_levels({"avx2", "fma"}, "x86_64") == [AVX2, PORTABLE]
    assert isa_levels({"avx2"}, "x86_64") == [PORTABLE]  # AVX2 without FMA: portable only
    assert isa_levels({"avx512f", "avx2", "fma"}, "aarch64") == [PORTABLE]
    params = GEMM.params(cpus=2)
    assert params["ISA"] == list(machine_isa_levels()) and params["ISA"][-1] == PORTABLE


def test_every_point_of_the_space_fits_registers_and_stack():
    space = GEMM.space()
    rng = random.Random(3)
    for _ in range(200):
        c = space.sample(rng)
        limit = {AVX512: 28, AVX2: 14, PORTABLE: 24}[c["ISA"]]
        assert c["MR"] * c["NV"] <= limit
        assert 4 * (c["KC"] * c["NC"] + c["MC"] * c["KC"]) <= 3 * 2**20


def test_the_template_passes_the_preprocessor_checks_for_every_isa():
    tc = toolchain()
    for isa in machine_isa_levels():
        problems = c_checks.check_source(kernel_source("cpu_gemm.c"), tc.compiler, tc.flags,
                                         {"ISA": isa, "MR": 6, "NV": 2}, "ks_kernel")
        assert problems == [], (isa, problems)


@pytest.mark.slow
def test_the_evaluator_runs_the_largest_blocks_end_to_end():
    """Biggest stack scratch the space allows, through the cascade's checks and verification."""
    settings = CpuSettings(
        timing=TimingSettings(warmup=1, min_samples=3, max_samples=3, max_seconds=0.2),
        baseline_timing=TimingSettings(warmup=1, min_samples=3, max_samples=3, max_seconds=0.2),
        deadlines=Deadlines(compile_s=60.0, run_s=20.0), flush_bytes=0, memory_limit_bytes=2 << 30)
    goal = Goal(name="gemm e2e", backend="cpu", operator="gemm", shapes=[[96, 144, 80]])
    isa = machine_isa_levels()[0]
    config = {"ISA": isa, "MR": 6, "NV": 2, "KC": 128, "MC": 384, "NC": 4096, "UK": 4,
              "ORDER": 0, "PAR": 1, "PF": 1, "SHARE_B": 1, "THREADS": GEMM.params()["THREADS"][-1]}
    with CpuEvaluator(goal, settings=settings) as ev:
        assert ev.space.is_valid(config)
        r = ev.evaluate(Candidate(config=config, key="gemm-e2e"))
    assert r.ok, (r.reason, r.detail, r.log[-500:])
    assert r.metrics["gflops"] > 0
