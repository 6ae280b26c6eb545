"""The memory-bound CPU templates after the profile's fixes (bench/cpu_profile.md): every
tunable branch, on every instruction-set path the template has (AVX-512, AVX2, plain SSE or C),
is correct on shapes whose sizes are not multiples of the vector width or the tile (tails), for
every input distribution the cascade draws; and the profile's own helpers work."""

from __future__ import annotations

import ctypes
import itertools
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from app.catalog import get_operator
from app.catalog.cpu.isa import cpu_flags
from app.gpu.cpu import find_compiler, static_problems, toolchain
from app.gpu.verify import CheckCase, make_inputs

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")

ROOT = Path(__file__).resolve().parents[1]
X86 = {"avx512f", "avx2"} <= cpu_flags()
# instruction-set paths: as the backend builds (-march=native), then with the wider sets off
PATHS = {"native": ()}
if X86:
    PATHS.update({"avx2": ("-mno-avx512f",), "sse": ("-mno-avx512f", "-mno-avx2", "-mno-avx", "-mno-fma")})
TAIL_SHAPES = [[1, 1], [3, 7], [5, 33], [17, 77], [2, 203], [4, 1024]]
TRANSPOSE_SHAPES = [[1, 1], [3, 5], [17, 33], [40, 24], [129, 70], [64, 96]]
BRANCHES = {
    "softmax": [dict(zip(("VEC", "ACC", "ONLINE", "EXP_IMPL"), v))
                for v in itertools.product([4, 16], [1, 4], [0, 1], [0, 1])],
    "rmsnorm": [dict(zip(("VEC", "ACC", "ACC_DOUBLE"), v))
                for v in itertools.product([4, 16], [1, 8], [0, 1])],
    "layernorm": [dict(zip(("VEC", "STATS"), v)) for v in itertools.product([4, 8, 16], [0, 1])],
    "bias_gelu": [dict(zip(("VEC", "ERF_IMPL"), v)) for v in itertools.product([4, 16], [0, 1, 2])],
    "transpose": [dict(zip(("TILE", "VEC", "WRITE_MAJOR"), v))
                  for v in itertools.product([4, 8, 16, 32, 128], [4, 8, 16], [0, 1])],
}


def build(tmp_path: Path, name: str, source: str, config: dict, extra: tuple[str, ...]) -> ctypes.CDLL:
    tc = toolchain()
    src, lib = tmp_path / f"{name}.c", tmp_path / f"{name}.so"
    src.write_text(source)
    cmd = [tc.compiler, *tc.flags, *extra, *(f"-D{k}={v}" for k, v in config.items()), str(src),
           "-o", str(lib)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return ctypes.CDLL(str(lib))


def relative_error(op, inputs, got) -> float:
    x64 = {k: v.astype(np.float64) for k, v in inputs.items()}
    ref = op.reference64(x64)
    return float(np.max(np.abs(got - ref) / (op.scale64(x64, ref) + 1e-30)))


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("operator", sorted(BRANCHES))
@pytest.mark.slow
def test_every_branch_is_correct_on_tails_on_every_isa_path(tmp_path, operator, path):
    op = get_operator("cpu", operator)
    shapes = TRANSPOSE_SHAPES if operator == "transpose" else TAIL_SHAPES
    failures = []
    # the compiles are independent and most of the time (transpose: 30 of them): two at once,
    # so a serial run's second core is not idle; each branch is still built and checked
    with ThreadPoolExecutor(max_workers=2) as pool:
        libs = list(pool.map(lambda ib: build(tmp_path, f"k{ib[0]}", op.template(),
                                              {**ib[1], "CHUNK": 4, "THREADS": 2}, PATHS[path]),
                             enumerate(BRANCHES[operator])))
    for branch, lib in zip(BRANCHES[operator], libs):
        fn = lib.ks_kernel
        n_in = len(op.input_shapes(tuple(shapes[0])))
        fn.argtypes = [ctypes.c_void_p] * (1 + n_in) + [ctypes.c_long] * 2
        for shape, distribution in itertools.product(shapes, op.distributions):
            inputs = make_inputs(np, op, CheckCase(list(shape), distribution, 3), "float32")
            out = np.full(op.output_shape(tuple(shape)), np.nan, np.float32)
            fn(out.ctypes.data, *(inputs[k].ctypes.data for k in op.input_shapes(tuple(shape))), *shape)
            if operator == "transpose":
                ok = np.array_equal(out, inputs["x"].T)
            else:
                # as tests/test_cpu_ops_new.py: 1e-5 x growth
                err = relative_error(op, inputs, out)
                ok = np.isfinite(out).all() and err < 1e-5 * op.growth(tuple(shape))
            if not ok:
                failures.append((branch, shape, distribution))
    assert not failures, failures[:10]


def test_the_rational_erf_is_accurate_across_the_range(tmp_path):
    """bias_gelu with ERF_IMPL=2 against float64 erf, from deep negative to large positive z,
    within the cascade's float32 tolerance (1e-5 of |y| + 0.05 |z|) on every ISA path."""
    op = get_operator("cpu", "bias_gelu")
    x = np.linspace(-30, 30, 200_001, dtype=np.float32).reshape(1, -1)
    b = np.zeros(x.shape[1], np.float32)
    for i, extra in enumerate(PATHS.values()):
        fn = build(tmp_path, f"erf{i}", op.template(), {"ERF_IMPL": 2, "VEC": 16, "THREADS": 1}, extra).ks_kernel
        fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long] * 2
        y = np.empty_like(x)
        fn(y.ctypes.data, x.ctypes.data, b.ctypes.data, 1, x.shape[1])
        assert relative_error(op, {"x": x, "b": b}, y) < 5e-6


