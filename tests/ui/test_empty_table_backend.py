"""Before any run, the empty candidate table's CUDA-only columns (registers, shared memory)
follow the goal form's backend (a CPU or replay goal showed them until its run
started); once a run is started or reopened, that run's backend decides."""

from __future__ import annotations

from app.goal import Goal
from app.paths import resources_dir
from app.ui.candidates import RESOURCE_COLUMNS


def _resources_shown(window) -> list[bool]:
    return [not window.table.view.isColumnHidden(c) for c in RESOURCE_COLUMNS]


def _choose_backend(window, backend: str) -> None:
    combo = window.form.backend
    index = combo.findData(backend)
    assert index >= 0, backend
    combo.setCurrentIndex(index)


def test_the_empty_table_follows_the_forms_backend(qtbot, window):
    _choose_backend(window, "cpu")
    assert _resources_shown(window) == [False, False]
    _choose_backend(window, "cuda")
    assert _resources_shown(window) == [True, True]
    _choose_backend(window, "replay")
    assert _resources_shown(window) == [False, False]
    window.form.set_goal(Goal.load(resources_dir() / "goals" / "cuda_softmax.toml"))
    assert _resources_shown(window) == [True, True]
    window.form.set_goal(Goal.load(resources_dir() / "goals" / "cpu_softmax.toml"))
    assert _resources_shown(window) == [False, False]


def test_a_new_window_matches_its_default_goal(qtbot, window):
    """The form opens on a recorded space (replay): the table opens without them."""
    assert window.form.backend.currentData() == "replay"
    assert _resources_shown(window) == [False, False]


def test_a_run_started_or_reopened_keeps_its_own_backend(qtbot, window, replay_goal, run_headless):
    from app.store import Store

    goals = resources_dir() / "goals"
    window._prepare_views(Goal.load(goals / "cuda_softmax.toml"), "cuda")  # a CUDA run starts
    _choose_backend(window, "cpu")  # the form is edited for the next goal
    assert _resources_shown(window) == [True, True]
    with Store(window.db_path) as store:
        run_id = run_headless(store, replay_goal(max_evals=8))
    window.open_run(run_id)  # a replay run reopened while the form says cuda
    _choose_backend(window, "cuda")
    assert _resources_shown(window) == [False, False]
