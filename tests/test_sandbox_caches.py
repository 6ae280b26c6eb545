"""The compiled-library cache: every cell may write the shared cache
(app.paths.cache_dir), so a library planted there by an earlier cell must never be loaded.
References are trusted for correctness and load into the worker itself; candidates run under
the build key of their source. Both are built in the cell's own scratch now
(app.gpu.sandbox.private). The planted files sit where the old code looked for them; the
ground truth is the known right answer and a canary file a planted constructor would write."""

from __future__ import annotations

import hashlib
import shutil
import subprocess

import pytest
import test_custom_reference_source as saxpy

from app.core.types import VERIFY_FAILED, Candidate
from app.goal import Goal
from app.gpu.cpu import CpuEvaluator, find_compiler, toolchain
from app.paths import cache_dir
from app.session import check_goal

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")

# the "wrong kernel": zeros everywhere (the right answer, a*x + y, is far from zero)
ZEROS_C = "void saxpy(float *out, const float *x, const float *y, float a, int n)\n" \
          "{ for (int i = 0; i < n; i++) out[i] = 0.0f; }\n"
PLANTED_REF = "void saxpy_ref(float *out, const float *x, const float *y, float a, int n)\n" \
              "{ for (int i = 0; i < n; i++) out[i] = 0.0f; }\n"


def _build(source: str, out, flags=()) -> None:
    src = out.with_suffix(".c")
    src.write_text(source)
    subprocess.run([find_compiler(), "-shared", "-fPIC", "-O1", *flags, str(src), "-o", str(out)],
                   check=True, capture_output=True, timeout=60)


def _old_reference_path(goal: Goal):
    """Where the old code kept this goal's reference library (app.gpu.custom_reference)."""
    from app.catalog.custom import custom_operator
    from app.gpu.cpu.reference_kernel import reference_defines

    op, tc = custom_operator(goal, "cpu"), toolchain()
    defines = reference_defines(op, goal.shapes[0])
    key = hashlib.sha256(repr((op.spec.reference_source, op.spec.reference_entry,
                               sorted(defines.items()), tc.identity, tc.flags)).encode()).hexdigest()[:16]
    return cache_dir() / "cpu-kernels" / f"reference-source-{key}.so"


def test_a_planted_reference_kernel_does_not_make_a_wrong_kernel_pass(tmp_path):
    saxpy.write_goal(tmp_path)
    (tmp_path / "saxpy.c").write_text(ZEROS_C)
    goal = Goal.load(tmp_path / "goal.toml")
    check_goal(goal)
    planted = _old_reference_path(goal)
    planted.parent.mkdir(parents=True, exist_ok=True)
    _build(PLANTED_REF, planted)  # what any earlier cell could write
    try:
        with CpuEvaluator(goal) as ev:
            result = ev.evaluate(Candidate(config={"UNROLL": 1}, key="zeros", agent="t"))
        assert not result.ok and result.reason == VERIFY_FAILED, (result.reason, result.detail)
        assert planted.exists()  # not removed: simply never looked at
    finally:
        planted.unlink(missing_ok=True)


def test_a_planted_c_reference_never_runs_in_the_worker(tmp_path):
    """The catalog's plain C reference is loaded into the worker itself (no ELF check, no
    candidate filters): a planted one's constructor would run with the worker's rights."""
    from app.catalog.cpu.operator import REFERENCE_SOURCE, kernel_source
    from app.gpu.cpu.toolchain import build_key

    goal = Goal(name="planted reference", backend="cpu", operator="transpose", shapes=[[64, 96]])
    canary = cache_dir() / "planted-reference-ran"
    canary.unlink(missing_ok=True)
    with CpuEvaluator(goal) as ev:
        key = build_key(ev.op, {}, kernel_source(REFERENCE_SOURCE), ev.tc)
        planted = cache_dir() / "cpu-kernels" / f"reference-{key}.so"
        planted.parent.mkdir(parents=True, exist_ok=True)
        _build(f"""#include <stdio.h>
__attribute__((constructor)) static void early(void) {{
    FILE *f = fopen("{canary}", "w"); if (f) {{ fputs("ran", f); fclose(f); }}
}}
void {ev.op.reference_symbol}(void) {{}}
""", planted)
        try:
            ev.baselines()
            assert not canary.exists(), "a planted reference ran inside the worker"
        finally:
            planted.unlink(missing_ok=True)
            canary.unlink(missing_ok=True)


def test_nothing_is_built_into_the_shared_cache(tmp_path):
    """Candidates and references stay in the cell's scratch (removed with it)."""
    shutil.rmtree(cache_dir() / "cpu-kernels", ignore_errors=True)
    goal = Goal.load(saxpy.write_goal(tmp_path))
    check_goal(goal)
    with CpuEvaluator(goal) as ev:
        assert ev.evaluate(Candidate(config={"UNROLL": 2}, key="ok", agent="t")).ok
    assert not list((cache_dir() / "cpu-kernels").glob("*.so"))
