"""Exports from the GUI: best kernel source, a self-contained HTML run report with the plots,
plot images (pyqtgraph exporters) and the data formats of app.export (CSV, T4, JSON)."""

from __future__ import annotations

import base64
import datetime as dt
import html
import json
import tempfile
from pathlib import Path

import pyqtgraph as pg
import pyqtgraph.exporters

from app import __version__
from app.core.types import Evaluation
from app.core.units import format_gain, format_value, gain, run_unit
from app.export import render, write_atomic
from app.gpu.registry import backend_names, backend_spec
from app.swarm.lessons import current_lessons


def source_suffix(backend: str) -> str:
    """The file suffix for a backend's candidate sources (.c, .cu), .txt when it has none."""
    if backend in backend_names():
        return backend_spec(backend).source_suffix or ".txt"
    return ".txt"


def export_plot_image(plot: pg.PlotWidget, path: str | Path, width: int = 1400) -> Path:
    """PNG (or SVG, by suffix) of a plot through pyqtgraph's exporters."""
    path = Path(path)
    item = plot.getPlotItem()
    if path.suffix.lower() == ".svg":
        exporter = pg.exporters.SVGExporter(item)
    else:
        exporter = pg.exporters.ImageExporter(item)
        exporter.parameters()["width"] = width
    exporter.export(str(path))
    return path


def _png_data_uri(plot: pg.PlotWidget, width: int = 1200) -> str:
    with tempfile.TemporaryDirectory() as d:
        p = export_plot_image(plot, Path(d) / "plot.png", width)
        return "data:image/png;base64," + base64.b64encode(p.read_bytes()).decode()


def best_source_text(store, run_id: int) -> tuple[str, str]:
    """(text, suffix) of the best candidate: its source, or for template configurations (and
    recorded spaces) the configuration as JSON."""
    run = store.get_run(run_id)
    best_key = run.get("best_key")
    if not best_key:
        raise ValueError(f"run {run_id} has no correct candidate yet")
    best = next(e for _, e, _ in store.load_evaluations(run_id) if e.key == best_key)
    if best.source:
        header = (f"// KernelSwarm {__version__}: best candidate of run {run_id} ({run['name']})\n"
                  f"// key {best.key}, agent {best.agent}, objective {best.value}\n"
                  f"// parameters: {json.dumps(best.config)}\n")
        return header + best.source, source_suffix(run["backend"])
    return json.dumps({"run": run_id, "goal": run["name"], "key": best.key, "value": best.value,
                       "configuration": best.config}, indent=2) + "\n", ".json"


def export_data(store, run_id: int, fmt: str, path: str | Path) -> Path:
    write_atomic(path, render(store, run_id, fmt))
    return Path(path)


def _table(headers: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def write_html_report(path: str | Path, store, run_id: int, plots: dict[str, pg.PlotWidget],
                      top: int = 25) -> Path:
    """A single self-contained HTML file: summary, plots (embedded PNG), best candidates,
    failures by reason, agent contributions, lessons."""
    run = store.get_run(run_id)
    goal = store.goal_of_run(run_id)
    unit = run_unit(run, goal.objective.metric)
    rows = store.load_evaluations(run_id)
    evals: list[Evaluation] = [e for _, e, _ in rows]
    ok = [e for e in evals if e.ok and e.value is not None]
    ok.sort(key=lambda e: e.value if goal.objective.minimize else -e.value)
    first = next((e.value for e in evals if e.ok and e.value is not None), None)
    best = ok[0].value if ok else None
    baseline = run.get("baseline_value")
    ref = baseline or first
    speed = gain(best, ref, goal.objective.minimize)

    failures: dict[str, int] = {}
    agents: dict[str, list[int]] = {}
    for e in evals:
        agents.setdefault(e.agent, [0, 0, 0])
        agents[e.agent][0] += 1
        if not e.ok:
            failures[e.reason or "failed"] = failures.get(e.reason or "failed", 0) + 1
            agents[e.agent][1] += 1
    current = None
    for e in evals:  # improvements per agent, in run order
        if e.ok and e.value is not None and (current is None or (
                e.value < current if goal.objective.minimize else e.value > current)):
            current = e.value
            agents[e.agent][2] += 1

    device = run.get("device") or {}
    summary = [
        ["goal", run["name"]], ["backend", run["backend"]],
        ["device", device.get("name", "—")], ["status", f"{run['status']} ({run.get('reason') or '—'})"],
        ["evaluations", run["evaluations"]], ["correct", run["succeeded"]],
        ["best", format_value(best, unit)],
        ["baseline", format_value(baseline, unit) if baseline else "—"],
        ["speedup", f"{format_gain(speed)} over {'baseline' if baseline else 'first correct candidate'}"
         if speed else "—"],
        ["run time", f"{run.get('elapsed_s') or 0:.1f} s"], ["seed", run.get("seed")],
    ]
    params = list(ok[0].config) if ok else []
    best_rows = [[i + 1, f"{e.value:.6g}", e.agent, *[e.config.get(p, "") for p in params]]
                 for i, e in enumerate(ok[:top])]
    images = "".join(
        f"<figure><img alt='{html.escape(name)}' src='{_png_data_uri(plot)}'>"
        f"<figcaption>{html.escape(name)}</figcaption></figure>" for name, plot in plots.items())
    lessons = current_lessons(store.lessons(run_id=run_id))
    doc = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>KernelSwarm run {run_id}: {html.escape(run['name'])}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }}
h1 {{ font-weight: 600; }} h2 {{ border-bottom: 1px solid #ddd; padding-bottom: .2em; }}
table {{ border-collapse: collapse; margin: .5em 0 1.5em; font-size: 0.92em; }}
th, td {{ border: 1px solid #ddd; padding: .3em .6em; text-align: left; }}
th {{ background: #f3f3f3; }} figure {{ margin: 1em 0; }} img {{ max-width: 100%; border: 1px solid #ddd; }}
figcaption {{ color: #666; font-size: .9em; }}
</style></head><body>
<h1>Run {run_id}: {html.escape(run['name'])}</h1>
<p>Generated by KernelSwarm {__version__} on {dt.datetime.now():%Y-%m-%d %H:%M}.</p>
<h2>Summary</h2>{_table(["", ""], summary)}
<h2>Plots</h2>{images or "<p>No plots.</p>"}
<h2>Best candidates ({unit})</h2>{_table(["rank", "objective", "agent", *params], best_rows)}
<h2>Failures by reason</h2>{_table(["reason", "count"], sorted(failures.items(), key=lambda kv: -kv[1]))}
<h2>Agents</h2>{_table(["agent", "evaluations", "failed", "improvements"], [[a, *v] for a, v in agents.items()])}
<h2>Lessons</h2>{_table(["kind", "lesson"], [[l_["kind"], l_["text"]] for l_ in lessons])}
<h2>Goal</h2><pre>{html.escape(goal.to_toml())}</pre>
</body></html>
"""
    write_atomic(path, doc)
    return Path(path)
