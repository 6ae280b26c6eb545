"""The CUDA KDA operator without a GPU: every recommended configuration (and a STAGES=3 one)
compiles with NVRTC for sm_90a and sm_80 with no spills (registers / spills / shared memory per
kernel and STAGES printed: run with -s to see the table), the space's restrictions agree with the
kernels' shared-memory layouts (kda_state's grows with its STAGES pipeline stages), and
the NumPy emulation of the exact stage decomposition (tests/fake_kda.py: same workspaces, same
chunk tables, bf16 where the kernels store bf16) matches the float64 recurrent reference within
the bf16 norm tolerance, fixed-length and packed, with and without fusion, at every STAGES
(the emulation models the math, not the cp.async pipeline: STAGES changes no arithmetic), and
kda.cu itself, compiled by g++ with a CPU thread per CUDA thread, gives the same answers."""

from __future__ import annotations

import itertools

import fake_kda
import numpy as np
import pytest

from app.catalog import get_operator
from app.catalog.cuda.kda import SHARED_LIMIT, chunk_tables, cu_seqlens, recurrent_xp, shared_bytes
from app.catalog.kda import TOLERANCE, check_close, make_inputs, recurrent_kda
from app.catalog.protocol import from_storage
from app.gpu.verify import CheckCase, make_outputs, tolerance_for
from app.gpu.verify import make_inputs as harness_inputs

OP = get_operator("cuda", "kda")
GOAL = [2, 4096, 16, 128]
# compiled besides the recommended configurations: three stages in flight (fits sm_80 too)
EXTRA = [{"BT": 32, "NT": 256, "VT": 64, "FUSE_GATE": 1, "FUSE_OUTPUT": 0, "STAGES": 3}]


def compile_table(arch: str, tmp_path) -> list[tuple]:
    from app.gpu.cuda import nvrtc

    rows = []
    for cfg in OP.recommended("bfloat16", GOAL) + EXTRA:
        built = nvrtc.compile_source(OP.render(cfg, GOAL, "bfloat16"), OP.kernel_for("bfloat16"), arch,
                                     cache=tmp_path)
        for step in OP.steps(cfg, GOAL, "bfloat16"):
            r = built.resource(step.kernel)
            rows.append((arch, cfg, step.kernel, r.registers, r.spill_stores, r.spill_loads,
                         r.shared_bytes + step.launch.shared_bytes, _threads(step.launch)))
    return rows


def _threads(launch) -> int:
    return launch.block[0] * launch.block[1] * launch.block[2]


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.slow
def test_recommended_configs_compile_without_spills(arch, tmp_path):
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    rows = compile_table(arch, tmp_path)
    print(f"\nKDA {GOAL} bf16 on {arch}: config | STAGES | kernel | registers | spill st/ld B | shared B | threads")
    for arch_, cfg, kernel, regs, st, ld, smem, threads in rows:
        flags = "".join(f"{k}={v} " for k, v in cfg.items() if k != "STAGES")
        print(f"  {flags}| {cfg['STAGES']} | {kernel:16s} | {regs:3d} | {st}/{ld} | {smem:6d} | {threads}")
    for arch_, cfg, kernel, regs, st, ld, smem, threads in rows:
        assert regs > 0 and st == 0 and ld == 0, (arch, cfg, kernel)
        assert smem <= SHARED_LIMIT[arch], (arch, cfg, kernel, smem)
        assert regs * threads <= 65536
    kernels = {r[2] for r in rows}
    assert kernels == {"kda_gate_cumsum", "kda_wy", "kda_state", "kda_output"}
    assert {r[1]["STAGES"] for r in rows if r[2] == "kda_state"} == {1, 2, 3}


