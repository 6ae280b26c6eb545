"""The HTML report's convergence chart as read in a browser (after looking at it in
headless Chromium): the note under the axis never sits on the axis title, the best-so-far never
leaves the plot when the first candidates are beyond the range shown, baseline and limit
labels sit inside the plot at opposite ends (never in the legend's column, never on each
other), and a replay's run time says it is simulated."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from app.core.types import Evaluation
from app.html_report import _summary_rows, convergence_svg
from app.run_summary import RunSummary

SVG = "{http://www.w3.org/2000/svg}"


def _evals() -> list[Evaluation]:
    values = [90.0, 60.0] + [10.0 - 0.02 * i for i in range(60)]  # two far slower starts
    evals = [Evaluation(key=f"k{i}", config={"i": i}, ok=True, value=v, agent="local")
             for i, v in enumerate(values)]
    evals[5] = Evaluation(key="bad", config={}, ok=False, reason="wrong_result", agent="explorer")
    return evals


def _chart(**kw) -> ET.Element:
    return ET.fromstring(convergence_svg(_evals(), True, "ms", kw.get("baseline", 9.5),
                                         kw.get("limit", 9.4)))


def test_notes_sit_below_the_axis_title():
    root = _chart()
    texts = {(t.text or "".join(t.itertext())).strip(): float(t.get("y", 0))
             for t in root.iter(f"{SVG}text") if t.get("y")}
    title_y = texts["evaluation"]
    note_y = next(y for text, y in texts.items() if "failed (red marks)" in text)
    assert "outside the range shown" in next(t for t in texts if "failed" in t)
    assert note_y - title_y >= 14  # a 12 px font: a line apart, not drawn on top of it


def test_best_so_far_stays_inside_the_plot():
    root = _chart()
    rect = root.find(f"{SVG}rect")
    top, bottom = float(rect.get("y")), float(rect.get("y")) + float(rect.get("height"))
    stair = next(p for p in root.iter(f"{SVG}path") if p.get("stroke") == "#111")
    ys = [float(y) for y in re.findall(r"[ML][\d.]+,([\d.]+)", stair.get("d"))]
    assert ys and all(top <= y <= bottom for y in ys), (top, bottom, ys)


def test_reference_labels_inside_the_plot_at_opposite_ends():
    root = _chart()
    rect = root.find(f"{SVG}rect")
    left, right = float(rect.get("x")), float(rect.get("x")) + float(rect.get("width"))
    labels = {t.text.split()[0]: t for t in root.iter(f"{SVG}text")
              if t.text and t.text.split()[0] in ("baseline", "limit")}
    assert set(labels) == {"baseline", "limit"}
    for t in labels.values():
        assert left <= float(t.get("x")) <= right  # not in the legend's column
    assert labels["baseline"].get("text-anchor") == "end" and float(labels["baseline"].get("x")) > right - 10
    assert labels["limit"].get("text-anchor") == "start" and float(labels["limit"].get("x")) < left + 10


def test_a_replays_run_time_says_simulated():
    summary = RunSummary(run_id=1, minimize=True, unit="ms", evaluations=0, succeeded=0,
                         speedup=None, speedup_basis="", basis_kind="", baseline_name="",
                         baseline_value=None, row_reference=None, row_reference_label="", best=None)
    run = {"name": "r", "backend": "replay", "status": "finished", "elapsed_s": 11.9, "seed": 0}
    rows = {r[0]: r[1] for r in _summary_rows(run, summary, None, [], "ms") if r[0]}
    assert rows["run time"].startswith("11.9 s simulated")
    run["backend"] = "cpu"
    rows = {r[0]: r[1] for r in _summary_rows(run, summary, None, [], "ms") if r[0]}
    assert rows["run time"] == "11.9 s"


def test_one_roof_is_named_once_in_the_header():
    from app.html_report import _hardware_cell, _hardware_head

    roof = "L2 roof 124.0 GB/s at 2 threads"
    same = [(0.000778, roof), (0.000753, roof), None]
    assert _hardware_head(same) == f"of the {roof}"
    assert roof not in _hardware_cell(same[0], True) and "%" in _hardware_cell(same[0], True)
    assert _hardware_head([(0.5, roof), (0.4, "DRAM roof 20 GB/s at 1 thread")]) is None
    assert roof in _hardware_cell((0.5, roof), False)
    assert "flag" in _hardware_cell((1.2, roof), True)  # above the roof stays flagged


def _throughput_chart(limit: float) -> ET.Element:
    evals = [Evaluation(key=f"k{i}", config={"i": i}, ok=True, value=v, agent="local")
             for i, v in enumerate([1.58, 1.32, 0.40, 1.34, 0.98, 1.22, 2.02, 1.13])]
    return ET.fromstring(convergence_svg(evals, False, "GB/s", 0.4623, limit))


def test_a_far_roof_does_not_flatten_the_results():
    """A transpose at 2 GB/s under a 28.9 GB/s roof: the results had the bottom tenth."""
    root = _throughput_chart(28.9)
    rect = root.find(f"{SVG}rect")
    top, h = float(rect.get("y")), float(rect.get("height"))
    ys = [float(c.get("cy")) for c in root.iter(f"{SVG}circle")]
    assert max(ys) - min(ys) > 0.6 * h  # the results span most of the plot
    texts = ["".join(t.itertext()) for t in root.iter(f"{SVG}text")]
    assert "limit 28.9 GB/s (above the range shown)" in texts
    dashed = [ln for ln in root.iter(f"{SVG}line") if ln.get("stroke-dasharray") == "2 3"]
    assert dashed == []  # no limit line drawn off scale
    near = _throughput_chart(2.5)  # a roof near the results is drawn to scale
    assert [ln for ln in near.iter(f"{SVG}line") if ln.get("stroke-dasharray") == "2 3"]
    assert top >= 0


def test_labels_sit_on_the_side_results_do_not_take():
    root = _throughput_chart(2.5)  # throughput: results above the baseline, under the limit
    lines = {ln.get("stroke-dasharray"): float(ln.get("y1")) for ln in root.iter(f"{SVG}line")
             if ln.get("stroke-dasharray")}
    labels = {t.text.split()[0]: float(t.get("y")) for t in root.iter(f"{SVG}text")
              if t.text and t.text.split()[0] in ("baseline", "limit")}
    assert labels["baseline"] > lines["6 4"]  # under the baseline (SVG y grows downwards)
    assert labels["limit"] < lines["2 3"]  # above the limit
