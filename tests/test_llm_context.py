"""The prompt gives the model a complete, accurate picture: for every catalog operator on both
backends the CURRENT block compiles as it stands (C: real gcc with the prompt's -D flags;
CUDA: the prompt's HARNESS PREFIX followed by the block, through NVRTC, no GPU needed) and
defines the entry the harness looks up; the timing protocol, tolerance, units and roof
fraction are stated."""

from __future__ import annotations

import random
import re
import shutil
from pathlib import Path

import pytest

from app.catalog import known_operators
from app.core.types import Evaluation
from app.goal import Goal
from app.llm.prompts import PromptContext, build_messages
from app.llm.spec import kernel_spec

CPU_SHAPES = {2: [37, 300], 3: [40, 36, 28]}
CUDA_SHAPES = {"gemm": [256, 256, 256], "gemm_mma": [256, 256, 256], "kda": [1, 100, 2, 128]}


def _config(op, dtype: str, shape: list[int]) -> dict:
    if hasattr(op, "recommended") and op.recommended(dtype, shape):
        return dict(op.recommended(dtype, shape)[0])
    return op.space(dtype).sample(random.Random(0))


def _prompt(backend: str, name: str, dtype: str, shape: list[int], **ctx) -> tuple[str, dict, object]:
    goal = Goal(name="ctx", operator=name, backend=backend, shapes=[shape], dtype=dtype)
    spec = kernel_spec(goal)
    config = _config(spec.operator, dtype, shape)
    ctx.setdefault("current_source", spec.template)
    messages = build_messages("tiling", PromptContext(goal=goal, spec=spec, device="dev",
                                                      config=config, **ctx))
    return messages[0]["content"] + "\n" + messages[1]["content"], config, spec


def _block_after(text: str, header: str) -> str:
    at = text.index(header)
    m = re.search(r"^```[\w+]*\n(.*?)^```$", text[at:], re.MULTILINE | re.DOTALL)
    assert m, f"no code block after {header!r}"
    return m.group(1)


def _cpu_cases():
    return [(n, op) for n, op in sorted(known_operators("cpu").items())]


@pytest.mark.skipif(shutil.which("gcc") is None and shutil.which("cc") is None, reason="no C compiler")
@pytest.mark.parametrize("name", [n for n, _ in _cpu_cases()])
def test_cpu_prompt_source_compiles_with_the_prompts_command(name, tmp_path):
    from app.gpu.cpu import compile_library, toolchain

    op = known_operators("cpu")[name]
    shape = CPU_SHAPES.get(op.ndim, [8] * op.ndim)
    text, config, spec = _prompt("cpu", name, "float32", shape)
    source = _block_after(text, "CURRENT (")
    assert source.strip() == spec.template.strip()  # the whole current source, not a file name
    command = re.search(r"^compile: (.*)$", text, re.MULTILINE).group(1)
    defines = dict(re.findall(r"-D(\w+)=(\S+)", command))
    assert defines == {k: str(v) for k, v in config.items()}
    ok, log = compile_library(source, defines, tmp_path / "k.so", toolchain(), 60)
    assert ok, log
    import ctypes

    assert hasattr(ctypes.CDLL(str(tmp_path / "k.so")), spec.entry)
    assert f"`{spec.entry}`" in text


def _cuda_cases():
    cases = []
    for name, op in sorted(known_operators("cuda").items()):
        for dtype in op.dtypes:
            cases.append((name, dtype))
    return cases


