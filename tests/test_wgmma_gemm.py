"""The wgmma + TMA GEMM template (app/catalog/cuda/kernels/gemm_wgmma.cu)
without a GPU: every recommended configuration compiles with NVRTC for sm_90a in bf16 and fp16
with no spills (registers, spills and shared memory per configuration are printed: run with -s,
and kept as the test's user properties), the space's restrictions match the template's
static_asserts, the Ampere template still compiles for sm_80 after its helpers moved into
ampere.cuh, the operator is chosen by compute capability (worker, evaluator, LLM spec), and its
launch/arguments describe a persistent cluster launch with three tensor maps."""

from __future__ import annotations

import random

import numpy as np
import pytest

from app.catalog.cuda import OPERATORS
from app.catalog.cuda.base import TensorMapArg
from app.catalog.cuda.gemm import (
    GEMM,
    HOPPER_GEMM,
    SHARED_LIMIT_SM90,
    Gemm,
    HopperGemm,
    wgmma_shared_bytes,
)
from app.goal import Goal
from app.gpu.cuda import nvrtc
from app.gpu.cuda.worker import device_operator
from app.gpu.worker import WorkerReply

pytest.importorskip("cupy_backends.cuda.libs.nvrtc")

SHAPE = [4096, 4096, 4096]
TABLE: list[str] = []


def compile_wgmma(config, dtype, tmp_path, shape=SHAPE):
    source = HOPPER_GEMM.render(config, shape, dtype)
    arch = nvrtc.target_arch("90", source)
    return arch, nvrtc.compile_source(source, "gemm_wgmma", arch, cache=tmp_path)


def row(config, dtype, res, shared):
    keys = ("BM", "BN", "BK", "STAGES", "CONSUMERS", "CLUSTER", "EPILOGUE")
    return (f"| {dtype} | " + " | ".join(str(config[k]) for k in keys) +
            f" | {res.registers} | {res.spill_stores}/{res.spill_loads} | {shared} |")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("index", range(len(HOPPER_GEMM.recommended("bfloat16", SHAPE))))
