"""The GUI's parts on their own: the event bridge, chunked plotting, theme and settings,
the exception dialog and log, the About versions, and the None-refcount guard."""

from __future__ import annotations

import logging
import sys
import threading

import numpy as np
from PySide6.QtCore import QAbstractTableModel, QModelIndex, QSettings, QSortFilterProxyModel, Qt

from app.core.events import Evaluated, EventBus, RunFinished, RunStarted
from app.core.types import Evaluation


def _evaluated(i: int) -> Evaluated:
    ok = i % 5 != 0
    ev = Evaluation(key=f"k{i}", config={"x": i}, ok=ok, value=float(100 - i % 50) if ok else None,
                    reason=None if ok else "compile_failed", agent=("explorer", "local")[i % 2])
    return Evaluated(index=i, evaluation=ev, elapsed_s=i * 0.1, best_value=None)


def test_bridge_batches_engine_events_in_order(qtbot):
    from app.ui.bridge import EventBridge

    bridge = EventBridge()
    bus = EventBus()
    bridge.attach(bus)
    batches: list[list[Evaluated]] = []
    order: list[str] = []
    bridge.evaluated.connect(lambda b: (batches.append(b), order.append("evals")))
    bridge.runStarted.connect(lambda _e: order.append("started"))
    bridge.runFinished.connect(lambda _e: order.append("finished"))
    received_on: list[threading.Thread] = []
    bridge.evaluated.connect(lambda _b: received_on.append(threading.current_thread()))

    def engine() -> None:
        bus.publish(RunStarted(goal_name="g", backend="replay", agents=["explorer"], max_evals=2000,
                               time_budget_s=None))
        for i in range(1, 2001):
            bus.publish(_evaluated(i))
        bus.publish(RunFinished(reason="max_evals", evaluations=2000, best=None, elapsed_s=1.0))

    t = threading.Thread(target=engine)
    with qtbot.waitSignal(bridge.runFinished, timeout=10000):
        t.start()
    t.join()
    got = [e.index for b in batches for e in b]
    assert got == list(range(1, 2001))  # every event, in order
    assert len(batches) < 2000  # batched, not one signal per event
    assert order[0] == "started" and order[-1] == "finished"
    assert all(th is threading.main_thread() for th in received_on)  # widgets run on the GUI thread
    bridge.detach()
    bus.publish(_evaluated(1))
    assert len(bus._subs) == 0


def test_convergence_freezes_full_chunks_and_keeps_every_point(qtbot, monkeypatch):
    from PySide6.QtWidgets import QGraphicsItem

    from app.ui.buffers import RunData
    from app.ui.live_view import ConvergencePlot
    from app.ui.theme import LIGHT

    monkeypatch.setattr(ConvergencePlot, "CHUNK", 300)
    plot = ConvergencePlot()
    qtbot.addWidget(plot)
    data = RunData(minimize=True)
    for start in range(1, 1001, 97):  # uneven batches, as a run delivers them
        batch = [(e.index, e.evaluation, e.elapsed_s) for e in map(_evaluated, range(start, min(start + 97, 1001)))]
        data.add(batch)
        plot.draw(data, LIGHT)
    ok = int(np.count_nonzero(~np.isnan(data.value.view())))
    assert plot.point_count() == ok == 800
    assert [len(c.data) for c in plot._chunks] == [300, 300, 200]
    modes = [c.cacheMode() for c in plot._chunks]
    assert modes[:-1] == [QGraphicsItem.DeviceCoordinateCache] * 2
    assert modes[-1] == QGraphicsItem.NoCache  # the hot chunk still changes
    plot.set_log_y(True)
    plot.draw(data, LIGHT)
    ys = np.concatenate([c.data["y"] for c in plot._chunks])
    assert np.allclose(np.sort(ys), np.sort(np.log10(data.value.view()[~np.isnan(data.value.view())])))


def test_theme_and_layout_are_restored_from_settings(qtbot, tmp_path):
    from app.ui.main_window import MainWindow
    from app.ui.theme import DARK

    ini = str(tmp_path / "s.ini")
    w = MainWindow(db_path=tmp_path / "h.sqlite", settings=QSettings(ini, QSettings.IniFormat))
    qtbot.addWidget(w)
    w.show()
    w.set_theme("dark")
    assert w.live.convergence.backgroundBrush().color().name() == DARK.background
    w.table_dock.hide()
    w.live.set_use_time(True)
    w.close()

    again = MainWindow(db_path=tmp_path / "h.sqlite", settings=QSettings(ini, QSettings.IniFormat))
    qtbot.addWidget(again)
    again.show()
    assert again.theme.mode == "dark" and again.theme_actions["dark"].isChecked()
    # (exact geometry is clamped to the offscreen screen, so only its presence is checked)
    assert not QSettings(ini, QSettings.IniFormat).value("geometry").isEmpty()
    assert not again.table_dock.isVisible()
    assert again.live.convergence.use_time and again.act_axis.isChecked()
    again.set_theme("light")
    again.close()


