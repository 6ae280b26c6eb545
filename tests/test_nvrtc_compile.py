"""NVRTC compiles every catalog family for sm_80 and sm_90 (no GPU needed), with resource usage
read back from ptxas; the compile cache; arch selection; resource limits."""

from __future__ import annotations

import random

import pytest

from app.catalog.cuda import OPERATORS
from app.gpu.cuda import nvrtc

pytest.importorskip("cupy_backends.cuda.libs.nvrtc")

FAMILIES = [
    ("softmax", "float32", [4096, 4096]), ("softmax", "bfloat16", [1024, 8192]),
    ("softmax", "float16", [333, 1000]), ("rmsnorm", "bfloat16", [8192, 4096]),
    ("layernorm", "float16", [4096, 1024]), ("layernorm", "float32", [100, 777]),
    ("bias_gelu", "bfloat16", [4096, 4096]), ("transpose", "float32", [8192, 8192]),
    ("transpose", "bfloat16", [1000, 3000]), ("gemm", "bfloat16", [4096, 4096, 4096]),
    ("gemm", "float16", [1000, 1024, 512]), ("gemm", "float32", [1024, 1024, 1024]),
]


def sample_configs(op, dtype, shape, n_random: int, seed: int) -> list[dict]:
    """The first recommended configuration plus random valid ones that pass the static check."""
    space = op.space(dtype)
    configs = [op.recommended(dtype, shape)[0]]
    rng = random.Random(seed)
    while len(configs) < 1 + n_random:
        cfg = space.sample(rng)
        if cfg is not None and op.static_check(cfg, shape, dtype) is None and cfg not in configs:
            configs.append(cfg)
    return configs


@pytest.mark.parametrize("name,dtype,shape", FAMILIES, ids=[f"{n}-{d}" for n, d, _ in FAMILIES])
def test_family_compiles_for_sm80_and_sm90_with_resources(name, dtype, shape, tmp_path):
    op = OPERATORS[name]
    for i, cfg in enumerate(sample_configs(op, dtype, shape, n_random=1, seed=hash(name + dtype) % 1000)):
        assert op.space(dtype).is_valid(cfg), cfg
        source = op.render(cfg, shape, dtype)
        for arch in ("sm_80", "sm_90"):
            built = nvrtc.compile_source(source, op.kernel_for(dtype), arch, cache=tmp_path)
            res = built.resource()
            assert res.registers > 0, (cfg, arch, built.log)
            assert f"for '{arch}'" in built.log
            assert not res.spills or i > 0, f"recommended config spills: {cfg} {res}"
            launch = op.launch(cfg, shape, dtype)
            threads = launch.block[0] * launch.block[1] * launch.block[2]
            assert 32 <= threads <= 1024
            assert res.registers * threads <= 65536, (cfg, res.registers, threads)


def test_gemm_space_restrictions_match_the_template_static_asserts(tmp_path):
    """Random configurations the space calls valid must compile: the template's static_asserts
    (tile copies split evenly across threads) agree with the space's restrictions."""
    op = OPERATORS["gemm"]
    for cfg in sample_configs(op, "bfloat16", [4096, 4096, 4096], n_random=3, seed=7)[1:]:
        built = nvrtc.compile_source(op.render(cfg, [4096, 4096, 4096], "bfloat16"), "gemm_tc", "sm_90",
                                     cache=tmp_path)
        assert built.resource().registers > 0


def test_hopper_only_source_targets_sm90a_and_compiles(tmp_path):
    src = ('extern "C" __global__ void k(float* x) {\n'
           '  asm volatile("wgmma.fence.sync.aligned;\\n" ::: "memory");\n  x[threadIdx.x] = 1.f;\n}\n')
    assert nvrtc.target_arch("90", src) == "sm_90a"
    assert nvrtc.target_arch(90, "plain code") == "sm_90"
    with pytest.raises(nvrtc.CompileError, match="9.0"):
        nvrtc.target_arch("80", src)
    built = nvrtc.compile_source(src, "k", "sm_90a", cache=tmp_path)
    assert "sm_90a" in built.log
    with pytest.raises(nvrtc.CompileError):  # plain sm_90 rejects wgmma
        nvrtc.compile_source(src, "k", "sm_90", cache=tmp_path)


