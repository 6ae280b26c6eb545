"""Goal identity: two goals share a history (goal row, validation cases, warm start, LLM lessons,
History grouping) exactly when they are the same problem. A custom kernel is what it computes
(entry, arguments, dims, reference or stored answer, tolerances), never the source being
optimised, and never where its files live. Goal files written here, real SQLite files."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest

from app.catalog.custom.spec import DEFAULT_DIMS as SPEC_DEFAULT_DIMS
from app.core.types import Evaluation, Lesson
from app.goal import Goal
from app.llm.lessons import LLM_KINDS, load_prior
from app.store import Store, goal_family, goal_key
from app.store.identity import DEFAULT_DIMS

KERNEL = """\
void {entry}(float *y, const float *x, int n) {{
    for (int i = 0; i < n; i += CHUNK) for (int j = i; j < i + CHUNK && j < n; j++) y[j] = {body};
}}
"""
GOAL = """\
name = "{entry}"
backend = "cpu"
shapes = [[5000]]

[kernel]
source = "kernel.c"
entry = "{entry}"
tune_params = {{ CHUNK = [1, 4, 16] }}
reference = "reference.py:{entry}"
args = [
  {{ name = "y", role = "output", shape = "n"{tolerance} }},
  {{ name = "x", shape = "n"{fill} }},
  {{ name = "n", role = "scalar", dtype = "int32", value = "n" }},
]
"""
REFERENCE = """\
def {entry}(x, n):
    # what the kernel must compute
    return {{"y": {formula}}}
