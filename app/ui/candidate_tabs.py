"""The text of the candidate view's Summary, Log and Checks tabs (plain functions of one
evaluation). Figures come from app.run_summary, so a candidate carries one fraction of the
hardware named by its roof, a refusal shows both figures, and the stage profile is the one
`show` prints."""

from __future__ import annotations

import html
import json

from app.core.types import SUSPECT, Evaluation
from app.run_summary import LABELS, hardware_fraction, refusal_text, stage_profile
from app.ui.candidate_source import compile_command, compiler_output
from app.ui.metric_labels import metric_row, resource_row

# Metrics said once elsewhere in the Summary tab (the one fraction of the hardware, a
# refusal's figures, what was timed beside the candidate): not repeated as raw keys.
_FRACTION_KEYS = {"fraction_of_roof", "fraction_of_copy_bandwidth", "percent_of_limit",
                  "roof_gbs", "roof_threads", "measured_ms", "roof_ms"}
_RESOURCE_SHOWN = {"roof", "roof_level", "compile_command"}


def _beside(metrics: dict) -> list[tuple[str, float, float | None]]:
    """(name, ms, speedup) of each baseline timed in the same measurement as the candidate
    (the cascade's `<name>_ms` with its `speedup_vs_<name>`)."""
    out = []
    for k, v in sorted(metrics.items()):
        if k.endswith("_ms") and k not in ("time_ms", "measured_ms", "roof_ms") \
                and isinstance(v, (int, float)):
            name = k[:-3]
            out.append((name, float(v), metrics.get(f"speedup_vs_{name}")))
    return out


def _rows_html(rows: list[tuple[str, object]]) -> str:
    return "<table cellpadding=2>" + "".join(
        f"<tr><td><b>{html.escape(str(k))}</b></td><td>{html.escape(str(v))}</td></tr>"
        for k, v in rows) + "</table>"


def hardware_text(ev: Evaluation, limit: float | None = None, minimize: bool = True) -> str:
    """'20.8 % of the DRAM roof 12.1 GB/s at 4 threads', or ''."""
    hw = hardware_fraction(ev.metrics, ev.resources, value=ev.value if ev.ok else None,
                           limit=limit, minimize=minimize) if ev.ok else None
    if hw is None:
        return ""
    fraction, label = hw
    return f"{100 * fraction:.3g} % of the {label}"


def profile_html(ev: Evaluation) -> str:
    """Where the evaluation's time went, stage by stage (app.run_summary.stage_profile)."""
    profile = stage_profile(ev)
    if not profile:
        return ""
    total = sum(s for _, s in profile) or 1.0
    rows = "".join(
        f"<tr><td>{html.escape(name)}</td><td align=right>{seconds:.3f} s</td>"
        f"<td align=right>{100 * seconds / total:.0f} %</td></tr>" for name, seconds in profile)
    return (f"<h4>Where the time went ({total:.2f} s)</h4>"
            f"<table cellpadding=2 cellspacing=0>{rows}</table>")


def summary_html(ev: Evaluation, *, speedup_text: str = "", limit: float | None = None,
                 minimize: bool = True) -> str:
    rows: list[tuple[str, object]] = [
        ("key", ev.key), ("agent", ev.agent), ("parent", ev.parent_key or "—"),
        ("status", "ok" if ev.ok else LABELS.get(ev.reason or "", ev.reason or "failed")),
        ("detail", ev.detail or "—"),
        ("median / p10 / p90 (ms)", " / ".join("—" if v is None else f"{v:.4g}"
                                                for v in (ev.time_ms, ev.p10_ms, ev.p90_ms)))]
    if speedup_text:
        rows.append(("speedup", speedup_text))
    hardware = hardware_text(ev, limit, minimize)
    if hardware:
        rows.append(("of the hardware", hardware))
    if not ev.ok and ev.reason == SUSPECT:
        rows.append(("refused as beyond the hardware roof",
                     refusal_text(ev.metrics, ev.resources) or ev.detail or "—"))
    shown = set(_FRACTION_KEYS)
    for name, ms, factor in _beside(ev.metrics):
        shown |= {f"{name}_ms", f"speedup_vs_{name}"}
        rows.append((f"{name} timed beside it", f"{ms:.4g} ms" + (
            f" ({factor:.2f}× in that same measurement)" if factor else "")))
    # by name: the store keeps these sorted, so a reopened run reads like the live one
    rows += [metric_row(k, v) for k, v in sorted(ev.metrics.items()) if k not in shown]
    rows += [resource_row(k, v) for k, v in sorted(ev.resources.items()) if k not in _RESOURCE_SHOWN]
    rows += [(f"parameter {k}", v) for k, v in ev.config.items()]
    return _rows_html(rows) + profile_html(ev)


def log_text(ev: Evaluation, recorded: bool) -> str:
    """The compiler command and its own output, then each stage's time and detail."""
    if recorded:
        lines = [("Recorded measurement: compiled when the space was recorded "
                  "(no compiler command or output kept).")]
    else:
        command = compile_command(ev)
        output = compiler_output(ev)
        compiled = next((s for s in ev.stages if s.name in ("compile", "build")), None)
        lines = ["Compiler command:", f"  {command}" if command else "  not recorded", "",
                 "Compiler output:"]
        if output:
            lines.append(output)
        elif compiled is not None and compiled.ok:
            lines.append("  none: it compiled without a message")
        else:
            lines.append("  not recorded")
    if ev.stages:
        lines += ["", "Stages:"]
        lines += [f"{'✔' if s.ok else '✘'} {s.name:<14} {s.seconds * 1000:9.1f} ms  {s.detail}"
                  for s in ev.stages]
    return "\n".join(lines)


def checks_html(ev: Evaluation, recorded: bool) -> str:
    """Every stage the candidate went through with its outcome and detail, then what the
    verification measured and a failing input."""
    if recorded and not ev.stages:
        return ("<p><i>A recorded measurement: it was verified when the space was recorded."
                "</i></p>")
    parts = []
    if not ev.ok:
        label = LABELS.get(ev.reason or "", (ev.reason or "failed").replace("_", " "))
        what = refusal_text(ev.metrics, ev.resources) if ev.reason == SUSPECT else ""
        parts.append(f"<p><b>{html.escape(label.capitalize())}</b>: "
                     f"{html.escape(what or ev.detail or '')}</p>")
    if ev.stages:
        parts.append("<table cellpadding=3>" + "".join(
            f"<tr><td>{'✔' if s.ok else '✘'}</td><td>{html.escape(s.name)}</td>"
            f"<td align=right>{s.seconds * 1000:.0f} ms</td><td>{html.escape(s.detail)}</td></tr>"
            for s in ev.stages) + "</table>")
        if not any("verif" in s.name for s in ev.stages):
            parts.append("<p><i>Not verified: it stopped before verification.</i></p>")
    errors = {k: v for k, v in ev.metrics.items() if "err" in k}
    if errors:
        parts.append("<p>" + ", ".join(f"{html.escape(k)} = {v:.3g}" for k, v in errors.items())
                     + "</p>")
    if ev.failing_case:
        parts.append("<h4>Failing input (kept in the goal's validation set)</h4><pre>"
                     + html.escape(json.dumps(ev.failing_case, indent=2)) + "</pre>")
    return "".join(parts) or "<p><i>No checks recorded for this candidate.</i></p>"
