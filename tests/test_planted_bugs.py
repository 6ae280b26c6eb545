"""Three planted hostile kernels, run through the real CPU backend (compiled by the
system compiler, run in the sandboxed cascade): each is right on the inputs verification used
to draw, and wrong on inputs real users have. The input families (app.catalog.families) catch
each, and the message names the family; the honest template at the same configuration passes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from test_cheats import FAST

from app.catalog import get_operator
from app.core.types import VERIFY_FAILED, Candidate
from app.goal import Goal
from app.gpu.cpu import CpuEvaluator, find_compiler
from app.gpu.verify import CheckCase, make_inputs

PLANTED = Path(__file__).parent / "kernels" / "planted"
pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")

CONFIGS = {
    "transpose": {"TILE": 16, "WRITE_MAJOR": 0, "VEC": 8, "THREADS": 1},
    "softmax": {"VEC": 8, "ACC": 4, "ONLINE": 0, "CHUNK": 4, "EXP_IMPL": 0, "THREADS": 1},
    "rmsnorm": {"VEC": 8, "ACC": 4, "ACC_DOUBLE": 1, "CHUNK": 4, "THREADS": 1},
}
SHAPES = {"transpose": [64, 96], "softmax": [32, 128], "rmsnorm": [32, 128]}


@pytest.fixture(scope="module")
def evaluators():
    made: dict[str, CpuEvaluator] = {}

    def get(operator: str) -> CpuEvaluator:
        if operator not in made:
            made[operator] = CpuEvaluator(Goal(name=f"planted {operator}", backend="cpu",
                                               operator=operator, shapes=[SHAPES[operator]]),
                                          settings=FAST)
        return made[operator]

    yield get
    for ev in made.values():
        ev.close()


@pytest.mark.parametrize("operator, kernel, evidence", [
    # flushes |x| < 1e-30 to zero: no tolerance sees it; the bit-for-bit comparison does
    ("transpose", "flush_tiny_transpose.c", ("bit for bit",)),
    # drops 12 mantissa bits when every input is in [0, 1): the "unit" family, or any other
    # family whose case happened to lie there (constant rows of 0.3, say)
    ("softmax", "unit_lowprec_softmax.c", ("outside tolerance",)),
    # garbage when the first 32 inputs increase: "sorted" or "increasing" rows
    ("rmsnorm", "increasing_garbage_rmsnorm.c", ("outside tolerance",)),
])
def test_issue_29_hostile_kernels_fail_verification(evaluators, operator, kernel, evidence):
    ev = evaluators(operator)
    result = ev.evaluate(Candidate(config=CONFIGS[operator], key=f"planted-{kernel}",
                                   agent="llm", source=(PLANTED / kernel).read_text()))
    assert not result.ok and result.reason == VERIFY_FAILED, (result.reason, result.detail)
    for text in evidence:
        assert text in result.detail, result.detail
    case = result.failing_case
    if kernel.startswith("unit"):  # whichever family met it first, its inputs lie in [0, 1)
        check = CheckCase(**{k: case[k] for k in CheckCase.__dataclass_fields__ if k in case})
        x = next(iter(make_inputs(np, get_operator("cpu", operator), check, "float32").values()))
        assert 0 <= x.min() and x.max() < 1, (case, x.min(), x.max())
    if kernel.startswith("increasing"):
        assert case["distribution"] in ("sorted", "increasing"), case
    if kernel.startswith("flush"):  # near_limits draws values near the smallest normal too
        assert case["distribution"] in ("special", "nonfinite", "near_limits"), case
    # the honest template at the same configuration passes the very same families
    honest = ev.evaluate(Candidate(config=CONFIGS[operator], key=f"honest-after-{kernel}",
                                   agent="explorer"))
    assert honest.ok, honest.detail
