"""A run as one self-contained HTML page: for the screen and for print, with no Qt.

The charts are inline SVG drawn from the stored evaluations (so `kernelswarm export RUN
--format html` works on a machine without a display, and the page looks the same whatever theme
the desktop app uses): convergence with every candidate coloured by agent, the best-so-far
staircase, the baseline and the hardware limit; and the agents' evaluations and improvements.
Figures carry their unit and 3-4 significant digits; timings carry their spread (p10-p90).
"""

from __future__ import annotations

import datetime as dt
import html
import json
import os
import re
import zlib
from typing import Any

from app import __version__
from app.core.noise import ImprovementCount, new_bests
from app.core.types import Evaluation
from app.core.units import format_gain, format_percent, format_value, gain, run_unit
from app.run_summary import RunSummary, hardware_fraction, summarize
from app.swarm.lessons import current_lessons

# One colour per agent, the same in the desktop app (app.ui.theme uses these) and the report;
# an agent not named here gets a spare chosen by its name, so both agree on it too.
AGENT_COLOURS = {"explorer": "#4e79a7", "local": "#f28e2b", "evolution": "#59a14f",
                 "model": "#b07aa1", "llm": "#e15759"}
SPARE_COLOURS = ["#76b7b2", "#edc948", "#ff9da7", "#9c755f", "#bab0ac"]


def agent_colour(agent: str) -> str:
    return AGENT_COLOURS.get(agent) or SPARE_COLOURS[zlib.crc32(agent.encode()) % len(SPARE_COLOURS)]


def spread_percent(percent: float) -> str:
    """'170 %' or '3.5 %' (never '1.7e+02 %')."""
    return f"{percent:.0f} %" if abs(percent) >= 10 else f"{percent:.2g} %"


FAILURE_COLOUR = "#d62728"
CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto;
       max-width: 1040px; color: #1d1d1f; background: #fff; line-height: 1.4; padding: 0 1em; }