def test_uncaught_exception_is_logged_and_reported(qtbot, tmp_path, monkeypatch):
    from app.ui import errors

    monkeypatch.setattr(errors, "log_dir", lambda: tmp_path / "logs")
    path = errors.setup_logging()
    handler = errors.ExceptionHandler(interactive=False)
    old_hook, old_thread_hook = sys.excepthook, threading.excepthook
    handler.install()
    try:
        def boom() -> None:
            raise RuntimeError("kaput in a worker")

        t = threading.Thread(target=boom)
        t.start()
        t.join()
        qtbot.waitUntil(lambda: bool(handler.seen), timeout=3000)
    finally:
        sys.excepthook, threading.excepthook = old_hook, old_thread_hook
        for h in list(logging.getLogger().handlers):
            if getattr(h, "baseFilename", None) == str(path):
                logging.getLogger().removeHandler(h)
                h.close()
    assert handler.seen == ["RuntimeError: kaput in a worker"]
    text = path.read_text()
    assert "kaput in a worker" in text and "Traceback" in text


def test_about_lists_every_version():
    from app.ui.about import NA, versions

    names = dict(versions())
    for key in ("KernelSwarm", "Python", "Qt", "PySide6", "CuPy", "CUDA driver", "GPU"):
        assert names[key]  # a version or "not available", never empty
    assert names["Qt"] != NA and names["Python"].startswith(f"{sys.version_info.major}.")


def test_none_refcount_survives_models_returning_none(qtbot):
    """PySide6 6.12 drops a reference to None whenever C++ gets None from a Python override;
    app.ui guards None so thousands of such calls cannot free it (the interpreter would abort)."""
    import app.ui  # noqa: F401  (installs the guard)

    class Blank(QAbstractTableModel):
        def rowCount(self, parent=QModelIndex()):  # noqa: B008
            return 1

        def columnCount(self, parent=QModelIndex()):  # noqa: B008
            return 1

        def data(self, index, role=Qt.DisplayRole):
            return None

    model = Blank()
    proxy = QSortFilterProxyModel()
    proxy.setSourceModel(model)
    before = sys.getrefcount(None)
    for _ in range(5000):
        proxy.data(proxy.index(0, 0), Qt.DecorationRole)
    assert sys.getrefcount(None) > 2**39 or sys.version_info >= (3, 12)
    assert sys.getrefcount(None) > before - 10_000  # still alive and nowhere near zero


def test_llm_settings_page_validates_saves_and_never_writes_a_key(qtbot, tmp_path, monkeypatch):
    from PySide6.QtWidgets import QDialogButtonBox

    from app.llm.settings import LLMSettings
    from app.ui.llm_settings import LLMSettingsDialog

    monkeypatch.setenv("KERNELSWARM_LLM_API_KEY", "sk-test-secret-123456789")
    path = tmp_path / "llm.toml"
    dialog = LLMSettingsDialog(path=path)
    qtbot.addWidget(dialog)
    save = dialog.buttons.button(QDialogButtonBox.Save)
    assert "KERNELSWARM_LLM_API_KEY" in dialog.key_status.text()  # where, never what
    assert "sk-test" not in dialog.key_status.text()

    dialog.base_url.clear()
    qtbot.keyClicks(dialog.base_url, "not a url")
    assert not save.isEnabled() and dialog.error.text().startswith("base_url")
    dialog.base_url.clear()
    qtbot.keyClicks(dialog.base_url, "http://127.0.0.1:11434/v1")
    dialog.model.clear()
    qtbot.keyClicks(dialog.model, "qwen2.5-coder")
    dialog.roles["tiling"].setChecked(False)
    assert save.isEnabled() and dialog.error.text() == ""
    save.click()

    saved = LLMSettings.user(path)
    assert saved.base_url == "http://127.0.0.1:11434/v1" and saved.model == "qwen2.5-coder"
    assert "tiling" not in saved.roles
    assert "sk-test" not in path.read_text()


def test_table_shows_cuda_registers_and_shared_memory(qtbot):
    from app.core.types import Evaluation
    from app.ui.candidates import CandidateTable

    table = CandidateTable()
    qtbot.addWidget(table)
    ev = Evaluation(key="k1", config={"BM": 128}, ok=True, value=1.5, agent="local",
                    resources={"registers": 96, "static_shared_bytes": 4096,
                               "dynamic_shared_bytes": 65536})
    table.add([(1, ev, 0.1)])
    table.flush()
    model = table.model
    assert model.rowCount() == 1
    headers = [model.headerData(c, Qt.Horizontal) for c in range(model.columnCount())]
    regs = model.data(model.index(0, headers.index("registers")))
    smem = model.data(model.index(0, headers.index("shared mem")))
    assert (regs, smem) == ("96", "69632")  # static + dynamic shared memory per block