@pytest.mark.parametrize("name,dtype", _cuda_cases(), ids=[f"{n}-{d}" for n, d in _cuda_cases()])
def test_cuda_prompt_prefix_plus_source_compiles_with_the_harness_entry(name, dtype, tmp_path):
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from app.gpu.cuda import nvrtc

    op = known_operators("cuda")[name]
    shape = CUDA_SHAPES.get(name, [64, 1024])
    text, config, spec = _prompt("cuda", name, dtype, shape)
    source = _block_after(text, "CURRENT (")
    prefix = _block_after(text, "HARNESS PREFIX")
    assert source.strip() == op.template_source(dtype).strip()
    assert not re.fullmatch(r"\s*\w+\.cuh?\s*", source)
    # what the prompt shows is what the harness compiles: the whole prefix, or (a long one)
    # its preprocessor lines and the declarations CURRENT uses, said to be shortened
    rendered = op.render(config, shape, dtype, source=source)
    flat = re.sub(r"\s+", "", rendered)
    if "shortened from" not in text:
        assert re.sub(r"\s+", "", prefix + source) == flat
    else:
        assert len(prefix) < len(rendered) - len(source)
        for line in prefix.splitlines():  # declarations end in ';' where the body was
            line = re.sub(r"\s+", "", re.sub(r"//.*", "", line)).removesuffix(";")
            assert line in flat, line
    assert spec.entry == op.kernel_for(dtype)  # the name NVRTC looks up
    assert f"`{spec.entry}`" in text
    built = nvrtc.compile_source(rendered, spec.entry, "sm_90", cache=tmp_path)
    assert built.resource(spec.entry).registers > 0
    launch = op.launch(config, shape, dtype)
    assert f"grid {tuple(launch.grid)}, block {tuple(launch.block)}" in text


def test_protocol_units_roof_fraction_and_tolerance_are_stated():
    ev = Evaluation(key="k", config={}, ok=True, value=2.0, p10_ms=1.9, p90_ms=2.2,
                    resources={"registers": 40, "spill_stores": 0})
    text, _, _ = _prompt("cpu", "softmax", "float32", [37, 300],
                         limits={"baseline": 3.0, "roof": 0.5}, current=ev)
    assert "3 input/output slots" in text and "poisoned" in text and "verified" in text
    assert "fresh buffers" not in text and "NaN before each call" not in text
    assert "baseline: 3 ms" in text and "roof: 0.5 ms" in text
    assert "25% of the roof" in text and "1.5x as good as the baseline" in text
    assert "p10..p90 1.9..2.2 ms" in text and "registers 40" in text
    assert re.search(r"\|got - ref\| <= [0-9.e+-]+ \+ [0-9.e+-]+ \* \|ref\|", text)


def test_a_user_kernel_prompt_states_each_outputs_own_tolerance():
    """Your own kernel is checked per output (rtol/atol in [[kernel.args]], else the dtype's
    default rtol with atol = rtol * max|ref|): the prompt says exactly that, not the catalog's
    table formula."""
    from app.catalog.custom import custom_operator
    from app.goal import Goal
    from app.llm.spec import _tolerance_text

    goal = Goal.load(Path(__file__).resolve().parents[1] / "resources/goals/custom/conv2d_c/goal.toml")
    text = _tolerance_text(custom_operator(goal, "cpu"), list(goal.shapes[0]), goal.dtype)
    assert "per output" in text and "out: |got - ref| <= 1.0e-04 * max|ref| + 1.0e-04 * |ref|" in text, text


def test_a_multi_kernel_prompt_shows_every_launch_the_workspaces_and_the_norm_check():
    """KDA is four kernels (or fewer, fused): the agent must see each one's grid and block in
    order and the workspaces between them, and that outputs are judged by a norm, not per
    element."""
    shape = [2, 4096, 16, 128]
    text, config, spec = _prompt("cuda", "kda", "bfloat16", shape)
    steps = spec.operator.steps(config, shape, "bfloat16")
    assert len(steps) >= 2
    lines = text.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("launches for shape 2x4096x16x128"))
    for i, step in enumerate(steps, 1):
        assert lines[at + i].strip().startswith(f"{i}. {step.kernel}: grid {tuple(step.launch.grid)}")
    spaces = spec.operator.workspaces(config, shape, "bfloat16")
    line = next(ln for ln in lines if ln.startswith("workspaces the harness allocates"))
    assert all(f"{name} " in line for name in spaces)
    verification = next(ln for ln in lines if ln.startswith("verification:"))
    assert "Frobenius" in verification and "per element" not in verification
