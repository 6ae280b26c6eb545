"""An honest float32 kernel whose exact answer is smaller than float32 can hold: the float64
reference says 1e-80, the kernel can only say 0. The tolerance of a user's kernel is relative to
its output's largest value, and that scale must not fall below the smallest normal number of the
output's dtype (here both inputs are float32 denormals, their exact product about 1e-80), or every honest kernel fails (the adversary's tiny inputs on the conv2d example
dethroned every candidate "broken by case 1")."""

from __future__ import annotations

import textwrap

import pytest

from app.core.types import Candidate
from app.goal import Goal
from app.gpu.cpu import CpuEvaluator, find_compiler

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")

GOAL = """\
name = "underflow"
backend = "cpu"
shapes = [[257]]

[kernel]
source = "k.c"
entry = "shrink"
reference = "reference.py:shrink"
tune_params = { U = [1] }
args = [
  { name = "out", role = "output", shape = "n" },
  { name = "x", shape = "n", fill = "uniform", low = 1e-40, high = 2e-40 },
  { name = "y", shape = "n", fill = "uniform", low = 1e-40, high = 2e-40 },
  { name = "n", role = "scalar", dtype = "int64", value = "n" },
]
"""


def _evaluate(tmp_path, kernel: str):
    (tmp_path / "reference.py").write_text(textwrap.dedent("""\
        import numpy as np

        def shrink(x, y, n):  # in float64, as a careful reference is
            return x.astype(np.float64) * y.astype(np.float64)
        """))
    (tmp_path / "k.c").write_text(kernel)
    (tmp_path / "goal.toml").write_text(GOAL)
    with CpuEvaluator(Goal.load(tmp_path / "goal.toml")) as ev:
        return ev.evaluate(Candidate(config={"U": 1}, key=f"k-{hash(kernel)}", agent="user"))


def test_an_answer_below_the_dtypes_range_is_not_an_error(tmp_path):
    honest = ("void shrink(float *out, const float *x, const float *y, long n) {\n"
              "  for (long i = 0; i < n; i++) out[i] = x[i] * y[i]; }\n")
    result = _evaluate(tmp_path, honest)
    assert result.ok, (result.reason, result.detail)


def test_a_wrong_answer_of_normal_size_still_fails(tmp_path):
    wrong = ("void shrink(float *out, const float *x, const float *y, long n) {\n"
             "  for (long i = 0; i < n; i++) out[i] = 1e5f * x[i]; }\n")
    result = _evaluate(tmp_path, wrong)
    assert not result.ok and "tolerance" in result.detail, (result.reason, result.detail)
