"""Past runs: open redraws convergence, compare overlays, exports write files that parse."""

from __future__ import annotations

import csv
import io
import json
from html.parser import HTMLParser

import jsonschema
import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtGui import QImage

from app.export import t4_schema
from app.store import Store


def _history_with_two_runs(window, replay_goal, run_headless):
    store = window.store()
    a = run_headless(store, replay_goal(max_evals=30, seed=1, name="pnpoly A"))
    b = run_headless(store, replay_goal(max_evals=50, seed=2, name="pnpoly A"))
    window.history.refresh()
    return store, a, b


def test_open_past_run_redraws_its_convergence(qtbot, window, replay_goal, run_headless):
    store, a, _ = _history_with_two_runs(window, replay_goal, run_headless)
    item = window.history.item_for_run(a)
    assert item is not None and item.parent().text(0) == "pnpoly A"  # goal -> runs
    window.history.select_runs([a])
    qtbot.mouseClick(window.history.open_button, Qt.LeftButton)
    window.live.redraw()

    conv = store.convergence(a)  # (index, elapsed, value, best_so_far)
    data = window.live.data
    assert len(data) == len(conv) == 30
    assert list(data.index.view()) == [r[0] for r in conv]
    stored_best = np.array([np.nan if r[3] is None else r[3] for r in conv])
    assert np.allclose(data.best.view(), stored_best, equal_nan=True)
    _, y = window.live.convergence._best.getData()
    assert y[-1] == store.get_run(a)["best_value"]
    assert window.table.model.rowCount() == 30
    assert window.current_run_id == a


def test_compare_overlays_two_runs(qtbot, window, replay_goal, run_headless):
    store, a, b = _history_with_two_runs(window, replay_goal, run_headless)
    window.history.select_runs([a, b])
    assert window.history.compare_button.isEnabled()
    qtbot.mouseClick(window.history.compare_button, Qt.LeftButton)
    assert window.tabs.currentWidget() is window.compare
    assert set(window.compare.curves) == {a, b}
    for rid in (a, b):
        _x, y = window.compare.curves[rid].getData()
        assert y[-1] == store.get_run(rid)["best_value"]
    assert len(window.compare.legend.items) == 2


def test_exports_write_files_that_parse(qtbot, window, replay_goal, run_headless, tmp_path):
    from app.ui.report import best_source_text, export_data, export_plot_image

    store, a, _b = _history_with_two_runs(window, replay_goal, run_headless)
    window.open_run(a)
    n = store.get_run(a)["evaluations"]

    report = window.export_report(tmp_path / "report.html")
    text = report.read_text(encoding="utf-8")

    class Counter(HTMLParser):
        imgs, tables = 0, 0

        def handle_starttag(self, tag, attrs):
            if tag == "img" and dict(attrs)["src"].startswith("data:image/png;base64,"):
                self.imgs += 1
            self.tables += tag == "table"

    parsed = Counter()
    parsed.feed(text)
    # the CLI's report (app.html_report): charts are inline SVG, not PNG images of the plots
    assert "<svg" in text and "aria-label='convergence'" in text and parsed.tables >= 4
    assert f"Run {a}" in text

    rows = list(csv.DictReader(io.StringIO(export_data(store, a, "csv", tmp_path / "r.csv").read_text())))
    assert len(rows) == n
    t4 = json.loads(export_data(store, a, "t4", tmp_path / "r.t4.json").read_text())
    jsonschema.validate(t4, t4_schema())
    assert len(t4["results"]) == n

    source, suffix = best_source_text(store, a)
    assert suffix == ".json"  # recorded spaces have no source: the configuration is exported
    assert json.loads(source)["value"] == store.get_run(a)["best_value"]

    png = export_plot_image(window.live.convergence, tmp_path / "conv.png", width=800)
    image = QImage(str(png))
    assert not image.isNull() and image.width() == 800


def test_delete_run_after_confirm(qtbot, window, replay_goal, run_headless, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    _, a, b = _history_with_two_runs(window, replay_goal, run_headless)
    window.history.select_runs([a])
    monkeypatch.setattr(QMessageBox, "question", lambda *args, **kw: QMessageBox.Cancel)
    window.history.delete_button.click()
    assert window.history.item_for_run(a) is not None  # cancelled: nothing lost
    monkeypatch.setattr(QMessageBox, "question", lambda *args, **kw: QMessageBox.Yes)
    window.history.delete_button.click()
    assert window.history.item_for_run(a) is None
    assert [r["id"] for r in Store(window.db_path).list_runs()] == [b]
