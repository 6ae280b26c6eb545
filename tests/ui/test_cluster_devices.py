"""The candidates table says which device each candidate ran on, and a
per-device summary (done, failed, best with its unit) shows while evaluations come from several
devices. Evaluations carry resources node/device/device_id as the Ray pool records them; a local
run (no device in resources) looks as before. No Ray needed: real models, widgets and SQLite."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.core.types import Evaluation
from app.goal import Goal, StopRules
from app.ui.candidates import COLUMNS, DEVICE_COLUMN, CandidateTable
from app.ui.device_progress import WORKERS_DIED

GPU0_ID, GPU1_ID = "node-a/gpu 0/NVIDIA A100", "node-b/gpu 1/NVIDIA A100"  # as the pool records
GPU0, GPU1 = "node-a/gpu 0", "node-b/gpu 1"  # as the table shows them: the model is in the tooltip


def _on(where: str | None, i: int, value: float | None, **resources) -> Evaluation:
    device_id = {GPU0: GPU0_ID, GPU1: GPU1_ID}.get(where, where)
    if device_id:
        node, _, rest = device_id.partition("/")
        resources.update(node=node, device=rest.rsplit("/", 1)[-1], device_id=device_id)
    return Evaluation(key=f"k{i}", config={"block_size_x": 32 * i}, ok=value is not None,
                      value=value, reason=None if value is not None else "compile_failed",
                      agent="explorer", resources=resources)


def _cluster_rows() -> list[tuple[int, Evaluation, float]]:
    evs = [_on(GPU0, 1, 2.5), _on(GPU1, 2, 1.75), _on(GPU0, 3, None), _on(GPU0, 4, 2.0),
           _on(GPU1, 5, None), _on(GPU1, 6, 3.0),
           _on(None, 7, None, node="", device="", killed_workers=["node-a pid 1", "node-b pid 2"])]
    return [(i, ev, 0.1 * i) for i, ev in enumerate(evs, start=1)]


def _device_cells(table: CandidateTable) -> dict[str, str]:
    m = table.model
    return {m.evaluation(r).key: m.data(m.index(r, DEVICE_COLUMN)) for r in range(m.rowCount())}


def test_a_cluster_run_shows_each_candidates_device_and_a_per_device_summary(qtbot):
    table = CandidateTable()
    qtbot.addWidget(table)
    table.reset(minimize=True, unit="ms")
    table.show()
    rows = _cluster_rows()
    table.add(rows[:2])  # during the run: the first two results arrive
    table.flush()
    assert not table.view.isColumnHidden(DEVICE_COLUMN)
    assert table.model.headerData(DEVICE_COLUMN, Qt.Horizontal) == "device"
    assert table.view.horizontalHeader().visualIndex(DEVICE_COLUMN) == 2  # beside the agent
    assert table.devices.isVisible()
    assert table.devices.rows_text() == [(GPU0, "1", "0", "2.5 ms"), (GPU1, "1", "0", "1.75 ms")]

    table.add(rows[2:])
    table.flush()
    cells = _device_cells(table)
    assert cells == {"k1": GPU0, "k2": GPU1, "k3": GPU0, "k4": GPU0, "k5": GPU1, "k6": GPU1,
                     "k7": ""}
    assert table.devices.rows_text() == [(GPU0, "3", "1", "2 ms"), (GPU1, "3", "1", "1.75 ms"),
                                         (WORKERS_DIED, "1", "1", "—")]
    # the tooltip names the node and the dead workers; the filter finds a device
    k7 = table.model.view_row_of("k7")
    tip = table.model.data(table.model.index(k7, DEVICE_COLUMN), Qt.ToolTipRole)
    assert "killed its workers: node-a pid 1; node-b pid 2" in tip
    k1 = table.model.view_row_of("k1")
    assert f"device_id: {GPU0_ID}" in table.model.data(table.model.index(k1, DEVICE_COLUMN),
                                                        Qt.ToolTipRole)
    assert table.devices.item(0, 0).toolTip() == GPU0_ID
    table.filter.setText("node-b")  # (the model name is searched too: "a100" finds all)
    assert {table.model.evaluation(r).key for r in range(table.model.rowCount())} == \
        {"k2", "k5", "k6"}
    table.filter.setText("")

    # a best revoked by re-verification: the device's best falls back to its next
    revoked = _on(GPU1, 2, None)
    revoked.reason = "verification_failed"
    assert table.model.replace(revoked)
    assert table.devices.rows_text()[1] == (GPU1, "3", "2", "3 ms")

    # the run's unit arrives (RunStarted): the summary's figures carry it
    table.model.set_unit("GFLOP/s")
    assert table.devices.rows_text()[0][3] == "2 GFLOP/s"


def test_a_local_run_has_no_device_column_and_no_summary(qtbot):
    table = CandidateTable()
    qtbot.addWidget(table)
    table.reset(minimize=True, unit="ms")
    table.show()
    table.add([(i, _on(None, i, 1.0 + i), 0.1) for i in range(1, 6)])
    table.flush()
    assert table.model.rowCount() == 5
    assert table.view.isColumnHidden(DEVICE_COLUMN)
    assert not table.devices.isVisible()
    assert table.model.progress.devices == []
    visible = [COLUMNS[c] for c in range(len(COLUMNS)) if not table.view.isColumnHidden(c)]
    assert visible == list(COLUMNS[:DEVICE_COLUMN])  # the columns a local run always had


def test_one_cluster_device_gets_the_column_but_no_summary(qtbot):
    table = CandidateTable()
    qtbot.addWidget(table)
    table.reset()
    table.show()
    table.add([(i, _on(GPU0, i, 1.0 + i), 0.1) for i in range(1, 4)])
    table.flush()
    assert not table.view.isColumnHidden(DEVICE_COLUMN)
    assert not table.devices.isVisible()
    table.reset()  # the next run is a local one: the column goes again
    table.add([(1, _on(None, 1, 1.0), 0.1)])
    table.flush()
    assert table.view.isColumnHidden(DEVICE_COLUMN)


def test_a_stored_cluster_run_reopened_from_the_history_shows_its_devices(window, qtbot):
    """Evaluations recorded in the real SQLite store with their device, then the run opened
    in the window: the same column and summary as during the run; a local run after it none."""
    store = window.store()
    goal = Goal(name="pnpoly on two GPUs", space="pnpoly_RTX_3090.json.gz",
                stop=StopRules(max_evals=10),
                cluster={"address": "ray://head:10001", "devices": "model:A100"})
    run_id = store.create_run(goal, {"kind": "replay", "name": "cluster"})
    best = None
    for i, ev, elapsed in _cluster_rows():
        if ev.ok:
            best = ev.value if best is None else min(best, ev.value)
        store.record_evaluation(run_id, i, ev, elapsed, best)
    store.finish_run(run_id, "max_evals")
    local_id = store.create_run(Goal(name="pnpoly here", space="pnpoly_RTX_3090.json.gz"),
                                {"kind": "replay", "name": "local"})
    store.record_evaluation(local_id, 1, _on(None, 1, 1.5), 0.1, 1.5)
    store.finish_run(local_id, "max_evals")

    window.open_run(run_id)
    table = window.table
    table.flush()
    assert not table.view.isColumnHidden(DEVICE_COLUMN)
    assert _device_cells(table)["k4"] == GPU0
    assert table.devices.isVisible()
    assert [r[:3] for r in table.devices.rows_text()] == [(GPU0, "3", "1"), (GPU1, "3", "1"),
                                                          (WORKERS_DIED, "1", "1")]
    assert table.devices.rows_text()[0][3].endswith(" ms")

    window.open_run(local_id)
    table.flush()
    assert table.view.isColumnHidden(DEVICE_COLUMN)
    assert not table.devices.isVisible()
