"""The "Your kernel" page's reference picker (pytest-qt, offscreen): a reference kernel source
picked with the file dialog (its functions offered), saved into the TOML as reference_source /
reference_entry and checked against the real compiler; a CUDA reference source; stored outputs
and "no check"."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog
from test_custom_kernel import SCALE_C

from app.catalog.custom import load_spec
from app.core.types import Candidate
from app.goal import Goal
from app.session import check_goal
from app.ui.custom_kernel import CustomKernelPage

needs_cc = pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("cc")), reason="needs a C compiler")

# the plain loop, the kernel's signature: the user's trusted version
REFERENCE_C = """\
void scale_add_ref(float *out, const float *x, const float *b, float a, int n)
{
    for (int i = 0; i < n; i++) out[i] = a * x[i] + b[i % 8];
}
"""


def _fill_c(page: CustomKernelPage, tmp_path: Path) -> None:
    (tmp_path / "scale_add.c").write_text(SCALE_C)
    page.name.setText("scale_add checked by a reference kernel")
    page.set_source(str(tmp_path / "scale_add.c"))
    page.shapes.setText("1001")
    page.add_param("UNROLL", "[1, 2, 4, 8]")
    page.add_param("THREADS", "[1, 2]")
    page.add_param("BUG", "[0]")
    page.args.setRowCount(0)  # typed by hand here (the page offers them from the signature)
    page.add_arg("out", "output", "float32", "n")
    page.add_arg("x", "input", "float32", "n")
    page.add_arg("b", "input", "float32", "8", "uniform")
    page.add_arg("a", "scalar", "float32", "2.5")
    page.add_arg("n", "scalar", "int32", "n")
    page.max_evals.setValue(3)


def _pick(qtbot, page: CustomKernelPage, monkeypatch, path: Path) -> None:
    """The Browse button, with the file dialog answering `path`."""
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    qtbot.mouseClick(page.reference_pick, Qt.LeftButton)


@needs_cc
def test_a_reference_kernel_source_is_picked_saved_and_checks_the_kernel(qtbot, tmp_path, monkeypatch):
    from app.gpu.cpu import CpuEvaluator

    page = CustomKernelPage()
    qtbot.addWidget(page)
    _fill_c(page, tmp_path)
    (tmp_path / "ref.c").write_text(REFERENCE_C)
    page.reference_kind.setCurrentIndex(page.reference_kind.findData("source"))
    assert page.reference_function_label.isVisibleTo(page)
    _pick(qtbot, page, monkeypatch, tmp_path / "ref.c")
    assert page.reference_file.text() == str(tmp_path / "ref.c")
    assert [page.reference_function.itemText(i) for i in range(page.reference_function.count())] \
        == ["scale_add_ref"]

    out = tmp_path / "saved" / "goal.toml"
    out.parent.mkdir()
    assert page.save(out), page.problem.text()
    text = out.read_text()
    assert 'reference_source = "../ref.c"' in text and 'reference_entry = "scale_add_ref"' in text
    assert "reference =" not in text
    goal = Goal.load(out)
    assert check_goal(goal).name == "cpu"
    assert load_spec(goal, "cpu").reference_entry == "scale_add_ref"
    with CpuEvaluator(goal) as ev:  # the reference kernel is built in the worker and agrees
        result = ev.evaluate(Candidate(config={"UNROLL": 8, "THREADS": 2, "BUG": 0}, key="k", agent="t"))
    assert result.ok, (result.reason, result.detail)

    page.reference_function.setCurrentText("nope")  # a wrong function is named on the page
    assert page.use_goal() is None and "kernel.reference_entry" in page.problem.text()


def test_a_cuda_reference_source_is_offered_its_kernels(qtbot, tmp_path):
    page = CustomKernelPage()
    qtbot.addWidget(page)
    (tmp_path / "k.cu").write_text("__global__ void twice(float *y, const float *x, int n) {\n"
                                   "  int i = blockIdx.x * block_size_x + threadIdx.x;\n"
                                   "  if (i < n) y[i] = 2 * x[i]; }\n")
    (tmp_path / "ref.cu").write_text("__global__ void helper_ref(float *y) {}\n"
                                     "__global__ void twice_ref(float *y, const float *x, int n) {\n"
                                     "  int i = blockIdx.x * block_size_x + threadIdx.x;\n"
                                     "  if (i < n) y[i] = x[i] + x[i]; }\n")
    page.set_source(str(tmp_path / "k.cu"))
    page.shapes.setText("4096")
    page.add_param("block_size_x", "[64, 128]")
    page.args.setRowCount(0)
    page.add_arg("y", "output", "float32", "n")
    page.add_arg("x", "input", "float32", "n")
    page.add_arg("n", "scalar", "int32", "n")
    page.set_reference(str(tmp_path / "ref.cu"))
    assert page.reference_kind.currentData() == "source"
    assert page.reference_function.currentText() == "twice_ref"  # the entry's _ref is preferred
    out = tmp_path / "goal.toml"
    assert page.save(out), page.problem.text()
    goal = Goal.load(out)
    assert goal.backend == "cuda" and goal.kernel.reference_source == "ref.cu"
    assert goal.kernel.reference_entry == "twice_ref"
    spec = load_spec(goal, "cuda")
    assert spec.reference_entry == "twice_ref" and "x[i] + x[i]" in spec.reference_source


def test_stored_outputs_and_no_check(qtbot, tmp_path):
    page = CustomKernelPage()
    qtbot.addWidget(page)
    _fill_c(page, tmp_path)
    page.shapes.setText("16")
    np.savez(tmp_path / "expected.npz", out=np.zeros(16, np.float32))

    page.reference_kind.setCurrentIndex(page.reference_kind.findData("none"))
    assert not page.reference_file.isEnabled() and not page.reference_function.isVisibleTo(page)
    goal = page.build_goal()
    assert [a.get("check", True) for a in goal.kernel.args if a["role"] == "output"] == [False]
    assert not (goal.kernel.reference or goal.kernel.reference_source or goal.kernel.expected)

    page.set_reference(str(tmp_path / "expected.npz"))
    assert page.reference_kind.currentData() == "expected"
    assert not page.reference_function.isVisibleTo(page)
    assert page.build_goal().kernel.expected == str((tmp_path / "expected.npz").resolve())