def test_recommended_configs_are_in_the_space_and_fit_hopper():
    space = OP.space("bfloat16")
    recommended = OP.recommended("bfloat16", GOAL)
    for cfg in recommended + EXTRA:
        assert space.is_valid(cfg) and OP.static_check(cfg, GOAL, "bfloat16") is None, cfg
    assert {1, 2} <= {cfg["STAGES"] for cfg in recommended}
    # the restriction on shared memory is the kernels' own layout: valid <=> every kernel fits
    for bt, vt, fuse, stages in itertools.product((16, 32, 64), (32, 64, 128), (0, 1), (1, 2, 3)):
        cfg = {"BT": bt, "NT": 256, "VT": vt, "FUSE_GATE": 1, "FUSE_OUTPUT": fuse, "STAGES": stages}
        steps = OP.steps(cfg, GOAL, "bfloat16")
        assert all(s.launch.shared_bytes == shared_bytes(s.kernel, cfg) for s in steps)
        fits = all(shared_bytes(s.kernel, cfg) <= SHARED_LIMIT["sm_90a"] for s in steps)
        if fuse:  # the output kernel is compiled (as a rewrite's base) even when fused
            fits = fits and shared_bytes("kda_output", cfg) <= SHARED_LIMIT["sm_90a"]
        assert space.is_valid(cfg) == fits, cfg
    # the state kernel's layout in kda.cu: STAGES stages of raw tiles (w, k, u, q in bf16, Gc in
    # fp32), then S, delta, the last gate row (+ the output kernel's buffers when fused)
    for bt, vt, fuse, stages in itertools.product((16, 64), (32, 128), (0, 1), (1, 3)):
        cfg = {"BT": bt, "VT": vt, "FUSE_OUTPUT": fuse, "STAGES": stages}
        stage = 2 * bt * 128 * 2 + 4 * bt * 128 + 2 * bt * vt + fuse * 2 * bt * 128
        rest = 128 * vt + bt * (vt + 1) + 128 + fuse * (3 * bt * 129 + bt * (bt + 1))
        assert shared_bytes("kda_state", cfg) == stages * stage + 4 * rest, cfg
    # what STAGES costs: chunk 64, V halves, unfused fits two stages on Hopper, not three
    big = {"BT": 64, "NT": 256, "VT": 64, "FUSE_GATE": 1, "FUSE_OUTPUT": 0}
    assert [space.is_valid({**big, "STAGES": s}) for s in (1, 2, 3)] == [True, True, False]


def test_chunk_tables_never_cross_a_sequence():
    cu = cu_seqlens(1000, 7)
    assert cu[0] == 0 and cu[-1] == 1000 and (np.diff(cu) > 0).all()
    chunks, seqs = chunk_tables([1, 1000, 4, 128, 7], 64)
    for s, (first, count, start, _) in enumerate(seqs):
        own = chunks[first:first + count]
        assert own[0][0] == start == cu[s] and own[-1][0] + own[-1][1] == cu[s + 1]
        assert (own[:, 2] == s).all() and (own[:, 1] <= 64).all()
    chunks, seqs = chunk_tables([3, 100, 4, 128], 32)
    assert len(seqs) == 3 and len(chunks) == 12 and chunks[3][1] == 4 and chunks[4][0] == 100


def test_the_xp_reference_is_the_recurrent_reference():
    x = make_inputs(2, 37, 2, 128, 128, seed=1, initial_state=True)
    inputs = {"q": x.q, "k": x.k, "v": x.v, "g": x.g, "beta": x.beta, "h0": x.initial_state}
    got = recurrent_xp(np, inputs, [2, 37, 2, 128])
    o, ht = recurrent_kda(x.q, x.k, x.v, x.g, x.beta, initial_state=x.initial_state)
    np.testing.assert_allclose(got["o"], o, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["ht"], ht, rtol=1e-12, atol=1e-12)
    packed = make_inputs(1, 60, 2, 128, 128, seed=2, initial_state=True, n_states=3)
    inputs = {"q": packed.q, "k": packed.k, "v": packed.v, "g": packed.g, "beta": packed.beta,
              "h0": packed.initial_state}
    got = recurrent_xp(np, inputs, [1, 60, 2, 128, 3])
    o, ht = recurrent_kda(packed.q, packed.k, packed.v, packed.g, packed.beta,
                          initial_state=packed.initial_state, cu_seqlens=cu_seqlens(60, 3))
    np.testing.assert_allclose(got["o"], o, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got["ht"], ht, rtol=1e-12, atol=1e-12)


def workspaces(config, shape):
    """The operator's workspaces as the harness makes them: its own data, or NaN (0xFFFF)."""
    spaces = {}
    for name, ws in OP.workspaces(config, shape, "bfloat16").items():
        if ws.init is not None:
            spaces[name] = np.array(ws.init, dtype=ws.dtype)
        else:
            spaces[name] = np.full(ws.shape, np.nan if np.dtype(ws.dtype).kind == "f" else 0xFFFF, ws.dtype)
    return spaces


