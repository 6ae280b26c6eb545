"""The run's one speedup (app.run_summary) in the window: the same at the end of a live run and
when it is reopened, stated with its basis; a refusal beyond the hardware roof is its own
category with both figures."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.core.types import SUSPECT, Evaluation, Stage
from app.gpu.cpu import find_compiler
from app.store import Store


@pytest.mark.slow  # a real CPU run: three compiles, verified and timed, and the final re-timing
@pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")
def test_one_speedup_live_at_the_end_and_reopened(qtbot, window):
    from app.goal import Goal, StopRules, SwarmSettings
    from app.run_summary import summarize_store

    goal = Goal(name="softmax speedup", operator="softmax", backend="cpu", shapes=[[16, 80]],
                stop=StopRules(max_evals=3), swarm=SwarmSettings(agents=["explorer"], workers=1))
    with qtbot.waitSignal(window.controller.finished, timeout=180_000):
        window._start(goal, None, "softmax — starting…")
    run_id = window.current_run_id
    with Store(window.db_path) as store:
        summary = summarize_store(store, run_id)
    assert summary.speedup and summary.basis_kind in ("final", "start")

    def shown():
        window.live.redraw()
        return (window.live.counters["speedup"].text(), window.live.summary_panel.lines()[0])

    expected = (f"{summary.speedup:.2f}×", f"Speedup {summary.speedup_text()}")
    window.live.redraw()
    assert window.live.counters["speedup"].text() == expected[0]
    assert shown() == expected  # live, at the end
    assert summary.speedup_basis in window.live.counters["speedup"].toolTip()
    window.open_run(run_id)
    assert shown() == expected  # reopened from the history

    # a candidate's own figures say what they are against: no bare numpy_ms beside them
    best = window.table.model.best
    window.table.select_key(best.key)
    text = window.detail.summary.toPlainText()
    assert "numpy_ms" not in text and "numpy timed beside it" in text
    assert "vs numpy" in window.detail.header.text()


def _refused(index: int) -> tuple[int, Evaluation, float]:
    """A refusal as the CPU backend records it (app.core.types.SUSPECT with both figures)."""
    ev = Evaluation(key=f"refused{index}", config={"nthreads": 4}, ok=False, reason=SUSPECT,
                    detail="measured 47.63 ms, faster than the hardware allows",
                    agent="explorer",
                    metrics={"measured_ms": 47.63, "roof_ms": 127.9},
                    resources={"roof": "DRAM roof 12.1 GB/s at 4 threads"},
                    stages=[Stage("verify", True, 0.2, "2 checks passed"),
                            Stage("time", False, 1.5, "beyond the roof")])
    return index, ev, float(index)


def _ok(index: int) -> tuple[int, Evaluation, float]:
    ev = Evaluation(key=f"ok{index}", config={"nthreads": 1}, ok=True, value=120.0,
                    time_ms=120.0, agent="explorer",
                    metrics={"fraction_of_roof": 0.42, "fraction_of_copy_bandwidth": 0.9},
                    resources={"roof": "DRAM roof 12.1 GB/s at 1 threads"})
    return index, ev, float(index)


def test_a_refusal_beyond_the_roof_is_its_own_category(qtbot, window):
    rows = [_ok(1), _refused(2), _refused(3)]
    window.table.add(rows)
    window.table.flush()
    window.live.on_evaluated([type("E", (), {"index": i, "evaluation": e, "elapsed_s": t})()
                              for i, e, t in rows])
    model = window.table.model
    row = model.view_row_of("refused2")
    status, fraction = (model.data(model.index(row, c)) for c in (2, 5))
    assert status == "refused: beyond roof" and fraction == "refused ⚠"
    tip = model.data(model.index(row, 2), Qt.ToolTipRole)
    assert "47.63 ms" in tip and "127.9 ms" in tip and "at 4 threads" in tip
    # one fraction for the honest row, named by its roof (not the copy-bandwidth one)
    ok_row = model.view_row_of("ok1")
    assert model.data(model.index(ok_row, 5)) == "42.0%"
    assert "at 1 threads" in model.data(model.index(ok_row, 5), Qt.ToolTipRole)

    # a filter of its own
    window.table.status.setCurrentIndex(window.table.status.findData("refused"))
    assert model.rowCount() == 2

    # the run's summary panel counts them apart, with both figures
    lines = window.live.summary_panel.lines()
    assert any(line.startswith("2 refused as beyond the hardware roof: measured 47.63 ms")
               and "127.9 ms" in line for line in lines), lines
    # and the candidate view says so
    window.detail.show_evaluation(rows[1][1])
    assert "refused" in window.detail.header.text()
    checks = window.detail.verification.toPlainText()
    assert "Refused as beyond the hardware roof" in checks and "127.9 ms" in checks