"""


def _kernel_goal(where: Path, entry: str, body: str, formula: str, *, tolerance: str = "",
                 fill: str = "") -> Goal:
    where.mkdir(parents=True, exist_ok=True)
    (where / "kernel.c").write_text(KERNEL.format(entry=entry, body=body))
    (where / "reference.py").write_text(REFERENCE.format(entry=entry, formula=formula))
    (where / "goal.toml").write_text(GOAL.format(entry=entry, tolerance=tolerance, fill=fill))
    return Goal.load(where / "goal.toml")


@pytest.fixture
def scale(tmp_path) -> Goal:
    return _kernel_goal(tmp_path / "scale", "scale", "2.0f * x[j]", "2 * x")


@pytest.fixture
def saxpy(tmp_path) -> Goal:
    return _kernel_goal(tmp_path / "saxpy", "saxpy", "2.0f * x[j] + 1.0f", "2 * x + 1")


def _evaluation(key: str, source: str, value: float = 1.0, **kw) -> Evaluation:
    return Evaluation(key=key, config={"CHUNK": 4}, ok=True, value=value, source=source,
                      agent="llm", **kw)


def test_the_store_keeps_the_spec_default_dims():
    assert DEFAULT_DIMS == SPEC_DEFAULT_DIMS


def test_catalog_and_recorded_goals_keep_the_keys_they_always_had():
    # the keys today's release gave them: their histories need no re-keying
    assert goal_key(Goal(name="a", operator="softmax", backend="cpu",
                         shapes=[[4096, 1024]])) == "cb3ef6e2f1672133"
    assert goal_key(Goal(name="b", space="pnpoly_RTX_3090.json.gz")) == "fce1093bd5ddcf77"


def test_two_kernels_with_the_same_shapes_never_share_a_history(tmp_db, scale, saxpy):
    assert goal_key(scale) != goal_key(saxpy)
    assert goal_family(scale) != goal_family(saxpy)
    with Store(tmp_db) as store:
        first = store.create_run(scale, {"name": "cpu0"})
        store.record_evaluation(first, 1, _evaluation("s1", "// scale best"), 1.0, 1.0)
        store.add_lesson(first, Lesson(LLM_KINDS[0], "scale lesson", {}, "llm"))
        store.add_validation_case(scale, {"shape": [7], "seed": 3, "distribution": "normal"})
        second = store.create_run(saxpy, {"name": "cpu0"})
        assert store.run_goal(first)[0] != store.run_goal(second)[0]  # History groups by goal
        assert store.validation_cases(saxpy) == []
        assert [c["seed"] for c in store.validation_cases(scale)] == [3]
        assert store.runs_elsewhere(saxpy, "", "cpu0", include_device=True) == []  # no warm start
        prior = load_prior(store, saxpy)
        assert prior.lessons == [] and prior.kernels == []  # nor the LLM's "similar goal"
        assert [r["id"] for r in store.runs_elsewhere(scale, "", "cpu0",
                                                      include_device=True)] == [first]


def test_an_edited_kernel_is_the_same_problem_and_keeps_its_history(tmp_db, scale, tmp_path):
    with Store(tmp_db) as store:
        first = store.create_run(scale, {"name": "cpu0"})
        store.record_evaluation(first, 1, _evaluation("s1", "// v1"), 1.0, 1.0)
        store.add_validation_case(scale, {"shape": [7], "seed": 3, "distribution": "normal"})
        # the user rewrites the kernel and searches other parameters: still the same problem
        src = tmp_path / "scale" / "kernel.c"
        src.write_text(src.read_text().replace("2.0f * x[j]", "x[j] + x[j]"))
        toml = tmp_path / "scale" / "goal.toml"
        toml.write_text(toml.read_text().replace("CHUNK = [1, 4, 16]", "CHUNK = [8, 32, 64]"))
        edited = Goal.load(toml)
        assert goal_key(edited) == goal_key(scale)
        second = store.create_run(edited, {"name": "cpu0"})
        assert store.run_goal(second) == store.run_goal(first)
        assert len(store.validation_cases(edited)) == 1
        assert [r["id"] for r in store.runs_elsewhere(edited, "", "cpu0", include_device=True)
                ] == [first]
        assert [k["source"] for k in load_prior(store, edited).kernels] == ["// v1"]


def test_where_the_goal_lives_does_not_matter_what_it_computes_does(tmp_path, scale):
    moved = shutil.copytree(tmp_path / "scale", tmp_path / "elsewhere" / "scale2")
    assert goal_key(Goal.load(moved / "goal.toml")) == goal_key(scale)
    ref = moved / "reference.py"
    ref.write_text(ref.read_text().replace("# what the kernel must compute", "# reworded"))
    assert goal_key(Goal.load(moved / "goal.toml")) == goal_key(scale)  # a comment is no change
    ref.write_text(ref.read_text().replace("2 * x", "3 * x"))
    assert goal_key(Goal.load(moved / "goal.toml")) != goal_key(scale)  # another answer


def test_the_same_entry_and_arguments_with_another_reference_are_another_problem(tmp_path):
    double = _kernel_goal(tmp_path / "a", "kernel", "2.0f * x[j]", "2 * x")
    square = _kernel_goal(tmp_path / "b", "kernel", "x[j] * x[j]", "x * x")
    assert goal_key(double) != goal_key(square)


def test_tolerances_and_arguments_are_part_of_the_problem_fills_are_not(tmp_path, scale):
    def key_with(**kw: str) -> str:
        return goal_key(_kernel_goal(tmp_path / "v", "scale", "2.0f * x[j]", "2 * x", **kw))

    assert key_with() == goal_key(scale)
    assert key_with(tolerance=", rtol = 1e-3") != goal_key(scale)
    assert key_with(tolerance=", atol = 0.5") != key_with(tolerance=", rtol = 1e-3")
    # fills choose the validation data (a kept case is redrawn from the current fills)
    assert key_with(fill=', fill = "uniform", low = 0.0, high = 2.0, seed = 5') == goal_key(scale)
    toml = tmp_path / "v" / "goal.toml"
    toml.write_text(toml.read_text().replace('{ name = "x", shape = "n"',
                                             '{ name = "x", dtype = "float64", shape = "n"'))
    assert goal_key(Goal.load(toml)) != goal_key(scale)


def test_stored_expected_outputs_are_identified_by_their_values(tmp_path, scale):
    toml = tmp_path / "scale" / "goal.toml"
    text = toml.read_text().replace('reference = "reference.py:scale"', 'expected = "out.npz"')
    toml.write_text(text)
    y = np.arange(5000, dtype=np.float64)
    np.savez(tmp_path / "scale" / "out.npz", y=y)
    first = goal_key(Goal.load(toml))
    np.savez(tmp_path / "scale" / "out.npz", y=y)  # saved again: other zip times, same values
    assert goal_key(Goal.load(toml)) == first
    np.savez(tmp_path / "scale" / "out.npz", y=y + 1)
    assert goal_key(Goal.load(toml)) != first


def test_an_unreadable_reference_still_separates_kernels(tmp_path, scale, saxpy):
    readable = goal_key(scale)
    for name in ("scale", "saxpy"):
        (tmp_path / name / "reference.py").unlink()
    lost_scale, lost_saxpy = goal_key(Goal.load(scale.source_path)), goal_key(Goal.load(saxpy.source_path))
    assert lost_scale != lost_saxpy
    assert lost_scale != readable  # not the readable key: the content is unknown


def test_an_imported_vector_add_is_not_listed_under_another_kernel(tmp_db, tmp_path, saxpy):
    from app.kt_import.importer import import_script

    script = tmp_path / "vector_add.py"
    script.write_text(textwrap.dedent('''
        import numpy as np
        from kernel_tuner import tune_kernel
        kernel = """
        void vector_add(float *c, const float *a, const float *b, int n) {
            for (int i = 0; i < n; i++) c[i] = a[i] + b[i];
        }
        """
        size = 5000
        a = np.random.randn(size).astype(np.float32)
        b = np.random.randn(size).astype(np.float32)
        c = np.zeros_like(b)
        tune_kernel("vector_add", kernel, size, [c, a, b, np.int32(size)], {"block": [1, 2]},
                    lang="C", answer=[a + b, None, None, None])
    '''))
    vector_add = Goal.load(import_script(script, tmp_path / "imported").goal_path)
    assert (vector_add.backend, vector_add.dtype, vector_add.shapes) == (
        saxpy.backend, saxpy.dtype, saxpy.shapes)
    with Store(tmp_db) as store:
        mine = store.create_run(saxpy, {"name": "cpu0"})
        store.record_evaluation(mine, 1, _evaluation("s1", "// saxpy"), 1.0, 1.0)
        theirs = store.create_run(vector_add, {"name": "cpu0"})
        runs = {r["id"]: r for r in store.list_runs()}
        assert runs[mine]["goal_key"] != runs[theirs]["goal_key"]
        assert runs[mine]["goal_id"] != runs[theirs]["goal_id"]
        assert store.runs_elsewhere(vector_add, "", "cpu0", include_device=True) == []


def test_a_goal_the_window_ran_without_a_file_is_keyed_by_its_reference_content(tmp_path, scale):
    """The window's own-kernel page may run a goal never saved: its paths are absolute, and the
    migration (which knows no goal directory for it) still reads them."""
    where = tmp_path / "scale"
    text = (where / "goal.toml").read_text()
    for name in ("kernel.c", "reference.py"):
        text = text.replace(f'"{name}', f'"{where / name}')
    unsaved = Goal.from_toml(text)
    assert unsaved.source_path == ""
    assert goal_key(unsaved, read_files=False) == goal_key(unsaved) == goal_key(scale)


def test_an_edited_kernel_s_configurations_are_new_candidates(tmp_path, scale):
    """Same problem, but not the same candidates: a key hashes what runs, so a configuration
    measured with the old source is never taken for one of the edited kernel (a resume, the
    board's dedupe and the candidates table all go by key)."""
    from app.gpu.cpu import CpuEvaluator

    config = {"CHUNK": 4}
    with CpuEvaluator(scale) as before:
        old_key = before.space.key(config)
        assert old_key == before.candidate_key(config)  # a template candidate's key is its build
    src = tmp_path / "scale" / "kernel.c"
    src.write_text(src.read_text().replace("2.0f * x[j]", "x[j] + x[j]"))
    edited = Goal.load(tmp_path / "scale" / "goal.toml")
    with CpuEvaluator(edited) as after:
        assert after.space.key(config) != old_key
    with CpuEvaluator(Goal.load(tmp_path / "scale" / "goal.toml")) as again:
        assert again.space.key(config) == after.space.key(config)