def run_emulated_pipeline(config, shape, distribution="normal", seed=0):
    """The stages in launch order on the harness's own inputs, outputs and workspaces."""
    inputs = harness_inputs(np, OP, CheckCase(shape, distribution, seed), "bfloat16")
    outputs = make_outputs(np, OP, shape, "bfloat16")
    table = fake_kda.emulations()
    spaces = workspaces(config, shape)
    views = {k: v.view for k, v in outputs.items()}
    for i, step in enumerate(OP.steps(config, shape, "bfloat16")):
        table[step.kernel](*OP.step_args(config, i, inputs, views, spaces, shape))
    return inputs, views


CONFIGS = [{"BT": 64, "NT": 256, "VT": 64, "FUSE_GATE": 1, "FUSE_OUTPUT": 0, "STAGES": 2},
           {"BT": 16, "NT": 128, "VT": 32, "FUSE_GATE": 0, "FUSE_OUTPUT": 1, "STAGES": 3}]


@pytest.mark.parametrize("config", CONFIGS, ids=["bt64-stages2", "bt16-fused-stages3"])
@pytest.mark.parametrize("shape,distribution", [([2, 200, 2, 128], "normal"), ([1, 300, 2, 128, 4], "wide")])
def test_emulated_stages_match_the_recurrent_reference_within_the_bf16_norm(config, shape, distribution):
    inputs, outputs = run_emulated_pipeline(config, shape, distribution)
    x64 = {k: from_storage(np, v, "bfloat16") for k, v in inputs.items()}
    ref = OP.reference(np, x64, shape)
    o = check_close(from_storage(np, outputs["o"], "bfloat16"), ref["o"], "bfloat16")
    ht = check_close(outputs["ht"].astype(np.float64), ref["ht"], "bfloat16", keep_axes=(0, 1))
    print(f"\n{config} {shape} {distribution}: o {o}; ht {ht}")
    assert o.ok and ht.ok and o.worst < TOLERANCE["bfloat16"] / 2
    tol = tolerance_for(OP, shape, "bfloat16")
    assert tol.rtol == pytest.approx(TOLERANCE["bfloat16"])
    assert OP.judge_output(np, "o", from_storage(np, outputs["o"], "bfloat16"), ref["o"], shape,
                           "bfloat16", tol) is None


@pytest.mark.parametrize("shape", [[1, 20, 2, 128], [1, 150, 2, 128, 3]], ids=["2-chunks", "packed"])
def test_stages_change_no_result(shape):
    """STAGES only multi-buffers kda_state's loads: every STAGES gives the same bits, also where a
    sequence has fewer chunks than stages (T = 20 at chunk 16) and for packed sequences."""
    base = {"BT": 16, "NT": 128, "VT": 32, "FUSE_GATE": 1, "FUSE_OUTPUT": 0}
    space = OP.space("bfloat16")
    runs = []
    for stages in (1, 2, 3):
        config = {**base, "STAGES": stages}
        assert space.is_valid(config)
        _, outputs = run_emulated_pipeline(config, shape)
        runs.append({k: np.array(v) for k, v in outputs.items()})
    for other in runs[1:]:
        assert all(np.array_equal(runs[0][k], other[k]) for k in runs[0])


@pytest.mark.slow
def test_the_gpu_benchmark_runs_through_the_harness_on_the_fake_cupy(monkeypatch, tmp_path, capsys):
    """bench/gpu_kda.py's GPU path (the product's harness in process, float64 checks, the timer)
    on the fake CuPy with the emulated kernels: what it prints and writes, without fla."""
    import fake_cupy
    from project_paths import ROOT

    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    fake_cupy.fake_cuda_worker(monkeypatch)  # installs the fake "cupy" for this test
    fake_cupy.EMULATIONS.update(fake_kda.emulations())
    try:
        import gpu_kda

        monkeypatch.setattr(gpu_kda, "fla_kda", lambda: (None, "fla not importable (test)"))
        rc = gpu_kda.main(["--out", str(tmp_path), "--shapes", "1x100x2", "--check-shapes",
                           "1x70x2,1x90x2x3", "--budget-s", "60"])
    finally:
        fake_cupy.EMULATIONS.clear()
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "KDA forward: 1 shapes timed" in out.splitlines()[-1] and "tolerance 1e-02" in out
    report = (tmp_path / "gpu_kda.json").read_text()
    assert '"checks"' in report and (tmp_path / "gpu_kda.md").exists()


