"""A custom C goal checked against a reference kernel source: the reference C kernel
has the kernel's signature, is built in the worker with each tunable at its first value and run
on copies of the same inputs; its outputs are the expected answer."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from project_paths import ROOT
from test_custom_kernel import _cli

from app.catalog.custom import custom_operator
from app.core.types import VERIFY_FAILED, Candidate
from app.goal import Goal, GoalError
from app.session import check_goal

pytestmark = pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("cc")),
                                reason="needs a C compiler")

# out[i] = a * x[i] + y[i]; BUG=1 forgets the tail when n is not a multiple of UNROLL
KERNEL_C = """\
void saxpy(float *out, const float *x, const float *y, float a, int n)
{
    const int body = n - n % UNROLL;
    for (int i = 0; i < body; i += UNROLL)
        for (int u = 0; u < UNROLL; u++) out[i + u] = a * x[i + u] + y[i + u];
#if !BUG
    for (int i = body; i < n; i++) out[i] = a * x[i] + y[i];
#endif
}
"""
# the plain loop: the user's trusted version (it sees the same defines, UNROLL at its first value)
REFERENCE_C = """\
void saxpy_ref(float *out, const float *x, const float *y, float a, int n)
{
    for (int i = 0; i < n; i++) out[i] = a * x[i] + y[i];
}
"""
GOAL_TOML = """\
name = "saxpy with a reference kernel"
backend = "cpu"
shapes = [[1001]]

[kernel]
source = "saxpy.c"
entry = "saxpy"
tune_params = { UNROLL = [1, 2, 4, 8] }
defines = { BUG = 0 }
reference_source = "saxpy_ref.c"
reference_entry = "saxpy_ref"
args = [
  { name = "out", role = "output", shape = "n", rtol = 1e-6 },
  { name = "x", shape = "n" },
  { name = "y", shape = "n", fill = "uniform" },
  { name = "a", role = "scalar", value = "1.5" },
  { name = "n", role = "scalar", dtype = "int32", value = "n" },
]

[stop]
max_evals = 4

[swarm]
workers = 1
"""


def write_goal(tmp_path: Path, goal: str = GOAL_TOML, reference: str = REFERENCE_C) -> Path:
    (tmp_path / "saxpy.c").write_text(KERNEL_C)
    (tmp_path / "saxpy_ref.c").write_text(reference)
    path = tmp_path / "goal.toml"
    path.write_text(goal)
    return path


@pytest.mark.slow
def test_c_goal_with_a_reference_kernel_tunes_end_to_end_from_the_cli(capsys, tmp_path):
    goal = write_goal(tmp_path)
    rc, out, err = _cli(capsys, "run", goal, "--db", tmp_path / "h.sqlite", "--quiet")
    assert rc == 0, out + err
    assert "4 evaluations (4 ok, 0 failed)" in out, out
    assert "UNROLL=" in out


@pytest.mark.slow
def test_a_wrong_kernel_fails_verification_against_the_reference_kernel(tmp_path):
    from app.gpu.cpu import CpuEvaluator

    goal = Goal.load(write_goal(tmp_path, GOAL_TOML.replace("BUG = 0", "BUG = 1")))
    check_goal(goal)
    with CpuEvaluator(goal) as ev:
        good = ev.evaluate(Candidate(config={"UNROLL": 1}, key="a", agent="t"))
        bad = ev.evaluate(Candidate(config={"UNROLL": 8}, key="b", agent="t"))
    assert good.ok, good.detail + good.log
    assert not bad.ok and bad.reason == VERIFY_FAILED and "'out'" in bad.detail  # 1001 % 8 != 0


def test_the_reference_kernel_gets_the_first_value_of_each_tunable(tmp_path):
    """Built in this process too (no worker needed to call the operator's reference)."""
    import numpy as np

    # a reference that writes UNROLL itself: it must see the first value, 1
    probe = "void saxpy_ref(float *out, const float *x, const float *y, float a, int n)\n" \
            "{ for (int i = 0; i < n; i++) out[i] = UNROLL + BUG; }\n"
    op = custom_operator(Goal.load(write_goal(tmp_path, reference=probe)), "cpu")
    inputs = op.make_inputs(np, [1001], "float32", np.random.default_rng(0))
    ref = op.reference(np, {k: v.astype(np.float64) for k, v in inputs.items()}, [1001])
    assert ref["out"].shape == (1001,) and np.all(ref["out"] == 1.0)


def test_a_missing_reference_source_is_one_clear_line(capsys, tmp_path):
    goal = write_goal(tmp_path, GOAL_TOML.replace('"saxpy_ref.c"', '"nowhere.c"'))
    with pytest.raises(GoalError) as exc:
        check_goal(Goal.load(goal))
    assert exc.value.field == "kernel.reference_source"
    rc, _, err = _cli(capsys, "run", goal, "--db", tmp_path / "h.sqlite")
    lines = [ln for ln in err.splitlines() if ln.startswith("kernelswarm: error:")]
    assert rc == 1 and len(lines) == 1, err
    assert "kernel.reference_source" in lines[0] and "nowhere.c" in lines[0], err
    assert "Traceback" not in err


@pytest.mark.parametrize("edit, field, words", [
    (lambda g: g.replace('reference_entry = "saxpy_ref"', 'reference_entry = "nope"'),
     "kernel.reference_entry", "no function 'nope'"),
    (lambda g: g.replace('reference_source =', 'reference = "ref.py:f"\nreference_source ='),
     "kernel.reference_source", "not reference and reference_source"),
], ids=["entry", "two-references"])
def test_a_wrong_reference_source_field_is_named(tmp_path, edit, field, words):
    with pytest.raises(GoalError) as exc:
        check_goal(Goal.load(write_goal(tmp_path, edit(GOAL_TOML))))
    assert exc.value.field == field and words in str(exc.value)


def test_a_reference_source_that_does_not_compile_is_one_line_from_the_real_cli(tmp_path):
    goal = write_goal(tmp_path, reference="void saxpy_ref(float *out) { this is not C }\n")
    proc = subprocess.run([sys.executable, "-m", "app", "run", str(goal), "--db",
                           str(tmp_path / "h.sqlite")], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("kernelswarm: error:")]
    assert proc.returncode == 1 and len(errors) == 1, proc.stderr
    assert "saxpy_ref.c" in errors[0] and "does not compile" in errors[0], errors[0]
    assert "Traceback" not in proc.stderr


def test_the_preview_compiles_the_reference_kernel_too(tmp_path):
    from app.gpu.custom_reference.preview import preview

    ok, text = preview(Goal.load(write_goal(tmp_path)))
    assert ok and "compiled with" in text and "reference kernel saxpy_ref.c compiled" in text, text
    ok, text = preview(Goal.load(write_goal(tmp_path, reference="void saxpy_ref(float *out) { oops }\n")))
    assert not ok and "reference kernel saxpy_ref.c does not compile" in text and "oops" in text, text
