"""The prompt for every goal kind (CPU catalog, CUDA catalog incl. the Hopper GEMM
and KDA, custom C, custom CUDA): the prompt shows the whole CURRENT, the hardware sheet and
the contract from the parser (never a comment), without the compiler's or model's words."""

from __future__ import annotations

import re

import pytest
from project_paths import ROOT

from app.catalog.cuda.gemm import HOPPER_GEMM
from app.goal import Goal
from app.llm.prompts import PromptContext, build_messages
from app.llm.spec import kernel_spec

GOALS = ROOT / "resources" / "goals" / "custom"
H100 = "NVIDIA H100 80GB HBM3 (cc 90, SMs 132)"
KINDS = {
    "cpu-gemm": (lambda: Goal(name="g", operator="gemm", backend="cpu", shapes=[[512] * 3]),
                 None, "Test CPU"),
    "cpu-softmax": (lambda: Goal(name="s", operator="softmax", backend="cpu",
                                 shapes=[[64, 1000]]), None, "Test CPU"),
    "cuda-hopper-gemm": (lambda: Goal(name="h", operator="gemm", backend="cuda",
                                      shapes=[[4096] * 3], dtype="bfloat16"), HOPPER_GEMM, H100),
    "cuda-kda": (lambda: Goal(name="k", operator="kda", backend="cuda",
                              shapes=[[1, 4096, 16, 128]], dtype="bfloat16"), None, H100),
    "custom-c": (lambda: Goal.load(GOALS / "conv2d_c" / "goal.toml"), None, "Test CPU"),
    "custom-cuda": (lambda: Goal.load(GOALS / "convolution_cuda" / "goal.toml"), None, H100),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_goal_kind_shows_whole_current_the_sheet_and_the_parsed_contract(kind):
    make, operator, device = KINDS[kind]
    goal = make()
    spec = kernel_spec(goal, operator=operator)
    user = build_messages("tiling", PromptContext(goal=goal, spec=spec, device=device,
                                                  current_source=spec.template))[1]["content"]
    shown = re.search(r"CURRENT \(.*?\n```\w+\n(.*?)\n```", user, re.DOTALL).group(1)
    assert shown.strip() == spec.template.strip()
    contract = user.split("contract: ", 1)[1].split("\n", 1)[0]
    assert f"{spec.entry}(...)" not in contract  # the parser read the signature
    sig = spec.signature()
    assert sig in contract and "//" not in sig and "/*" not in sig
    if spec.language == "cuda":
        assert "hardware: 132 SMs, L2 50 MB" in user and "CUDA events" in user
    else:
        assert "hardware: cpu: Test CPU" in user and "logical cores" in user
    assert "operator ," not in user
