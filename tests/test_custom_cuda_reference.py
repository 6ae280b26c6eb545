"""A CUDA custom goal checked against a reference kernel source: the reference has the
kernel's signature, is rendered with each tunable at its first value, compiled with NVRTC (real,
no GPU needed) and launched with the goal's geometry in the GPU worker. Without a GPU the run
compile-checks it before anything else, so a broken reference is one line naming the field."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from project_paths import ROOT
from test_custom_kernel import _cuda_request, fake_cuda_worker  # noqa: F401 - the fixture

from app.catalog.custom import custom_operator, load_spec
from app.core.types import VERIFY_FAILED, Evaluation
from app.goal import Goal, GoalError
from app.session import check_goal

nvrtc = pytest.importorskip("app.gpu.cuda.nvrtc")
try:
    nvrtc.nvrtc_module()
except nvrtc.NvrtcUnavailable as exc:  # pragma: no cover - depends on the environment
    pytest.skip(str(exc), allow_module_level=True)

KERNEL_CU = """\
__global__ void axpy(float *y, const float *x, float a, int n) {
    int i = blockIdx.x * block_size_x * TILE + threadIdx.x;
    for (int t = 0; t < TILE; t++, i += block_size_x)
        if (i < n) y[i] += a * x[i];
}
"""
# the user's trusted version: one element per thread (it sees TILE at its first value, 1)
REFERENCE_CU = """\
#include <cuda_fp16.h>
__global__ void axpy_ref(float *y, const float *x, float a, int n) {
    int i = blockIdx.x * block_size_x * TILE + threadIdx.x;
    if (i < n) y[i] = y[i] + a * x[i];
}
"""
GOAL_TOML = """\
name = "axpy with a CUDA reference kernel"
backend = "cuda"
shapes = [[3000]]

