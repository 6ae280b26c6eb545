"""The hardware sheet and the figures a prompt states: CPU caches as sysfs
says and the measured bandwidths and peak when the run has them; the CUDA device's resources
from the table, the NVRTC options and arch, and the CUDA timing protocol (events, L2 flushed),
not the CPU's; one speedup figure; every chosen metric, not the first four."""

from __future__ import annotations

from app.catalog.cuda.gemm import HOPPER_GEMM
from app.core.types import Evaluation
from app.goal import Goal
from app.gpu.cpu.memory_roof import cache_levels
from app.llm.prompts import PromptContext, build_messages
from app.llm.spec import kernel_spec


def _text(goal: Goal, operator=None, **ctx) -> str:
    spec = kernel_spec(goal, operator=operator)
    ctx.setdefault("current_source", spec.template)
    m = build_messages("tiling", PromptContext(goal=goal, spec=spec, **ctx))
    return m[0]["content"] + "\n" + m[1]["content"]


def test_a_cpu_prompt_carries_caches_cores_and_the_measured_roofs():
    goal = Goal(name="g", operator="gemm", backend="cpu", shapes=[[64, 64, 64]])
    measured = {"bandwidth_gbs": {"L1": 812.0, "L2": 301.0, "DRAM": 17.2},
                "peak_gflops": 420.0, "peak_gflops_one_thread": 210.0}
    text = _text(goal, device="Test CPU", limits={"roof": 2.0, "measured": measured})
    l1 = next(lv for lv in cache_levels() if lv.name == "L1")
    assert f"L1 {l1.size_bytes // 2**10} KiB" in text or f"L1 {l1.size_bytes // 2**20} MiB" in text
    assert "logical cores" in text
    assert "measured copy bandwidth, all threads (GB/s): L1 812, L2 301, DRAM 17" in text
    assert "measured FP32 peak: 420 GFLOP/s at every thread, 210 at one thread" in text
    assert "measured:" not in text  # the figures are the sheet's, not a raw limits line


def test_a_hopper_prompt_has_the_resource_sheet_the_compile_line_and_cuda_timing():
    goal = Goal(name="h", operator="gemm", backend="cuda", shapes=[[4096] * 3], dtype="bfloat16")
    config = dict(HOPPER_GEMM.recommended("bfloat16", [4096] * 3)[0])
    text = _text(goal, operator=HOPPER_GEMM, device="NVIDIA H100 80GB HBM3 (cc 9.0, SMs 132)",
                 config=config, limits={"measured": {"copy_gbs": 2900.0}})
    assert "132 SMs, L2 50 MB" in text
    assert "228 KB shared memory" in text and "227 KB dynamic shared memory" in text
    assert "65536 registers" in text and "255 registers per thread" in text
    assert "bfloat16 989 (tensor cores)" in text
    assert "measured device copy bandwidth: 2900 GB/s" in text
    assert "--gpu-architecture=sm_90a" in text and "-Xptxas=-v" in text
    assert "CUDA events" in text and "L2 cache flushed before every sample" in text
    assert "5 to 40 samples" not in text  # the CPU protocol is not the CUDA one


def test_one_speedup_figure_and_every_chosen_metric():
    goal = Goal(name="s", operator="softmax", backend="cpu", shapes=[[64, 1000]])
    best = Evaluation(key="b", config={}, ok=True, value=0.5, metrics={
        "speedup": 7.69, "speedup_vs_c_reference": 3.25, "samples": 12.0, "cpu_count": 2.0,
        "noisy": 0.0, "spread": 0.01, "gbs": 123.0, "fraction_of_roof": 0.41,
        "copy_fraction": 0.8})
    text = _text(goal, current=best, limits={"baseline": 1.0, "roof": 0.2})
    assert "7.69" not in text and "3.25" not in text
    assert "gbs 123" in text and "41% of the roof" in text and "copy_fraction 0.8" in text
    assert text.count("x as good as the baseline") == 1 and "2x as good" in text
