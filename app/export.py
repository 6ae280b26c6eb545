"""Export a stored run: JSON (everything), CSV (one row per evaluation, parameters as columns)
and T4, the autotuning community's results schema (as written by Kernel Tuner), so other
tuning tools can read our runs."""

from __future__ import annotations

import csv
import io
import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from app import __version__
from app.core.types import (
    COMPILE_FAILED,
    CRASH,
    INVALID,
    OUT_OF_MEMORY,
    RESOURCE_LIMIT,
    RUNTIME_FAILED,
    STATIC_CHECK,
    TIMEOUT,
    VERIFY_FAILED,
)
from app.core.units import run_unit
from app.run_summary import summarize
from app.store import Store

FORMATS = ("json", "csv", "t4", "html")
T4_SCHEMA_PATH = Path(__file__).resolve().parent / "store" / "t4_schema.json"
T4_VERSION = "1.0.0"

# T4 "invalidity" for each of our failure reasons.
_T4_INVALIDITY = {
    COMPILE_FAILED: "compile", RUNTIME_FAILED: "runtime", CRASH: "runtime",
    OUT_OF_MEMORY: "runtime", RESOURCE_LIMIT: "constraints", INVALID: "constraints",
    STATIC_CHECK: "constraints", VERIFY_FAILED: "correctness", TIMEOUT: "timeout",
}
# Our evaluation stages -> T4 "times" fields (milliseconds).
_T4_STAGE_TIMES = {"compile": "compilation_time", "verify": "validation", "reverify": "validation",
                   "time": "benchmark", "benchmark": "benchmark"}

_CSV_FIELDS = ["index", "run_id", "key", "agent", "ok", "value", "reason", "detail", "time_ms",
               "p10_ms", "p90_ms", "elapsed_s", "best_so_far", "sim_seconds"]


def _iso(ts: float | None) -> str | None:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat() if ts else None


def _run_summary(store: Store, run_id: int, metric: str) -> dict[str, Any]:
    run = store.get_run(run_id)
    run.pop("goal_toml", None)
    run["unit"] = run_unit(run, metric)  # the objective's unit, as the run decided it
    run["started"] = _iso(run["started_at"])
    run["finished"] = _iso(run["finished_at"])
    return run


def export_json(store: Store, run_id: int) -> dict[str, Any]:
    """The run, its summary (its one speedup and basis, failures by kind), its goal and every
    evaluation, lesson and telemetry reading."""
    goal = store.goal_of_run(run_id)
    run = _run_summary(store, run_id, goal.objective.metric)
    rows = store.evaluation_rows(run_id)
    return {
        "kernelswarm_version": __version__,
        "run": run,
        "summary": summarize(run, rows, unit=run["unit"]).to_dict(),
        "goal": goal.to_dict(),
        "evaluations": rows,
        "lessons": store.lessons(run_id=run_id),
        "telemetry": store.telemetry(run_id),
    }


def export_csv(store: Store, run_id: int) -> str:
    rows = store.evaluation_rows(run_id)
    params: list[str] = []
    metrics: list[str] = []
    for r in rows:
        params += [p for p in r["config"] if p not in params]
        metrics += [m for m in r["metrics"] if m not in metrics]
    # A parameter named like a fixed column ("value", "key") gets a prefix instead of clobbering it.
    param_cols = {p: (f"param_{p}" if p in _CSV_FIELDS else p) for p in params}
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    header = _CSV_FIELDS + list(param_cols.values()) + [f"metric_{m}" for m in metrics]
    writer.writerow([csv_cell(h) for h in header])
    for r in rows:
        writer.writerow([csv_cell(v) for v in [r[f] for f in _CSV_FIELDS]
                         + [r["config"].get(p, "") for p in params]
                         + [r["metrics"].get(m, "") for m in metrics]])
    return out.getvalue()


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n", "\uff1d", "\uff0b", "\uff0d", "\uff20")
_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def csv_cell(value: Any) -> Any:
    """A cell a spreadsheet will not run (OWASP CSV injection): text from a history, which may
    be a colleague's database, that begins with = + - @ (or a tab or line break) gets a leading
    apostrophe; numbers, and text that is just a number, stay as they are."""
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    text = str(value)
    if text.startswith(_FORMULA_START) and not _PLAIN_NUMBER.fullmatch(text):
        return "'" + text
    return text


def export_t4(store: Store, run_id: int) -> dict[str, Any]:
    """Results in the T4 schema (TuningSchema results-schema 1.0.0, times in milliseconds)."""
    run = store.get_run(run_id)
    goal = store.goal_of_run(run_id)
    metric = goal.objective.metric
    unit = run_unit(run, metric)
    results = []
    for r in store.evaluation_rows(run_id):
        times: dict[str, Any] = {"runtimes": list(r["samples_ms"])}
        for stage in r["stages"]:
            name = _T4_STAGE_TIMES.get(stage["name"])
            if name:
                times[name] = times.get(name, 0.0) + float(stage["seconds"]) * 1000.0
        times.setdefault("compilation_time", 0.0)
        measurements = [{"name": metric, "value": r["value"] if r["ok"] else (r["reason"] or "failed"),
                         "unit": unit if r["ok"] else ""}]
        for name, value in r["metrics"].items():
            measurements.append({"name": name, "value": value,
                                 "unit": "ms" if name.endswith("time") else ""})
        results.append({
            "timestamp": _iso(r["created_at"]),
            "configuration": dict(r["config"]),
            "objectives": [metric],
            "times": times,
            "invalidity": "correct" if r["ok"] else _T4_INVALIDITY.get(r["reason"], "runtime"),
            "correctness": 0 if r["reason"] == VERIFY_FAILED else 1,
            "measurements": measurements,
        })
    return {
        "schema_version": T4_VERSION,
        "metadata": {"timeunit": "milliseconds", "tool": f"KernelSwarm {__version__}",
                     "run_id": run_id, "goal": goal.name, "backend": goal.backend,
                     "device": run["device"], "objective": metric,
                     "direction": "minimize" if goal.objective.minimize else "maximize"},
        "results": results,
    }


def t4_schema() -> dict[str, Any]:
    return json.loads(T4_SCHEMA_PATH.read_text(encoding="utf-8"))


def render(store: Store, run_id: int, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(export_json(store, run_id), indent=2, default=str) + "\n"
    if fmt == "csv":
        return export_csv(store, run_id)
    if fmt == "t4":
        return json.dumps(export_t4(store, run_id), indent=2, default=str) + "\n"
    if fmt == "html":
        from app.html_report import render_report

        return render_report(store, run_id)
    raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")


def write_atomic(path: str | Path, text: str) -> None:
    """Write beside the target, then rename: a failed export never leaves half a file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
