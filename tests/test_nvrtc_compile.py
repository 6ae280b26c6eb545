"""NVRTC compiles every catalog family for sm_80 and sm_90 (no GPU needed), with resource usage
read back from ptxas; the compile cache; arch selection; resource limits."""

from __future__ import annotations

import random
from pathlib import Path

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
    assert "spills registers" in nvrtc.check_limits(spilling)  # refused by default
    assert "64 bytes of spill stores" in nvrtc.check_limits(nvrtc.KernelResources(spill_loads=8,
                                                                                   spill_stores=64))
    assert nvrtc.check_limits(spilling, allow_spills=True) is None


def test_a_spilling_configuration_is_rejected_after_compile(tmp_path):
    """A real kernel that ptxas has to spill (255 registers cap, 1024 threads, a large array held
    in registers) is refused with a reason naming the spill."""
    src = ('extern "C" __global__ void __launch_bounds__(1024, 1) k(const float* x, float* y) {\n'
           '  float a[96];\n#pragma unroll\n'
           '  for (int j = 0; j < 96; ++j) a[j] = x[j * 1024 + threadIdx.x];\n#pragma unroll\n'
           '  for (int r = 0; r < 8; ++r)\n#pragma unroll\n'
           '    for (int j = 0; j < 96; ++j) a[j] = a[j] * a[(j + r + 1) % 96] + a[(j * 7) % 96];\n'
           '  float s = 0.f;\n#pragma unroll\n  for (int j = 0; j < 96; ++j) s += a[j];\n'
           '  y[threadIdx.x] = s;\n}\n')
    built = nvrtc.compile_source(src, "k", "sm_90", ["-maxrregcount=32"], cache=tmp_path)
    res = built.resource()
    assert res.spills, built.log
    why = nvrtc.check_limits(res)
    assert why is not None and "spill" in why


def test_gmem_bytes_from_the_ptxas_report(tmp_path):
    src = ('__device__ float table[256];\n'
           'extern "C" __global__ void k(float* x) { x[threadIdx.x] = table[threadIdx.x]; }\n')
    built = nvrtc.compile_source(src, "k", "sm_90", cache=tmp_path)
    assert built.resource().gmem_bytes == 1024, built.log
    plain = nvrtc.compile_source('extern "C" __global__ void k(float* x) { x[0] = 1.f; }', "k", "sm_90",
                                 cache=tmp_path)
    assert plain.resource().gmem_bytes == 0
    log = ("ptxas info    : 16 bytes gmem, 8 bytes cmem[4]\n"
           "ptxas info    : Compiling entry function 'a' for 'sm_90'\n"
           "ptxas info    : Used 8 registers, 380 bytes cmem[0]\n")
    assert nvrtc.parse_ptxas_log(log)["a"].gmem_bytes == 16


def test_the_cache_key_ignores_comments_so_shapes_share_one_compile(tmp_path):
    op = OPERATORS["gemm"]
    shapes = [[4096, 4096, 4096], [1024, 1024, 1024], [512, 512, 512]]
    cfg = op.recommended("bfloat16", shapes[0])[0]
    sources = [op.render(cfg, s, "bfloat16") for s in shapes]
    assert len(set(sources)) == 3  # the shape is named in a comment
    built = [nvrtc.compile_source(s, "gemm_tc", "sm_90", cache=tmp_path) for s in sources]
    assert len({b.key for b in built}) == 1
    assert not built[0].cached and built[1].cached and built[2].cached
    # code that differs is a different key, also when it hides behind comment-like strings
    a = 'extern "C" __global__ void k(float* x) { x[0] = 1.f; } // one\n'
    assert nvrtc.artifact_key(a, "sm_90", []) == nvrtc.artifact_key(a.replace("one", "two"), "sm_90", [])
    assert nvrtc.artifact_key(a, "sm_90", []) != nvrtc.artifact_key(a.replace("1.f", "2.f"), "sm_90", [])
    s1, s2 = 'const char* s = "// a";\n', 'const char* s = "// b";\n'
    assert nvrtc.artifact_key(s1, "sm_90", []) != nvrtc.artifact_key(s2, "sm_90", [])
    assert nvrtc.code_only("#define X 1 /* a\n b */ + 2\n") == "#define X 1   + 2"


def test_the_cached_cubin_is_the_whole_elf_file(tmp_path):
    """CuPy's getCUBIN drops the cubin's last byte; the file in the cache is the whole ELF, its
    size what the ELF headers give, readable by pyelftools down to the last section."""
    elffile = pytest.importorskip("elftools.elf.elffile")
    src = 'extern "C" __global__ void k(float* x) { x[threadIdx.x] *= 2.f; }\n'
    built = nvrtc.compile_source(src, "k", "sm_90", cache=tmp_path)
    data = Path(built.cubin_path).read_bytes()
    assert len(data) == nvrtc.elf_size(data)
    with open(built.cubin_path, "rb") as fh:
        elf = elffile.ELFFile(fh)
        assert elf["e_machine"] in ("EM_CUDA", 190)
        ends = [elf["e_shoff"] + elf["e_shnum"] * elf["e_shentsize"],
                elf["e_phoff"] + elf["e_phnum"] * elf["e_phentsize"]]
        ends += [s["sh_offset"] + s["sh_size"] for s in elf.iter_sections() if s["sh_type"] != "SHT_NOBITS"]
        assert len(data) == max(ends)
        names = [s.name for s in elf.iter_sections()]
        assert any(n.startswith(".text.k") for n in names), names
        for seg in elf.iter_segments():  # every segment reads back in full
            assert len(seg.data()) == seg["p_filesz"]


def test_a_short_cubin_is_restored_from_its_elf_headers(monkeypatch):
    """The fallback when NVRTC's own size call is not reachable: CuPy's one-byte-short copy gets
    its trailing zero back."""
    from cupy_backends.cuda.libs import nvrtc as lib

    prog = lib.createProgram('extern "C" __global__ void k(float* x) { x[0] = 1.f; }', "k.cu", [], [])
    try:
        lib.compileProgram(prog, ["--gpu-architecture=sm_90"])
        whole = nvrtc.full_cubin(lib, prog)
        short = bytes(lib.getCUBIN(prog))[:len(whole) - 1]  # what CuPy 14.2 returns
        monkeypatch.setattr(nvrtc, "_nvrtc_library", lambda: None)
        restored = nvrtc.full_cubin(type("CupyNvrtc", (), {"getCUBIN": staticmethod(lambda p: short)}),
                                    prog)
    finally:
        lib.destroyProgram(prog)
    assert restored == whole and len(whole) == nvrtc.elf_size(whole)
    with pytest.raises(ValueError):
        nvrtc.elf_size(b"not an elf")


def test_a_sandboxed_worker_never_reads_cubins_from_the_shared_cache(monkeypatch, tmp_path):
    """A cubin planted in the shared cache under a candidate's key would run in place of the
    candidate's source. Inside a cell the cache is the cell's own scratch. (A stand-in plan:
    a GPU cell cannot start here, so current_plan() is patched; the directory logic is real.)"""
    import types

    from app.gpu import sandbox
    from app.gpu.cuda import nvrtc
    from app.paths import cache_dir

    assert nvrtc.default_cache_dir() == cache_dir() / "cuda"
    monkeypatch.setattr(sandbox, "current_plan", lambda: types.SimpleNamespace(scratch=str(tmp_path)))
    inside = nvrtc.default_cache_dir()
    assert inside.is_relative_to(tmp_path) and not inside.is_relative_to(cache_dir())
