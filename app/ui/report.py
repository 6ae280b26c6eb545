"""Exports from the GUI: best kernel source, plot images (pyqtgraph exporters) and the data
formats of app.export (CSV, T4, JSON, the HTML report of app.html_report)."""

from __future__ import annotations

import json
from pathlib import Path

import pyqtgraph as pg
import pyqtgraph.exporters

from app import __version__
from app.export import render, write_atomic
from app.gpu.registry import backend_names, backend_spec


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
