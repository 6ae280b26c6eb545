"""The candidate table shows registers and shared memory for CUDA runs only: a CPU
or replay run has no such figures, so the columns would stay empty."""

from __future__ import annotations

from app.goal import Goal
from app.paths import resources_dir
from app.ui.candidates import COLUMNS, RESOURCE_COLUMNS


def _visible(table) -> list[str]:
    return [COLUMNS[c] for c in range(len(COLUMNS)) if not table.view.isColumnHidden(c)]


def test_resource_columns_follow_the_backend(qtbot, window):
    goals = resources_dir() / "goals"
    window._prepare_views(Goal.load(goals / "cpu_softmax.toml"), "cpu")
    assert "registers" not in _visible(window.table) and "shared mem" not in _visible(window.table)
    window._prepare_views(Goal.load(goals / "cuda_softmax.toml"), "cuda")
    assert all(not window.table.view.isColumnHidden(c) for c in RESOURCE_COLUMNS)


def test_a_reopened_replay_run_and_its_playback_hide_them(qtbot, window, replay_goal, run_headless):
    from app.store import Store

    with Store(window.db_path) as store:
        run_id = run_headless(store, replay_goal(max_evals=12))
    window._prepare_views(Goal.load(resources_dir() / "goals" / "cuda_softmax.toml"), "cuda")
    window.open_run(run_id)
    assert all(window.table.view.isColumnHidden(c) for c in RESOURCE_COLUMNS)
    assert window.play_back_run(per_second=100)
    assert all(window.table.view.isColumnHidden(c) for c in RESOURCE_COLUMNS)
    qtbot.waitUntil(lambda: not window.playing_back, timeout=30_000)