def test_a_revoked_best_leaves_the_plot_and_table(qtbot):
    """BestRevoked, as the bridge delivers it: the point becomes a failure, best-so-far falls
    back to the next correct candidate, and the table shows the new status."""
    from app.core.events import BestRevoked
    from app.ui.bridge import EventBridge
    from app.ui.candidates import CandidateTable
    from app.ui.live_view import LiveView

    live, table = LiveView(), CandidateTable()
    qtbot.addWidget(live)
    qtbot.addWidget(table)
    rows = [(i + 1, Evaluation(key=f"k{i}", config={"x": i}, ok=True, value=v, agent="local"), 0.1 * i)
            for i, v in enumerate([5.0, 3.0, 1.0, 4.0])]
    live.preload(rows)
    table.add(rows)
    table.flush()
    assert live.data.best_value == 1.0

    bridge = EventBridge()
    failed = Evaluation(key="k2", config={"x": 2}, ok=False, reason="verification_failed",
                        detail="revoked: failed re-verification", agent="local")
    got = []
    bridge.revoked.connect(got.append)
    bridge(BestRevoked(key="k2", evaluation=failed, new_best_value=3.0))
    bridge.drain()
    assert len(got) == 1
    live.on_revoked(got[0].key, got[0].evaluation.reason)
    table.model.replace(got[0].evaluation)

    assert live.data.best_value == 3.0
    assert list(live.data.best.view()) == [5.0, 3.0, 3.0, 3.0]
    assert live.data.failed_by_reason["verification_failed"] == 1
    assert table.model.best.key == "k1" and not table.model.by_key["k2"].ok


def test_live_view_axis_and_report_show_the_runs_unit(qtbot, tmp_path, small_space):
    """A memory-bound throughput run: the plot's axis says GB/s once RunStarted says so, and
    the HTML report of the stored run says GB/s, never GFLOP/s."""
    from app.core.events import EventBus
    from app.goal import Goal
    from app.gpu.replay import ReplayEvaluator, load_cache_file
    from app.html_report import render_report
    from app.session import RunSession
    from app.store import Store
    from app.ui.live_view import LiveView

    live = LiveView()
    qtbot.addWidget(live)
    live.reset(minimize=False, title="t", unit="GFLOP/s")  # the metric's default, before the run
    live.on_run_started(RunStarted(goal_name="g", backend="cpu", agents=["explorer"], max_evals=5,
                                   time_budget_s=None, unit="GB/s"))
    assert live.axis_label() == "objective (GB/s)" and live.unit == "GB/s"

    goal = Goal(name="softmax GB/s", backend="cpu", operator="softmax", shapes=[[64, 256]])
    goal.objective.metric = "throughput"
    goal.stop.max_evals = 5
    goal.swarm.agents, goal.swarm.workers = ["explorer"], 1
    with Store(tmp_path / "h.sqlite") as store:
        session = RunSession(goal, store=store, bus=EventBus(),
                             evaluator=ReplayEvaluator(load_cache_file(small_space)))
        session.run()
        html = render_report(store, session.run_id)
    assert "objective (GB/s)" in html and "GFLOP/s" not in html


def test_the_baseline_line_names_its_library(qtbot):
    """The convergence plot's baseline says which library or compiler it is, live and for a
    stored run."""
    from app.ui.live_view import LiveView

    live = LiveView()
    qtbot.addWidget(live)
    live.reset(minimize=True, title="t", unit="ms")
    live.on_run_started(RunStarted(goal_name="g", backend="cuda", agents=["explorer"], max_evals=5,
                                   time_budget_s=None, baseline_value=0.25, baseline_name="triton:softmax",
                                   unit="ms"))
    live.redraw()
    label = live.convergence._lines["baseline"].label.format
    assert label.startswith("baseline (triton:softmax) 0.25") and label.endswith("ms"), label
    live.show_run([], minimize=True, title="stored", unit="ms", baseline=6.94, baseline_name="numpy")
    assert live.convergence._lines["baseline"].label.format.startswith("baseline (numpy) 6.94")
    live.show_run([], minimize=True, title="older run", unit="ms", baseline=6.94)
    assert live.convergence._lines["baseline"].label.format.startswith("baseline 6.94")


def test_the_limit_label_sits_where_no_result_can_be(qtbot):
    """The best so far closes in on the hardware limit from one side: a time from above, a
    throughput from below. The limit's label goes on the other side of its line, so it is
    never drawn across the best line (it was, in a CPU run's screenshot under Xvfb)."""
    from app.ui.live_view import LiveView

    live = LiveView()
    qtbot.addWidget(live)
    live.show_run([], minimize=True, title="time", unit="ms", baseline=1.0, limit=0.02)
    limit = live.convergence._lines["limit"]
    assert limit.label.anchors == [(1, 0), (1, 0)]  # hangs below its line
    assert live.convergence._lines["baseline"].label.anchors == [(0, 1), (0, 1)]  # above
    live.show_run([], minimize=False, title="throughput", unit="GB/s", baseline=100.0,
                  limit=900.0)
    assert live.convergence._lines["limit"] is limit  # the same line, reused by the next run
    assert limit.label.anchors == [(1, 1), (1, 1)]  # sits above its line
