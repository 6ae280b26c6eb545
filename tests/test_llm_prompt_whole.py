"""The kernel being rewritten is never cut; the fixed headers are cut instead.

On the Hopper bf16 GEMM the template is 13.4k characters and hopper.cuh 28k: the prompt shows
CURRENT whole (its TMA-store epilogue included), and the harness prefix as its preprocessor
lines plus the declarations of the helpers CURRENT calls, saying that it was shortened and
naming the helpers it left out. A short prefix is shown as it is."""

from __future__ import annotations

import re

from app.catalog.cuda.gemm import HOPPER_GEMM
from app.goal import Goal
from app.llm.headers import shorten_prefix
from app.llm.prompts import PromptContext, build_messages, build_repair_messages
from app.llm.spec import kernel_spec

SHAPE = [4096, 4096, 4096]


def _hopper_prompt(source: str | None = None) -> tuple[str, object, dict]:
    goal = Goal(name="h", operator="gemm", backend="cuda", shapes=[SHAPE], dtype="bfloat16")
    spec = kernel_spec(goal, operator=HOPPER_GEMM)
    config = dict(HOPPER_GEMM.recommended("bfloat16", SHAPE)[0])
    ctx = PromptContext(goal=goal, spec=spec, device="NVIDIA H100", config=config,
                        current_source=source or spec.template)
    return build_messages("tiling", ctx)[1]["content"], spec, config


def _block_after(text: str, header: str) -> str:
    at = text.index(header)
    m = re.search(r"^```[\w+]*\n(.*?)^```$", text[at:], re.MULTILINE | re.DOTALL)
    assert m
    return m.group(1)


def test_the_hopper_gemm_current_is_shown_whole_with_its_tma_store_epilogue():
    text, spec, _ = _hopper_prompt()
    assert len(spec.template) > 13_000
    shown = _block_after(text, "CURRENT (")
    assert shown.strip() == spec.template.strip()
    assert "tma_store_2d" in shown.split("tma_store_2d", 1)[1] or shown.count("tma_store") >= 2
    assert "(cut)" not in text and "not shown" not in shown


def test_a_long_prefix_is_cut_to_the_declarations_current_uses_and_says_so():
    text, spec, config = _hopper_prompt()
    full = spec.prefix(config)
    shown = _block_after(text, "HARNESS PREFIX")
    assert len(full) > 30_000 and len(shown) < len(full) / 4
    assert f"shortened from {len(full)} characters" in text
    # the configuration's defines and every helper CURRENT calls are declared
    for name in ("BM", "BN", "STAGES", "EPILOGUE"):
        assert f"#define {name} {config[name]}" in shown
    for helper in ("tma_load_2d", "tma_store_2d", "wgmma_m64k16", "mbarrier_wait",
                   "make_smem_desc", "setmaxnreg_inc"):
        assert re.search(rf"\b{helper}\s*(<[^<>;]*>)?\s*\(", spec.template)
        assert re.search(rf"\b{helper}\s*\([^;{{]*\);", shown), helper
    # bodies (inline PTX) are not shown; helpers it does not call are named, not shown
    assert "asm volatile" not in shown
    assert "wgmma_m64n256k16" not in shown and "wgmma_m64n256k16" in text
    assert "mbarrier_try_wait" in text.split("HARNESS PREFIX", 1)[1].split("```", 1)[0]


def test_a_rewrite_that_calls_another_helper_gets_its_declaration():
    _base, spec, _ = _hopper_prompt()
    source = spec.template + "\n__device__ void extra(float (&d)[32]) { ks_hopper::mbarrier_try_wait(0, 0); }\n"
    text, _, _ = _hopper_prompt(source)
    shown = _block_after(text, "HARNESS PREFIX")
    assert re.search(r"bool mbarrier_try_wait\([^;{]*\);", shown)


def test_a_short_prefix_is_shown_as_it_is():
    prefix = "#define BM 64\n__device__ float helper(float x) { return x; }\n"
    got = shorten_prefix(prefix, "void k() {}")
    assert got.text == prefix and not got.shortened and got.note() == ""


def test_the_repair_conversation_shows_the_failed_attempt_whole():
    from app.core.types import COMPILE_FAILED, Evaluation

    _, spec, config = _hopper_prompt()
    goal = Goal(name="h", operator="gemm", backend="cuda", shapes=[SHAPE], dtype="bfloat16")
    attempt = spec.template + "\n// end marker kept\n__device__ int tail_marker() { return 1; }\n"
    failed = Evaluation(key="k", config=config, ok=False, reason=COMPILE_FAILED, source=attempt)
    msgs = build_repair_messages(PromptContext(goal=goal, spec=spec, config=config,
                                               current_source=spec.template), attempt, failed)
    assert "tail_marker" in msgs[2]["content"]
    assert "tma_store" in msgs[1]["content"].split("CURRENT (", 1)[1]