def test_recommended_configurations_compile_for_sm90a_without_spills(index, dtype, tmp_path,
                                                                      record_property):
    config = HOPPER_GEMM.recommended(dtype, SHAPE)[index]
    assert HOPPER_GEMM.space(dtype).is_valid(config)
    arch, built = compile_wgmma(config, dtype, tmp_path)
    res = built.resource("gemm_wgmma")
    launch = HOPPER_GEMM.launch(config, SHAPE, dtype)
    shared = res.shared_bytes + launch.shared_bytes
    line = row(config, dtype, res, shared)
    TABLE.append(line)
    print(f"\ngemm_wgmma sm_90a {line}")
    record_property("resources", line)
    assert arch == "sm_90a" and "for 'sm_90a'" in built.log
    assert not res.spills and res.stack_bytes == 0, res
    threads = launch.block[0]
    # the launch gives every thread 65536 / threads registers; setmaxnreg redistributes that pool
    assert res.registers * threads <= 65536 and res.registers == min(255, 65536 // threads // 8 * 8)
    assert shared <= SHARED_LIMIT_SM90
    assert nvrtc.check_limits(res, dynamic_shared=launch.shared_bytes,
                              device_shared_limit=SHARED_LIMIT_SM90) is None


def test_print_the_resource_table():
    """The table of the parametrized compiles above (pytest -s shows it)."""
    if TABLE:
        print("\n| dtype | BM | BN | BK | STAGES | CONSUMERS | CLUSTER | EPILOGUE | registers "
              "| spills st/ld | shared B |\n|---|---|---|---|---|---|---|---|---|---|---|")
        print("\n".join(TABLE))


def test_a_few_other_configurations_of_the_space_compile(tmp_path):
    space = HOPPER_GEMM.space("bfloat16")
    rng = random.Random(18)
    picked = [space.sample(rng) for _ in range(3)]
    for config in picked:
        _, built = compile_wgmma(config, "bfloat16", tmp_path, [1000, 1032, 520])
        res = built.resource("gemm_wgmma")
        print(f"\ngemm_wgmma sample {row(config, 'bfloat16', res, wgmma_shared_bytes(config))}")
        assert not res.spills, (config, res)


@pytest.mark.parametrize("bad, message", [
    ({"BN": 192, "CLUSTER": 2}, "CLUSTER 2 splits"),
    ({"BM": 256, "BN": 256}, "128 fp32 accumulators"),
    ({"BM": 64, "CONSUMERS": 2}, "multiple of 64"),
])
def test_the_space_refuses_what_the_template_refuses(bad, message, tmp_path):
    config = {**HOPPER_GEMM.recommended("bfloat16", SHAPE)[0], **bad}
    assert not HOPPER_GEMM.space("bfloat16").is_valid(config)
    with pytest.raises(nvrtc.CompileError) as err:
        compile_wgmma(config, "bfloat16", tmp_path)
    assert message in err.value.log


def test_the_space_respects_the_shared_memory_limit():
    space = HOPPER_GEMM.space("bfloat16")
    too_big = {**HOPPER_GEMM.recommended("bfloat16", SHAPE)[0], "STAGES": 5}  # 5 x 48 KB
    assert wgmma_shared_bytes(too_big) > SHARED_LIMIT_SM90 and not space.is_valid(too_big)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_ampere_template_still_compiles_for_sm80_with_the_shared_header(dtype, tmp_path):
    config = GEMM.recommended(dtype, SHAPE)[0]
    source = GEMM.render(config, SHAPE, dtype)
    assert "namespace ks_ampere" in source and "namespace ks_hopper" not in source
    built = nvrtc.compile_source(source, "gemm_tc", nvrtc.target_arch("80", source), cache=tmp_path)
    res = built.resource("gemm_tc")
    print(f"\ngemm_tc sm_80 {dtype} {config}: {res}")
    assert built.arch == "sm_80" and not res.spills


@pytest.mark.parametrize("cc, chosen", [("90", HopperGemm), ("sm_90a", HopperGemm), ("9.0", HopperGemm),
                                        ("80", Gemm), ("86", Gemm), ("89", Gemm), ("100", Gemm),
                                        ("120", Gemm)])
def test_the_template_is_chosen_by_compute_capability(cc, chosen):
    op = device_operator(OPERATORS["gemm"], {"compute_capability": cc})
    assert type(op) is chosen and op.name == "gemm"
    assert type(HOPPER_GEMM.for_device(cc)) is chosen  # and back
    if chosen is HopperGemm:
        assert op.template_for("bfloat16") == "gemm_wgmma.cu" and op.kernel_for("float16") == "gemm_wgmma"
        assert op.template_for("float32") == "gemm_f32.cu"  # fp32 stays on the CUDA cores
        assert op.space("float32").params == GEMM.space("float32").params
    else:
        assert op.template_for("bfloat16") == "gemm_tc.cu"


def test_launch_and_arguments_describe_a_persistent_cluster_launch_with_tensor_maps():
    config = {**HOPPER_GEMM.recommended("bfloat16", SHAPE)[0], "CLUSTER": 2}
    launch = HOPPER_GEMM.launch(config, [1000, 1000, 512], "bfloat16")
    # 8 tile rows (whole clusters of 2) x 4 tile columns; the SM count caps it at launch
    assert launch.grid == (32, 1, 1) and launch.cluster == (2, 1, 1) and launch.persistent
    assert launch.block == (384, 1, 1) and launch.shared_bytes == wgmma_shared_bytes(config)
    assert launch.device_grid(132) == (32, 1, 1) and HOPPER_GEMM.launch(
        config, SHAPE, "bfloat16").device_grid(132) == (132, 1, 1)
    a, b, c = (np.zeros(s, np.uint16) for s in ((1000, 512), (512, 1000), (1000, 1000)))
    args = HOPPER_GEMM.kernel_args(config, {"a": a, "b": b}, {"c": c}, [1000, 1000, 512])
    assert args[0] == TensorMapArg(a, (64, 128), "bfloat16") and args[1] == TensorMapArg(b, (64, 64), "bfloat16")
    assert args[2] == TensorMapArg(c, (64, 64), "bfloat16") and args[3] is c
    assert [int(x) for x in args[4:]] == [1000, 1000, 512]
    half = HOPPER_GEMM.kernel_args(config, {"a": a.view(np.float16), "b": b}, {"c": c}, [1000, 1000, 512])
    assert half[0].dtype == "float16"


class Info:
    """A worker pool that only answers 'info' (an H200)."""

    def __init__(self, cc="90"):
        self.cc = cc

    def call(self, message, deadlines):
        assert message[0] == "info"
        return WorkerReply(result={"ok": True, "name": "NVIDIA H200", "compute_capability": self.cc,
                                   "sms": 132, "copy_bw": 4.3e12, "memory_bytes": 141 << 30,
                                   "driver": "570", "shared_per_block_optin": SHARED_LIMIT_SM90})

    def close(self):
        pass


@pytest.mark.parametrize("cc, template", [("90", "gemm_wgmma"), ("80", "gemm_tc")])
def test_the_evaluator_searches_the_space_of_its_device(cc, template):
    from app.gpu.cuda.evaluator import CudaEvaluator
    from app.llm.spec import kernel_spec

    goal = Goal(name="g", operator="gemm", backend="cuda", dtype="bfloat16", shapes=[SHAPE]).validate()
    ev = CudaEvaluator(goal, pool=Info(cc), devices=[0])
    try:
        assert ev.op.kernel_for("bfloat16") == template
        assert ("CONSUMERS" in ev.space.params) == (cc == "90")
        assert f"{template}(" in ev.template
        for cfg in ev.op.recommended("bfloat16", SHAPE):
            assert ev.space.is_valid(cfg)
        spec = kernel_spec(goal, params=list(ev.space.params), operator=ev.op)  # what LLM agents see
        assert spec.entry == template and ("ks_hopper" in spec.prefix(ev.op.recommended("bfloat16", SHAPE)[0])) \
            == (cc == "90")
    finally:
        ev.close()


def test_an_llm_rewrite_compiles_after_the_hopper_harness_prefix(tmp_path):
    """What an LLM agent gets (prefix with hopper.cuh) plus the template body is the rendered
    source, and it builds for sm_90a."""
    from app.llm.spec import kernel_spec

    goal = Goal(name="g", operator="gemm", backend="cuda", dtype="bfloat16", shapes=[[512, 512, 512]]).validate()
    spec = kernel_spec(goal, operator=HOPPER_GEMM)
    config = HOPPER_GEMM.recommended("bfloat16", SHAPE)[3]
    rendered = spec.prefix(config) + spec.template
    assert rendered == HOPPER_GEMM.render(config, [512, 512, 512], "bfloat16")
    assert "gemm_wgmma(const __grid_constant__ TensorMap map_a" in spec.signature()
    built = nvrtc.compile_source(rendered, spec.entry, nvrtc.target_arch("90", rendered), cache=tmp_path)
    assert not built.resource(spec.entry).spills