def test_cache_hits_and_keys(tmp_path):
    src = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.f; }\n'
    a = nvrtc.compile_source(src, "k", "sm_80", cache=tmp_path)
    b = nvrtc.compile_source(src, "k", "sm_80", cache=tmp_path)
    assert not a.cached and b.cached and a.key == b.key
    assert b.resource().registers == a.resource().registers > 0
    c = nvrtc.compile_source(src, "k", "sm_80", ["-DX=1"], cache=tmp_path)
    d = nvrtc.compile_source(src, "k", "sm_90", cache=tmp_path)
    assert len({a.key, c.key, d.key}) == 3
    # a damaged cache entry is rebuilt, not trusted
    (tmp_path / f"{a.key}.json").write_text("{not json")
    e = nvrtc.compile_source(src, "k", "sm_80", cache=tmp_path)
    assert not e.cached and e.resource().registers > 0


def test_compile_error_carries_the_log(tmp_path):
    with pytest.raises(nvrtc.CompileError) as info:
        nvrtc.compile_source('extern "C" __global__ void k(float* x) { x[0] = y; }', "k", "sm_80",
                             cache=tmp_path)
    assert "identifier \"y\" is undefined" in info.value.log
    assert "error" in str(info.value)
    with pytest.raises(nvrtc.CompileError, match="not found"):
        nvrtc.compile_source('__global__ void mangled(float* x) { x[0] = 1.f; }', "mangled", "sm_80",
                             cache=tmp_path)
    with pytest.raises(nvrtc.CompileError, match="sm_XX"):
        nvrtc.compile_source("", "k", "90", cache=tmp_path)


def test_spills_and_local_memory_are_read_back(tmp_path):
    src = ('extern "C" __global__ void __launch_bounds__(1024, 2) k(const float* x, float* y, int i) {\n'
           '  float a[64];\n  for (int j = 0; j < 64; ++j) a[j] = x[j * 1024 + threadIdx.x];\n'
           '  for (int j = 0; j < 64; ++j) a[(j * i) & 63] += a[j];\n'
           '  y[threadIdx.x] = a[i & 63];\n}\n')
    res = nvrtc.compile_source(src, "k", "sm_80", cache=tmp_path).resource()
    assert res.stack_bytes >= 256  # the dynamically indexed array lives in local memory


def test_parse_ptxas_log_several_kernels():
    log = ("ptxas info    : 0 bytes gmem\n"
           "ptxas info    : Compiling entry function 'a' for 'sm_90'\n"
           "ptxas info    : Function properties for a\n"
           "    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 40 registers, used 1 barriers, 1024 bytes smem, 380 bytes cmem[0]\n"
           "ptxas info    : Compiling entry function 'b' for 'sm_90'\n"
           "ptxas info    : Function properties for b\n"
           "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Used 255 registers\n")
    res = nvrtc.parse_ptxas_log(log)
    assert res["a"] == nvrtc.KernelResources(registers=40, spill_stores=8, spill_loads=4, stack_bytes=16,
                                             shared_bytes=1024, const_bytes=380, barriers=1)
    assert res["a"].spills and not res["b"].spills and res["b"].registers == 255


def test_check_limits():
    res = nvrtc.KernelResources(registers=128, shared_bytes=8192)
    assert nvrtc.check_limits(res) is None
    assert "registers" in nvrtc.check_limits(res, max_registers=64)
    assert "goal's limit" in nvrtc.check_limits(res, dynamic_shared=60000, max_shared=65536)
    assert "device allows" in nvrtc.check_limits(res, dynamic_shared=230000, device_shared_limit=232448)
    spilling = nvrtc.KernelResources(registers=255, spill_stores=64)
    assert nvrtc.check_limits(spilling) is None
    assert "spills" in nvrtc.check_limits(spilling, allow_spills=False)