[kernel]
source = "axpy.cu"
entry = "axpy"
tune_params = { block_size_x = [64, 128, 256], TILE = [1, 2, 4] }
grid_div_x = ["block_size_x", "TILE"]
reference_source = "ref.cu"
reference_entry = "axpy_ref"
args = [
  { name = "y", role = "inout", shape = "n" },
  { name = "x", shape = "n" },
  { name = "a", role = "scalar", value = "0.5" },
  { name = "n", role = "scalar", dtype = "int32", value = "n" },
]
"""


def write_goal(tmp_path: Path, goal: str = GOAL_TOML, reference: str = REFERENCE_CU) -> Path:
    (tmp_path / "axpy.cu").write_text(KERNEL_CU)
    (tmp_path / "ref.cu").write_text(reference)
    path = tmp_path / "goal.toml"
    path.write_text(goal)
    return path


def test_a_cuda_goal_with_a_reference_source_parses_and_its_reference_compiles(tmp_path):
    from app.gpu.cuda.reference_kernel import (
        compile_reference,
        reference_config,
        render_reference,
    )

    goal = Goal.load(write_goal(tmp_path))
    check_goal(goal)
    spec = load_spec(goal, "cuda")
    assert spec.reference_source_name == "ref.cu" and spec.reference_entry == "axpy_ref"
    op = custom_operator(goal, "cuda")
    assert reference_config(op) == {"block_size_x": 64, "TILE": 1}
    text = render_reference(op, [3000])
    assert "#define TILE 1" in text and "#define grid_size_x 47" in text  # ceil(3000 / 64)
    built = compile_reference(op, [3000], cache=False)
    assert built.resource("axpy_ref").registers > 0
    assert op.launch(reference_config(op), [3000]).grid == (47, 1, 1)


@pytest.mark.parametrize("edit, field, words", [
    (lambda g: g.replace('reference_entry = "axpy_ref"', 'reference_entry = "nope"'),
     "kernel.reference_entry", "it defines axpy_ref"),
    (lambda g: g.replace('"ref.cu"', '"nowhere.cu"'), "kernel.reference_source", "nowhere.cu"),
], ids=["entry", "missing-file"])
def test_a_wrong_cuda_reference_field_is_named(tmp_path, edit, field, words):
    with pytest.raises(GoalError) as exc:
        check_goal(Goal.load(write_goal(tmp_path, edit(GOAL_TOML))))
    assert exc.value.field == field and words in str(exc.value)


@pytest.mark.slow
def test_a_broken_cuda_reference_is_one_line_from_the_real_cli(tmp_path):
    """No GPU here: the run compile-checks the reference in a worker before it looks for one.
    (With a GPU the same probe launches it, and the compile fails the same way.)"""
    goal = write_goal(tmp_path, reference=REFERENCE_CU.replace("a * x[i]", "b * x[i]"))
    proc = subprocess.run([sys.executable, "-m", "app", "run", str(goal), "--db",
                           str(tmp_path / "h.sqlite")], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("kernelswarm: error:")]
    assert proc.returncode == 1 and len(errors) == 1, proc.stderr
    line = errors[0]
    assert "kernel.reference_source" in line and "does not compile with NVRTC" in line, line
    assert 'ref.cu(4): error: identifier "b" is undefined' in line, line  # the user's line
    assert "Traceback" not in proc.stderr


def test_the_reference_probe_compile_checks_in_a_worker(tmp_path):
    from app.gpu.custom_reference.probe import probe_reference

    good = custom_operator(Goal.load(write_goal(tmp_path)), "cuda")
    assert probe_reference(good, [3000]) is None
    bad = custom_operator(Goal.load(write_goal(tmp_path, reference=REFERENCE_CU.replace(
        "__global__ void axpy_ref", "__device__ void axpy_ref"))), "cuda")
    problem = probe_reference(bad, [3000])  # named, but not a kernel: NVRTC finds no entry
    assert "ref.cu" in problem and "'axpy_ref' not found in the compiled module" in problem, problem


def test_the_preview_compiles_the_reference_kernel_too(tmp_path):
    from app.gpu.custom_reference.preview import preview

    ok, text = preview(Goal.load(write_goal(tmp_path)))
    assert ok and "reference kernel ref.cu compiled for sm_80" in text, text
    ok, text = preview(Goal.load(write_goal(tmp_path, reference="__global__ void axpy_ref( {}\n")))
    assert not ok and "reference kernel: ref.cu does not compile with NVRTC" in text, text


def test_the_cuda_worker_verifies_candidates_against_the_reference_kernel(fake_cuda_worker, tmp_path):  # noqa: F811
    """The real CUDA worker on tests/fake_cupy: NVRTC compiles candidate and reference for real,
    their launches are numpy emulations. The reference's outputs are the answer: a candidate
    that agrees passes, one that skips the tail fails verification."""
    worker, emulations = fake_cuda_worker
    goal = Goal.load(write_goal(tmp_path))
    op = custom_operator(goal, "cuda")
    launched = []

    def reference(y, x, a, n):
        launched.append(int(n))
        y[:int(n)] = y[:int(n)] + np.float32(a) * x[:int(n)]

    def candidate(skip_tail):
        def run(y, x, a, n):
            stop = int(n) - 5 if skip_tail else int(n)
            y[:stop] += np.float32(a) * x[:stop]
        return run

    emulations["axpy_ref"] = reference
    results = {}
    for skip in (False, True):
        emulations["axpy"] = candidate(skip)
        request = _cuda_request(op, goal, {"block_size_x": 128, "TILE": 2}, tmp_path)
        results[skip] = Evaluation.from_dict(worker(("evaluate", request), lambda s: None)["evaluation"])
    good, bad = results[False], results[True]
    assert launched and set(launched) == {3000}
    assert good.ok, (good.reason, good.detail, good.log[-1500:])
    assert not bad.ok and bad.reason == VERIFY_FAILED and "'y'" in bad.detail


def test_the_reference_kernel_refuses_to_run_off_the_gpu(tmp_path):
    from app.gpu.cuda.reference_kernel import ReferenceKernelError

    op = custom_operator(Goal.load(write_goal(tmp_path)), "cuda")
    inputs = op.make_inputs(np, [3000], "float32", np.random.default_rng(0))
    with pytest.raises(ReferenceKernelError, match="runs on the GPU only"):
        op.reference(np, {k: v.astype(np.float64) for k, v in inputs.items()}, [3000])


def test_the_reference_runs_at_the_first_configuration_that_fits(tmp_path):
    """A first value over the thread limit is skipped (the reference runs at the first
    configuration that fits); a space where none fits names the limit."""
    from app.gpu.cuda.reference_kernel import (
        ReferenceKernelError,
        compile_reference,
        render_reference,
    )

    goal = Goal.load(write_goal(tmp_path, GOAL_TOML.replace("[64, 128, 256]", "[2048, 128]")))
    op = custom_operator(goal, "cuda")
    assert op.reference_config() == {"block_size_x": 128, "TILE": 1}
    assert "#define block_size_x 128" in render_reference(op, [3000])
    (tmp_path / "none").mkdir()
    goal = Goal.load(write_goal(tmp_path / "none", GOAL_TOML.replace("[64, 128, 256]", "[2048, 4096]")))
    op = custom_operator(goal, "cuda")
    with pytest.raises(ReferenceKernelError, match="ref.cu: none of the first 100,000 configurations.*fits a block"):
        compile_reference(op, [3000], cache=False)


def test_the_preview_leaves_no_compiler_folder_behind(tmp_path, monkeypatch):
    """Each "compile one configuration" click left a kernelswarm-nvrtc-* folder in /tmp."""
    import tempfile

    from app.gpu.custom_reference.preview import preview

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    ok, text = preview(Goal.load(write_goal(tmp_path)))
    assert ok, text
    assert list(scratch.iterdir()) == []