h1 { font-weight: 600; font-size: 1.6em; margin-bottom: .2em; }
h2 { font-size: 1.15em; border-bottom: 1px solid #ddd; padding-bottom: .2em; margin-top: 1.6em; }
.meta { color: #555; margin-top: 0; }
table { border-collapse: collapse; margin: .5em 0 1em; font-size: .9em; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: left; vertical-align: top; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.params { font-size: .92em; color: #333; }
th { background: #f4f4f6; font-weight: 600; }
.flag { color: #b00020; font-weight: 600; }
.note { color: #555; font-size: .9em; }
svg { display: block; margin: .5em 0; }
svg text { font-family: inherit; font-size: 12px; fill: #333; }
pre.source { font-size: .8em; border: 1px solid #ddd; padding: .8em; overflow-x: auto;
             background: #fafafa; max-height: 40em; }
@media print { body { margin: 0; max-width: none; } pre.source { max-height: none; }
               h2 { break-after: avoid; } svg, table { break-inside: avoid; } }
"""


def _num(value: float | None) -> str:
    return "—" if value is None else (f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}")


def _table(headers: list[str] | None, rows: list[list[Any]], numeric: set[int] = frozenset(),
           classes: dict[int, str] | None = None) -> str:
    classes = {**{i: "num" for i in numeric}, **(classes or {})}
    head = ("<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in headers) + "</tr></thead>"
            if headers else "")
    body = "".join(
        "<tr>" + "".join(f"<td class='{classes[i]}'>{c}</td>" if i in classes else f"<td>{c}</td>"
                         for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table>{head}<tbody>{body}</tbody></table>"


def _esc(value: Any) -> str:
    return html.escape(str(value))


def _ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    import math

    if hi <= lo:
        return [lo]
    raw = (hi - lo) / count
    step = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * step:
            step *= m
            break
    start = math.ceil(lo / step) * step
    return [start + i * step for i in range(int((hi - start) / step) + 1)]


class _Frame:
    """Where the convergence plot's data go: the plot area and its value range."""

    left, right, top, bottom = 70, 150, 16, 76  # the bottom: ticks, failure marks, title, notes

    def __init__(self, n: int, lo: float, hi: float, width: int, height: int) -> None:
        self.n, self.lo, self.hi, self.width, self.height = n, lo, hi, width, height
        self.w, self.h = width - self.left - self.right, height - self.top - self.bottom

    def x(self, i: float) -> float:
        return self.left + (i - 0.5) / max(self.n, 1) * self.w

    def y(self, v: float) -> float:
        return self.top + (self.hi - v) / (self.hi - self.lo) * self.h

    def below(self, dy: float) -> float:
        return self.top + self.h + dy


def _value_range(ranked: list[float], minimize: bool, baseline: float | None,
                 limit: float | None) -> tuple[float, float]:
    """The bulk of the candidates (a few very slow ones would flatten the staircase that
    matters), the baseline, and the limit when it is near them (a roof 15× above every
    result squeezed them into the bottom tenth), padded; points beyond sit on the edge as
    triangles."""
    bulk = ranked[int(0.9 * (len(ranked) - 1))] if minimize else ranked[int(0.1 * (len(ranked) - 1))]
    values = ([v for v in ranked if v <= bulk] if minimize else [v for v in ranked if v >= bulk]) \
        + ([baseline] if baseline else [])
    lo, hi = min(values), max(values)
    span = (hi - lo) or abs(hi) or 1.0
    if limit and lo - span <= limit <= hi + span:
        lo, hi = min(lo, limit), max(hi, limit)
    pad = (hi - lo) * 0.08 or abs(hi) * 0.05 or 1.0  # room for a label beside an edge line
    return lo - pad, hi + pad


def _axes_svg(f: _Frame, unit: str) -> list[str]:
    parts = [f"<rect x='{f.left}' y='{f.top}' width='{f.w}' height='{f.h}' fill='#fff' stroke='#bbb'/>"]
    for t in _ticks(f.lo, f.hi, 6):
        parts.append(f"<line x1='{f.left}' x2='{f.left + f.w}' y1='{f.y(t):.1f}' y2='{f.y(t):.1f}' "
                     f"stroke='#eee'/><text x='{f.left - 6}' y='{f.y(t) + 4:.1f}' "
                     f"text-anchor='end'>{_num(t)}</text>")
    for t in _ticks(1, f.n):
        if 1 <= t <= f.n:
            parts.append(f"<text x='{f.x(t):.1f}' y='{f.below(16)}' text-anchor='middle'>{_num(t)}</text>")
    parts.append(f"<text x='{f.left + f.w / 2}' y='{f.below(46)}' text-anchor='middle'>evaluation</text>"
                 f"<text transform='translate(14 {f.top + f.h / 2}) rotate(-90)' text-anchor='middle'>"
                 f"objective ({_esc(unit)})</text>")
    return parts


def _reference_svg(f: _Frame, unit: str, baseline: float | None, limit: float | None,
                   minimize: bool) -> list[str]:
    """Baseline and limit as dashed lines, each labelled inside the plot at its own end (the
    baseline on the right, the limit on the left, so close values never print on top of each
    other) on the side of its line the results do not take (a faster time is under the
    baseline, a higher throughput above it; nothing passes the limit) unless that side has no
    room; a white halo keeps dots from crossing the text. A limit far beyond the results is
    not drawn to scale (it flattened them to a line): its label says where it is."""
    parts = []
    for label, value, dash, anchor, lx, above in (
            ("baseline", baseline, "6 4", "end", f.left + f.w - 4, minimize),
            ("limit", limit, "2 3", "start", f.left + 4, not minimize)):
        if not value:
            continue
        text = f"{label} {_esc(format_value(value, unit))}"
        if not f.lo <= value <= f.hi:  # off the range: named at the edge it lies beyond
            edge = f.top + 13 if value > f.hi else f.top + f.h - 5
            text += " (above the range shown)" if value > f.hi else " (below the range shown)"
            parts.append(f"<text x='{lx}' y='{edge}' text-anchor='{anchor}' fill='#555'>{text}</text>")
            continue
        ly = f.y(value)
        room_above, room_below = ly - 16 > f.top, ly + 16 < f.top + f.h
        ty = ly - 4 if (above and room_above) or not room_below else ly + 13
        parts.append(f"<line x1='{f.left}' x2='{f.left + f.w}' y1='{ly:.1f}' y2='{ly:.1f}' "
                     f"stroke='#555' stroke-dasharray='{dash}'/>"
                     f"<text x='{lx}' y='{ty:.1f}' text-anchor='{anchor}' stroke='#fff' "
                     f"stroke-width='3' paint-order='stroke'>{text}</text>")
    return parts


def _points_svg(f: _Frame, ok: list[tuple[int, Evaluation]], colour: dict, unit: str) -> list[str]:
    parts = []
    for i, e in ok:
        tip = f"<title>#{i} {_esc(e.agent)}: {_esc(format_value(e.value, unit))}</title>"
        if f.lo <= e.value <= f.hi:
            parts.append(f"<circle cx='{f.x(i):.1f}' cy='{f.y(e.value):.1f}' r='2.6' "
                         f"fill='{colour[e.agent]}' fill-opacity='.75'>{tip}</circle>")
        else:  # beyond the range: a triangle on the edge, pointing out
            edge, d = (f.top + 1, -5) if e.value > f.hi else (f.top + f.h - 1, 5)
            parts.append(f"<path d='M{f.x(i) - 3:.1f},{edge} L{f.x(i) + 3:.1f},{edge} "
                         f"L{f.x(i):.1f},{edge + d}' fill='{colour[e.agent]}'>{tip}</path>")
    return parts


def _staircase_svg(f: _Frame, ok: list[tuple[int, Evaluation]], minimize: bool) -> str:
    """The best so far; a step beyond the range runs along the plot's edge, never out of it."""
    def y(v: float) -> float:
        return min(max(f.y(v), f.top), f.top + f.h)

    best, path = None, []
    for i, e in ok:
        if best is None or (e.value < best if minimize else e.value > best):
            if best is not None:
                path.append(f"L{f.x(i):.1f},{y(best):.1f}")
            best = e.value
            path.append(("M" if not path else "L") + f"{f.x(i):.1f},{y(best):.1f}")
    path.append(f"L{f.x(f.n):.1f},{y(best):.1f}")
    return f"<path d='{' '.join(path)}' fill='none' stroke='#111' stroke-width='2'/>"


def _failures_svg(f: _Frame, evals: list[Evaluation], clipped: int) -> list[str]:
    """Failures as red marks under the axis; a note under the axis title counts them and the
    points beyond the range."""
    parts = [f"<line x1='{f.x(i):.1f}' x2='{f.x(i):.1f}' y1='{f.below(22)}' y2='{f.below(30)}' "
             f"stroke='{FAILURE_COLOUR}'><title>#{i} {_esc(e.reason)}</title></line>"
             for i, e in enumerate(evals, 1) if not e.ok]
    notes = []
    if parts:
        notes.append(f"<tspan fill='{FAILURE_COLOUR}'>{len(parts)} failed (red marks)</tspan>")
    if clipped:
        notes.append(f"{clipped} outside the range shown (triangles on the edge)")
    if notes:
        parts.append(f"<text x='{f.left}' y='{f.below(66)}'>{' · '.join(notes)}</text>")
    return parts


def _legend_svg(f: _Frame, agents: list[str], colour: dict) -> list[str]:
    legend = [("best so far", "#111")] + [(a or "?", colour[a]) for a in agents]
    parts = []
    for k, (name, c) in enumerate(legend):
        ly = f.top + 14 + 18 * k
        parts.append(f"<rect x='{f.left + f.w + 8}' y='{ly - 8}' width='10' height='10' fill='{c}'/>"
                     f"<text x='{f.left + f.w + 22}' y='{ly + 1}'>{_esc(name)}</text>")
    return parts


def convergence_svg(evals: list[Evaluation], minimize: bool, unit: str,
                    baseline: float | None, limit: float | None,
                    width: int = 960, height: int = 378) -> str:
    """Every correct candidate as a dot coloured by agent, the best-so-far as a staircase,
    failures as red marks under the axis, baseline and limit as labelled lines."""
    ok = [(i + 1, e) for i, e in enumerate(evals) if e.ok and e.value is not None]
    if not ok:
        return "<p class='note'>No correct candidate: nothing to plot.</p>"
    ranked = sorted(e.value for _, e in ok)
    lo, hi = _value_range(ranked, minimize, baseline, limit)
    f = _Frame(len(evals), lo, hi, width, height)
    agents = sorted({e.agent for e in evals})
    colour = {a: agent_colour(a) for a in agents}
    clipped = sum(1 for v in ranked if v > hi or v < lo)
    return "".join([
        (f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
         f"viewBox='0 0 {width} {height}' role='img' aria-label='convergence'>"),
        *_axes_svg(f, unit), *_reference_svg(f, unit, baseline, limit, minimize),
        *_points_svg(f, ok, colour, unit), _staircase_svg(f, ok, minimize),
        *_failures_svg(f, evals, clipped), *_legend_svg(f, agents, colour), "</svg>"])


def agents_svg(agents: dict[str, list[int]], width: int = 640) -> str:
    """Per agent: evaluations (light bar) and improvements clear of the timing noise (dark
    bar), one row each; `agents` maps to [evaluated, failed, clear, within noise]."""
    if not agents:
        return ""
    row, label_w = 34, 110
    height = 28 + row * len(agents)
    most = max(v[0] for v in agents.values()) or 1
    plot_w = width - label_w - 290  # room for the count text after the longest bar
    parts = [(f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
             f"viewBox='0 0 {width} {height}' role='img' aria-label='agents'>"),
             ("<text x='0' y='14'>evaluations (light) and improvements clear of the timing noise "
              "(dark) per agent</text>")]
    for k, (agent, (evaluated, _failed, improved, within)) in enumerate(sorted(agents.items())):
        c = agent_colour(agent)
        y0 = 24 + k * row
        parts.append(f"<text x='0' y='{y0 + 17}'>{_esc(agent or '?')}</text>"
                     f"<rect x='{label_w}' y='{y0 + 4}' width='{evaluated / most * plot_w:.1f}' "
                     f"height='12' fill='{c}' fill-opacity='.35'/>"
                     f"<rect x='{label_w}' y='{y0 + 18}' width='{improved / most * plot_w:.1f}' "
                     f"height='8' fill='{c}'/>"
                     f"<text x='{label_w + evaluated / most * plot_w + 6:.1f}' y='{y0 + 15}'>"
                     f"{evaluated} evaluated, {improved} improved"
                     f"{f' (+{within} within noise)' if within else ''}</text>")
    parts.append("</svg>")
    return "".join(parts)


def _source_html(source: str, language: str) -> str:
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import get_lexer_by_name

        formatter = HtmlFormatter(noclasses=True, style="default", nowrap=True)
        return f"<pre class='source'>{highlight(source, get_lexer_by_name(language), formatter)}</pre>"
    except Exception:  # noqa: BLE001 - plain text is still the source
        return f"<pre class='source'>{_esc(source)}</pre>"


def _catalog_template(backend: str, goal) -> tuple[str, str] | None:
    """(template source, language) of a catalog operator, when the run used one."""
    if not goal.operator:
        return None
    try:
        from app.catalog import get_operator

        op = get_operator(backend, goal.operator)
        return op.template_source(goal.dtype), op.language
    except Exception:  # noqa: BLE001 - an operator renamed since: the configuration still shows
        return None


def _custom_source(run: dict, goal) -> tuple[str, str] | None:
    """(source, language) of a user's kernel: as kept with the run when it started (what ran),
    else (runs stored before that was kept) the file beside the goal, as it is now."""
    kept = (run.get("device") or {}).get("kernel_source")
    if isinstance(kept, dict) and kept.get("text"):
        return str(kept["text"]), str(kept.get("language") or "c")
    if goal.kernel is None:
        return None
    from app.session import kernel_source_record

    now = kernel_source_record(goal).get("kernel_source")
    return (str(now["text"]), str(now["language"])) if now else None


def best_kernel_text(run: dict, goal, best: Evaluation) -> tuple[str, str]:
    """(text, pygments language) of what the best candidate ran: its parameters as the
    #defines the compiler got, then its own source (LLM rewrites), the user's kernel or the
    catalog template; for recorded spaces, its configuration."""
    language = "cuda" if run.get("backend") == "cuda" else "c"
    source = (best.source, language) if best.source \
        else _custom_source(run, goal) or _catalog_template(run.get("backend", ""), goal)
    if source is None:
        return json.dumps(best.config, indent=2), "json"
    text, language = source
    defines = "".join(f"#define {k} {v}\n" for k, v in best.config.items())
    return f"/* parameters of this candidate (passed to the compiler as -D) */\n{defines}\n{text}", language


# ---- paths in a shared report ------------------------------------------------------------------
_PATH_SUFFIX = re.compile(r"^(.*?)(:[A-Za-z_]\w*)?$")  # "ref.py:function", "data.npz:name"


def _portable_path(value: str, base: str) -> str:
    """`value` relative to the goal file's folder; a file elsewhere on the disk by its name
    alone, so a shared report never shows the author's home directory."""
    match = _PATH_SUFFIX.match(value)
    path, suffix = (match.group(1), match.group(2) or "") if match else (value, "")
    if not path or not (os.path.isabs(path) or path.startswith("~")):
        return value
    path = os.path.expanduser(path)
    try:
        rel = os.path.relpath(path, base) if base else ""
        shared = os.path.commonpath([path, base]) if base else os.sep
    except ValueError:  # another drive
        rel, shared = "", os.sep
    keep = rel if rel and os.path.dirname(shared) != shared else os.path.basename(path)
    return keep + suffix


def portable_goal_toml(goal) -> str:
    """The goal as TOML with the paths of the user's files relative to the goal file."""
    from app.goal import Goal

    copy = Goal.from_toml(goal.to_toml())
    base = os.path.dirname(goal.source_path) if goal.source_path else ""
    if copy.space:
        copy.space = _portable_path(copy.space, base)
    table = copy.kernel
    if table is not None:
        if isinstance(table.source, list):
            table.source = [_portable_path(s, base) for s in table.source]
        elif table.source:
            table.source = _portable_path(table.source, base)
        for name in ("reference", "expected", "reference_source", "recorded_space"):
            if getattr(table, name):
                setattr(table, name, _portable_path(getattr(table, name), base))
        for arg in table.args:
            if isinstance(arg.get("file"), str):
                arg["file"] = _portable_path(arg["file"], base)
    return copy.to_toml()


# ---- the page -----------------------------------------------------------------------------------
def _hardware(e: Evaluation, limit: float | None, minimize: bool) -> tuple[float, str] | None:
    return hardware_fraction(e.metrics, e.resources, value=e.value, limit=limit, minimize=minimize)


def _hardware_cell(hw: tuple[float, str] | None, roof_in_header: bool) -> str:
    """The fraction, flagged above the roof; the roof's name too unless the header has it."""
    if hw is None:
        return "—"
    text = _esc(format_percent(hw[0]))
    if hw[0] > 1.0:
        text = f"<span class='flag'>{text}</span>"
    return text if roof_in_header else f"{text} <span class='note'>{_esc(hw[1])}</span>"


def _hardware_head(fractions: list[tuple[float, str] | None]) -> str | None:
    """The roof named once in the column's header when every row has the same one (it was
    repeated on each of 20 rows), else None."""
    roofs = {hw[1] for hw in fractions if hw is not None}
    return f"of the {roofs.pop()}" if len(roofs) == 1 else None


def _summary_rows(run: dict, summary: RunSummary, best: Evaluation | None, evals: list,
                  unit: str) -> list[list[str]]:
    device = run.get("device") or {}
    spread = ""
    if best is not None and best.p10_ms is not None and best.p90_ms is not None and best.time_ms:
        middle = "mean recorded by Kernel Tuner" if run["backend"] == "replay" else "median"
        spread = (f"{_num(best.time_ms)} ms {middle}, p10–p90 {_num(best.p10_ms)}–{_num(best.p90_ms)} ms "
                  f"({spread_percent(100 * (best.p90_ms - best.p10_ms) / best.time_ms)} spread)")
    start = run.get("baseline_value")
    baseline = "— (none measured)"
    if start:
        baseline = (format_value(start, unit) + (f" ({device['baseline']})" if device.get("baseline") else "")
                    + (" measured when the run was resumed" if device.get("baseline_at") == "resume"
                       else " measured at the start of the run"))
    if summary.basis_kind == "final":
        baseline += (f"; re-timed at the end with the best: "
                     f"{format_value(summary.baseline_value, unit)} ({summary.baseline_name or '—'})")
    speed = summary.speedup_text() or "—"
    c_loop = summary.comparison.get("speedup_vs_c_reference")
    if c_loop:
        speed += f"; {c_loop:.2f}× over the plain C loop"
    hardware = _esc(summary.hardware_text() or "—")
    if summary.hardware is not None and summary.hardware[0] > 1.0:
        hardware = (f"<span class='flag'>{hardware} — above the measured roof: suspect, check the "
                    "measurement</span>")
    refused = f", {summary.refused} refused as beyond the hardware roof" if summary.refused else ""
    limit = run.get("limit_value")
    return [
        ["goal", _esc(run["name"])], ["backend", _esc(run["backend"])],
        ["device", _esc(device.get("name", "—"))],
        ["status", _esc(f"{run['status']} ({run.get('reason') or '—'})")],
        ["evaluations", _esc(f"{summary.evaluations} ({summary.succeeded} correct, "
                             f"{summary.failed} failed{refused})")],
        ["best", _esc(format_value(best.value if best else None, unit))],
        ["timing of the best", _esc(spread or "—") + (
            " <span class='flag'>measured while the machine was busy or with a wide spread</span>"
            if best is not None and best.metrics.get("noisy") else "")],
        ["baseline", _esc(baseline)],
        ["speedup", _esc(speed)], *[["", f"<span class='note'>{_esc(n)}</span>"] for n in summary.notes],
        ["of the hardware", hardware],
        ["limit", _esc(format_value(limit, unit) if limit else "— (unknown for this backend)")],
        ["run time", f"{run.get('elapsed_s') or 0:.1f} s" + (
            " simulated (the recorded measurements' times added up)" if run["backend"] == "replay"
            else "")], ["seed", _esc(run.get("seed"))],
    ]


def _failures_html(summary: RunSummary) -> str:
    if not summary.failures:
        return "<p class='note'>None.</p>"
    rows = [[_esc(f.label), f.count,
             (f"<span class='note'>#{f.first_index}</span> " if f.first_index else "")
             + f"<code>{_esc(f.first_message or '—')}</code>"] for f in summary.failures]
    return _table(["kind", "count", "first message"], rows, numeric={1})


def _dethroned_html(summary: RunSummary) -> str:
    """Kept kernels a validation case broke later (the adversary's, or a failure's input)."""
    if not summary.dethroned:
        return ""
    rows = [[f"#{d['index']}", _esc(d["agent"]), f"<b>{_esc(d['label'])}</b>",
             f"<code>{_esc(d['detail'])}</code>"] for d in summary.dethroned]
    return ("<h2>Dethroned: broken by a validation case</h2><p class='note'>Correct when "
            "measured, broken later by an input kept with the goal "
            "(<code>kernelswarm cases</code> lists them); the best moved to the next correct "
            "kernel.</p>" + _table(["evaluation", "agent", "case", "what it did"], rows))


def _profile_html(summary: RunSummary) -> str:
    if not summary.profile or summary.best is None:
        return "<p class='note'>No stage times recorded.</p>"
    total = sum(s for _, s in summary.profile) or 1.0
    rows = [[_esc(name), f"{seconds:.3f} s", f"{100 * seconds / total:.0f} %"]
            for name, seconds in summary.profile]
    return (f"<p class='note'>Evaluation #{summary.best['index']} of the best candidate, "
            f"{total:.2f} s in all.</p>" + _table(["stage", "time", "share"], rows, numeric={1, 2}))


def render_report(store, run_id: int, top: int = 20) -> str:
    run = store.get_run(run_id)
    goal = store.goal_of_run(run_id)
    unit = run_unit(run, goal.objective.metric)
    minimize = goal.objective.minimize
    evals: list[Evaluation] = [e for _, e, _ in store.load_evaluations(run_id)]
    summary = summarize(run, store.evaluation_rows(run_id), unit=unit)
    ok = sorted((e for e in evals if e.ok and e.value is not None),
                key=lambda e: e.value if minimize else -e.value)
    best = ok[0] if ok else None
    baseline, limit = run.get("baseline_value"), run.get("limit_value")
    reference = summary.row_reference  # rows are never rescaled by a later re-timing

    # per agent: evaluated, failed, improvements clear of the noise, new bests inside it
    agents: dict[str, list[int]] = {}
    for e in evals:
        stats = agents.setdefault(e.agent, [0, 0, 0, 0])
        stats[0] += 1
        stats[1] += 0 if e.ok else 1
    bests = new_bests(evals, minimize)  # as `run`, `show` and the window count them
    for b in bests:
        agents[evals[b.row].agent][2 if b.clear else 3] += 1
    improvements = ImprovementCount.of(bests).sentence()

    device = run.get("device") or {}
    fractions = [_hardware(e, limit, minimize) for e in ok[:top]]
    hw_head = _hardware_head(fractions)
    best_rows = []
    for rank, (e, hw) in enumerate(zip(ok[:top], fractions), 1):
        best_rows.append([rank, _esc(format_value(e.value, unit)),
                          _esc(f"{_num(e.p10_ms)}–{_num(e.p90_ms)} ms" if e.p10_ms is not None else "—"),
                          _esc(format_gain(gain(e.value, reference, minimize))),
                          _hardware_cell(hw, hw_head is not None), _esc(e.agent),
                          _esc("  ".join(f"{k}={v}" for k, v in e.config.items()))])
    lessons = current_lessons(store.lessons(run_id=run_id))
    source = ""
    if best is not None:
        text, language = best_kernel_text(run, goal, best)
        command = best.resources.get("compile_command")
        source = (_source_html(text, language)
                  + (f"<p class='note'>Compiled with <code>{_esc(command)}</code></p>" if command else ""))
    gain_head = f"gain vs {summary.row_reference_label}" if summary.row_reference_label else "gain"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>KernelSwarm run {run_id}: {_esc(run['name'])}</title>
<style>{CSS}</style></head><body>
<h1>Run {run_id}: {_esc(run['name'])}</h1>
<p class="meta">{_esc(device.get('name', ''))} · KernelSwarm {__version__} · report of
{dt.datetime.now():%Y-%m-%d %H:%M}</p>
<h2>Summary</h2>{_table(None, _summary_rows(run, summary, best, evals, unit))}
<h2>Failures by kind</h2>{_failures_html(summary)}
{_dethroned_html(summary)}
<h2>Convergence</h2>{convergence_svg(evals, minimize, unit, baseline, limit)}
<h2>Agents</h2><p class="note">{_esc(improvements[0].upper() + improvements[1:])}.</p>
{agents_svg(agents)}
{_table(["agent", "evaluations", "failed", "improvements", "new bests within noise"],
        [[_esc(a), *v] for a, v in sorted(agents.items())], numeric={1, 2, 3, 4})}
<h2>Best candidates</h2>
{_table(["rank", f"objective ({unit})", "p10–p90", gain_head, hw_head or "of the hardware", "agent",
         "parameters"],
        best_rows, numeric={0, 1, 2, 3, 4}, classes={6: "params"})}
<h2>Best kernel</h2>{source or "<p class='note'>No correct candidate.</p>"}
<h2>Where the best's evaluation time went</h2>{_profile_html(summary)}
<h2>Lessons</h2>
{_table(["kind", "lesson"], [[_esc(r["kind"]), _esc(r["text"])] for r in lessons]) if lessons else "<p class='note'>None.</p>"}
<h2>Goal</h2><pre class="source">{_esc(portable_goal_toml(goal))}</pre>
</body></html>
"""