# ---- kda.cu itself on the CPU: each CUDA thread a std::thread, __syncthreads a std::barrier ------
# (g++ -std=c++20). Shared memory is malloc'd at exactly the launch's dynamic bytes and poisoned
# with NaN; cp.async lands at the latest moment its wait_group allows (the destination NaN until
# then) or, "eager", at issue. Checks the CUDA source's indexing, tables, tiles, masks and
# pipeline order against the float64 reference; not warp timing or the device's memory model.
CPU_SHIM = r"""
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <thread>
#include <vector>
struct dim3 { unsigned x, y, z; };
thread_local dim3 threadIdx;
dim3 blockIdx;
std::barrier<>* g_bar;
unsigned char* g_smem;
long g_smem_bytes;
int g_eager;
#define __syncthreads() g_bar->arrive_and_wait()
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __align__(n)
#define __expf expf
struct bf16 { uint16_t b; };
typedef bf16 T;
inline float to_f(float x) { return x; }
inline float to_f(bf16 x) { uint32_t u = (uint32_t)x.b << 16; float f; memcpy(&f, &u, 4); return f; }
template <typename U> inline U from_f(float x);
template <> inline bf16 from_f<bf16>(float x) {
    uint32_t u; memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{0x7fc0};
    u += 0x7fffu + ((u >> 16) & 1u); return bf16{(uint16_t)(u >> 16)};
}
struct Copy { unsigned char* dst; const void* src; int n; };
thread_local std::vector<Copy> pending;
thread_local std::deque<std::vector<Copy>> groups;
namespace ks_ampere {
inline uint32_t smem_u32(const void* p) {
    long off = (const unsigned char*)p - g_smem;
    if (off < 0 || off + 16 > g_smem_bytes || off % 16) { fprintf(stderr, "cp.async dst %ld\n", off); abort(); }
    return (uint32_t)off;
}
inline void land(const Copy& c) { memset(c.dst, 0, 16); memcpy(c.dst, c.src, c.n); }
inline void cp_async16(uint32_t dst, const void* src, int n) {
    if ((uintptr_t)src % 16) { fprintf(stderr, "cp.async src misaligned\n"); abort(); }
    Copy c{g_smem + dst, src, n};
    if (g_eager) land(c); else { memset(c.dst, 0xff, 16); pending.push_back(c); }
}
inline void cp_async_commit() { groups.push_back(pending); pending.clear(); }
template <int kPending> inline void cp_async_wait() {
    for (; (int)groups.size() > kPending; groups.pop_front()) for (auto& c : groups.front()) land(c);
}
}
void launch(const int* grid, int nt, int smem, std::function<void()> body) {
    std::barrier<> bar(nt);
    g_bar = &bar;
    for (int z = 0; z < grid[2]; ++z) for (int y = 0; y < grid[1]; ++y) for (int x = 0; x < grid[0]; ++x) {
        blockIdx = {(unsigned)x, (unsigned)y, (unsigned)z};
        g_smem_bytes = smem;
        g_smem = (unsigned char*)malloc(smem + 1);
        memset(g_smem, 0xff, smem);
        std::vector<std::thread> th;
        for (int t = 0; t < nt; ++t) th.emplace_back([&, t] {
            threadIdx = {(unsigned)t, 0, 0}; pending.clear(); groups.clear(); body();
            for (auto& g : groups) if (!g.empty()) { fprintf(stderr, "cp.async in flight at exit\n"); abort(); }
        });
        for (auto& t : th) t.join();
        free(g_smem);
    }
}
"""
CPU_ENTRIES = r"""
typedef const int* I;
extern "C" {
void run_kda_gate_cumsum(const int* G, int nt, int sm, const T* g, float* gc, I ch) {
    launch(G, nt, sm, [=] { kda_gate_cumsum(g, gc, ch); }); }
void run_kda_wy(const int* G, int nt, int sm, const T* k, const T* v, const T* g, const T* b, float* gc, T* w,
    T* u, I ch) { launch(G, nt, sm, [=] { kda_wy(k, v, g, b, gc, w, u, ch); }); }
void run_kda_state(const int* G, int nt, int sm, const T* q, const T* k, const float* gc, const T* w,
    const T* u, const T* h0, T* hs, T* dv, T* o, float* ht, I sq, I ch, float s) {
    launch(G, nt, sm, [=] { kda_state(q, k, gc, w, u, h0, hs, dv, o, ht, sq, ch, s); }); }
void run_kda_output(const int* G, int nt, int sm, const T* q, const T* k, const float* gc, const T* hs,
    const T* dv, T* o, I ch, float s) { launch(G, nt, sm, [=] { kda_output(q, k, gc, hs, dv, o, ch, s); }); }
void set_eager(int e) { g_eager = e; }
}
"""