@pytest.mark.parametrize("operator", sorted(BRANCHES))
def test_templates_pass_the_source_checks(operator):
    op = get_operator("cpu", operator)
    for branch in BRANCHES[operator][:4]:
        assert static_problems(op.template(), toolchain(), {**branch, "THREADS": 2}) == []


def test_transpose_micro_tiles_read_whole_lines_under_cachegrind(tmp_path):
    """The register transpose's point: L1 misses per element near one line of x and one of y
    per 16 floats (the element-wise tile missed on almost every read)."""
    if not (X86 and __import__("shutil").which("valgrind")):
        pytest.skip("needs valgrind on x86")
    sys.path.insert(0, str(ROOT / "bench"))
    import cpu_profile as P

    b = P.Builder(tmp_path)
    op = get_operator("cpu", "transpose")
    lib = b.kernel(op.template(), {"TILE": 64, "VEC": 8, "WRITE_MAJOR": 0, "THREADS": 1},
                   ("-mno-avx512f",))
    ws = P.Workset.make(op, [256, 512])
    cg = P.cachegrind(b.driver, P.driver_args(lib, "ks_kernel", "ks", ws), "ks_kernel", tmp_path)
    assert cg["D1"] / ws.elements < 0.3
    assert cg["Ir"] / ws.elements < 2.5


def test_profile_helpers_time_and_interleave(tmp_path):
    sys.path.insert(0, str(ROOT / "bench"))
    import cpu_profile as P

    b = P.Builder(tmp_path)
    assert 0.5 < P.clock_ghz(b.harness) < 10
    op = get_operator("cpu", "rmsnorm")
    ws = P.Workset.make(op, [8, 256])
    k = P.Kernel(b.harness, b.kernel(op.template(), {"THREADS": 1}), ws)
    stats = P.interleave({"k": k, "k2": k}, rounds=3, min_s=0.002)
    assert set(stats) == {"k", "k2"} and all(s["best"] > 0 for s in stats.values())
    x, w = ws.arrays[1].reshape(8, 256), ws.arrays[2]
    ref = x / np.sqrt((x.astype(np.float64) ** 2).mean(axis=1, keepdims=True) + 1e-6) * w
    assert np.allclose(ws.arrays[0].reshape(8, 256), ref, rtol=1e-4, atol=1e-5)