def cpu_threads_library(config, shape, tmp_path):
    import ctypes
    import subprocess

    from app.catalog.cuda.base import template_text

    body = template_text("kda.cu")
    for decl, ptr in (("extern __shared__ float smem[];", "float* smem = (float*)g_smem;"),
                      ("extern __shared__ __align__(16) unsigned char ring[];", "unsigned char* ring = g_smem;")):
        assert decl in body, decl
        body = body.replace(decl, ptr)
    defines = "".join(f"#define {k} {int(v)}\n" for k, v in OP.defines(config, shape, "bfloat16").items())
    src, lib = tmp_path / "kda_cpu.cpp", tmp_path / "kda_cpu.so"
    src.write_text(defines + CPU_SHIM + body + CPU_ENTRIES)
    subprocess.run(["g++", "-std=c++20", "-O2", "-w", "-shared", "-fPIC", "-pthread", str(src), "-o", str(lib)],
                   check=True)
    return ctypes.CDLL(str(lib))


@pytest.mark.parametrize("config", [OP.recommended("bfloat16", GOAL)[1], OP.recommended("bfloat16", GOAL)[3],
                                    {"BT": 16, "NT": 128, "VT": 128, "FUSE_GATE": 0, "FUSE_OUTPUT": 1, "STAGES": 3}],
                         ids=["bt32-fused", "bt64-stages2", "bt16-gate-fused-stages3"])
@pytest.mark.slow
def test_the_cuda_source_on_cpu_threads_matches_the_recurrent_reference(config, tmp_path):
    """kda.cu compiled by g++ (a CPU thread per CUDA thread): an edge-length batch and packed
    sequences, cp.async landing late (wait_group) and early (issue), every output element written,
    the output guards intact, within the bf16 norm tolerance of the float64 reference."""
    import ctypes
    import shutil

    if shutil.which("g++") is None:
        pytest.skip("no g++")
    lib = cpu_threads_library(config, [1, 1, 2, 128], tmp_path)  # HEADS = 2
    for shape, eager in (([2, 77, 2, 128], 0), ([1, 150, 2, 128, 3], 1)):
        lib.set_eager(eager)
        inputs = harness_inputs(np, OP, CheckCase(shape, "wide", 3), "bfloat16")
        outputs = make_outputs(np, OP, shape, "bfloat16")
        spaces = workspaces(config, shape)
        views = {k: v.view for k, v in outputs.items()}
        for i, step in enumerate(OP.steps(config, shape, "bfloat16")):
            grid = (ctypes.c_int * 3)(*step.launch.grid)
            args = [ctypes.c_float(a) if isinstance(a, np.floating) else ctypes.c_void_p(a.ctypes.data)
                    for a in OP.step_args(config, i, inputs, views, spaces, shape)]
            getattr(lib, f"run_{step.kernel}")(grid, step.launch.block[0], step.launch.shared_bytes, *args)
        assert all(o.guards_intact() for o in outputs.values())
        x64 = {k: from_storage(np, v, "bfloat16") for k, v in inputs.items()}
        ref = OP.reference(np, x64, shape)
        o = check_close(from_storage(np, views["o"], "bfloat16"), ref["o"], "bfloat16")
        ht = check_close(views["ht"].astype(np.float64), ref["ht"], "bfloat16", keep_axes=(0, 1))
        print(f"\n{config} {shape} eager={eager}: o {o}; ht {ht}")
        assert o.ok and ht.ok and o.worst < TOLERANCE["bfloat16"] / 2, (shape, o, ht)
