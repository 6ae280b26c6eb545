"""What a run amounts to, worked out once: its speedup with the basis it stands on, its failures
by kind, the best candidate's share of the hardware and where its evaluation time went.

The CLI (`run`'s end summary and `show`), the HTML report and the window all render this one
model, fed with `store.get_run(run_id)` and `store.evaluation_rows(run_id)` (or, live, the same
shapes built in memory), so a run shows one speedup wherever it is looked at. Plain Python: no
Qt, no SQL.

Where the run's facts are kept (in the run's device record, app.session writes them):
  baseline_value      the baseline measured when the run started; stored rows are compared to
                      it and it is never overwritten (a resumed run keeps it)
  device.baseline     which library or compiler that baseline is ("numpy", "triton:softmax")
  device.baseline_at  "resume" when the run had no baseline until a later session measured one
  device.resumes      what each resumed session measured for the baseline (never applied)
  device.final_comparison  the best and the baseline re-timed interleaved at the end of the
                      run: {key, best_value, baseline_value, baseline_name, ...}
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import tomllib

from app.core.types import (
    COMPILE_FAILED,
    CRASH,
    INVALID,
    OUT_OF_MEMORY,
    RESOURCE_LIMIT,
    RUNTIME_FAILED,
    STATIC_CHECK,
    SUSPECT,
    TIMEOUT,
    VERIFY_FAILED,
)
from app.core.units import format_gain, format_value, gain

# What each failure reason means to a user, in a summary line.
LABELS = {
    COMPILE_FAILED: "did not compile",
    VERIFY_FAILED: "wrong results",
    SUSPECT: "refused as beyond the hardware roof",
    TIMEOUT: "timed out",
    CRASH: "crashed",
    RUNTIME_FAILED: "failed at run time",
    RESOURCE_LIMIT: "over a resource limit",
    STATIC_CHECK: "refused by the static check",
    INVALID: "invalid configuration",
    OUT_OF_MEMORY: "out of memory",
}
MESSAGE_CHARS = 300  # a first message is one line; a compiler's can be a screenful
# Boilerplate the cascade puts before the interesting part of a detail.
_PREFIX = re.compile(r"^(compile error|compile|verify|reverify|determinism|runtime error|"
                     r"runtime|crash(ed)?|timeout|static check)\s*:\s*", re.IGNORECASE)
_ERROR_LINE = re.compile(r"\b(fatal )?error\b", re.IGNORECASE)
# Work outside any named stage worth a line of its own in a profile.
UNACCOUNTED_MIN_S = 0.05
UNACCOUNTED_MIN_SHARE = 0.05


@dataclass
class FailureKind:
    reason: str
    label: str
    count: int
    first_message: str
    first_index: int | None = None  # the evaluation the first message is from


@dataclass
class RunSummary:
    run_id: int | None
    minimize: bool
    unit: str
    evaluations: int
    succeeded: int
    speedup: float | None
    speedup_basis: str  # "vs numpy 5.49 ms, both re-timed interleaved at the end of the run"
    basis_kind: str  # "final", "start", "resume", "first" or "" (no speedup)
    baseline_name: str
    baseline_value: float | None  # the figure the speedup is against
    # per-row gains are against the start baseline (or the first success), never rescaled
    row_reference: float | None
    row_reference_label: str
    best: dict[str, Any] | None  # index, key, value, agent, config of the best row
    failures: list[FailureKind] = field(default_factory=list)
    refused: int = 0
    hardware: tuple[float, str] | None = None  # the best's one fraction of the hardware
    profile: list[tuple[str, float]] = field(default_factory=list)  # the best's stage times
    comparison: dict[str, Any] = field(default_factory=dict)  # the final re-timing, if used
    notes: list[str] = field(default_factory=list)  # what else the basis needs said
    # kept kernels a validation case broke later: index, key, agent, label ("broken by case N")
    dethroned: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failed(self) -> int:
        return self.evaluations - self.succeeded

    def speedup_text(self) -> str:
        """'5.20× vs numpy 20.7 ms, both re-timed interleaved at the end of the run', or ''."""
        return f"{format_gain(self.speedup)} {self.speedup_basis}" if self.speedup else ""

    def failure_lines(self) -> list[str]:
        """One line per failure kind: '4 did not compile: kernel.c:17:9: error: expected ...'."""
        return [f"{f.count} {f.label}: {f.first_message}" if f.first_message
                else f"{f.count} {f.label}" for f in self.failures]

    def hardware_text(self) -> str:
        if self.hardware is None:
            return ""
        fraction, label = self.hardware
        return f"{100 * fraction:.3g} % of the {label}" if label else f"{100 * fraction:.3g} %"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSummary:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["failures"] = [f if isinstance(f, FailureKind) else FailureKind(**f)
                              for f in values.get("failures") or []]
        hw = values.get("hardware")
        values["hardware"] = (float(hw[0]), str(hw[1])) if hw else None
        values["profile"] = [(str(n), float(s)) for n, s in values.get("profile") or []]
        return cls(**values)


# ---- the parts --------------------------------------------------------------------------------
def _get(ev: Any, name: str, default: Any = None) -> Any:
    return ev.get(name, default) if isinstance(ev, Mapping) else getattr(ev, name, default)


def stage_profile(ev: Any) -> list[tuple[str, float]]:
    """(stage, seconds) of one evaluation (a stored row or an Evaluation), in cascade order,
    a stage seen twice summed; time the stages do not account for (rows stored before every
    engine-side cost was a stage) as 'other' when it is worth a line."""
    totals: dict[str, float] = {}
    for stage in _get(ev, "stages") or []:
        name = str(_get(stage, "name", "?"))
        totals[name] = totals.get(name, 0.0) + float(_get(stage, "seconds", 0.0) or 0.0)
    wall = float(_get(ev, "sim_seconds", 0.0) or 0.0)
    rest = wall - sum(totals.values())
    if totals and rest > max(UNACCOUNTED_MIN_S, UNACCOUNTED_MIN_SHARE * wall):
        totals["other"] = totals.get("other", 0.0) + rest
    return list(totals.items())


def profile_lines(profile: Sequence[tuple[str, float]]) -> list[str]:
    """'compile      0.141 s   4 %' per stage, shares of the profile's total."""
    total = sum(s for _, s in profile) or 1.0
    width = max((len(n) for n, _ in profile), default=0)
    return [f"{name:<{width}}  {seconds:8.3f} s  {100 * seconds / total:3.0f} %"
            for name, seconds in profile]


def hardware_fraction(metrics: Mapping[str, Any] | None, resources: Mapping[str, Any] | None,
                      *, value: float | None = None, limit: float | None = None,
                      minimize: bool = True) -> tuple[float, str] | None:
    """The candidate's one fraction of the hardware and the roof it is against: the backend's
    `fraction_of_roof` named by `resources['roof']`; rows stored by older versions fall back to
    their own keys, and last to the run's limit (`value`/`limit`)."""
    metrics, resources = metrics or {}, resources or {}
    frac = metrics.get("fraction_of_roof")
    if isinstance(frac, (int, float)) and not isinstance(frac, bool):
        label = str(resources.get("roof") or "")
        if not label and metrics.get("roof_gbs"):  # older rows: level and figure, no threads
            label = (f"{resources.get('roof_level', 'memory')} roof "
                     f"{format_value(float(metrics['roof_gbs']), 'GB/s')}")
        return float(frac), label or "hardware roof"
    copy = metrics.get("fraction_of_copy_bandwidth")
    if isinstance(copy, (int, float)) and not isinstance(copy, bool):
        return float(copy), "measured copy bandwidth"
    if value and limit:
        return (limit / value if minimize else value / limit), "run's hardware limit"
    return None


def first_message(row: Mapping[str, Any]) -> str:
    """The first line that says what went wrong: a compiler's own first error line (from its
    log), a refusal's two figures, otherwise the detail without the cascade's prefix."""
    reason = row.get("reason")
    if reason == SUSPECT:
        refused = refusal_text(row.get("metrics") or {}, row.get("resources") or {})
        if refused:
            return refused
    if reason == COMPILE_FAILED:
        for line in str(row.get("log") or "").splitlines():
            if not line.startswith("$ ") and _ERROR_LINE.search(line):
                return _clip(line.strip())
    for line in str(row.get("detail") or "").splitlines():
        text = _PREFIX.sub("", line.strip())
        if text:
            return _clip(text)
    return ""


def refusal_text(metrics: Mapping[str, Any], resources: Mapping[str, Any]) -> str:
    """'measured 47.63 ms; the roof allows at least 127.9 ms (DRAM roof 12.1 GB/s at 2 threads)'."""
    measured, roof = metrics.get("measured_ms"), metrics.get("roof_ms")
    if not measured or not roof:
        return ""
    label = resources.get("roof")
    return (f"measured {format_value(float(measured), 'ms')}; the roof allows at least "
            f"{format_value(float(roof), 'ms')}" + (f" ({label})" if label else ""))


def _clip(text: str) -> str:
    return text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS - 1] + "…"


def failure_kinds(rows: Sequence[Mapping[str, Any]]) -> list[FailureKind]:
    """Failed rows grouped by reason, most frequent first: count and the first message."""
    kinds: dict[str, FailureKind] = {}
    for row in rows:
        if row.get("ok"):
            continue
        reason = str(row.get("reason") or "failed")
        kind = kinds.get(reason)
        if kind is None:
            kind = kinds[reason] = FailureKind(reason, LABELS.get(reason, reason.replace("_", " ")),
                                               0, "", row.get("index"))
        kind.count += 1
        if not kind.first_message:  # the first row that says something
            kind.first_message = first_message(row)
            kind.first_index = row.get("index")
    return sorted(kinds.values(), key=lambda k: -k.count)


# ---- the run ------------------------------------------------------------------------------------
_BROKEN = re.compile(r"^broken by (case \d+|case #\d+ of this run)")


def broken_by(detail: str | None) -> str:
    """'broken by case N' when a validation case broke a kept kernel (the coordinator's
    revocation says so first), else ''."""
    m = _BROKEN.match(detail or "")
    return m.group(0) if m else ""


def dethroned(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The rows a validation case broke after they were kept, in run order."""
    return [{"index": r.get("index"), "key": r.get("key"), "agent": r.get("agent"),
             "label": broken_by(r.get("detail")), "detail": _clip(str(r.get("detail") or ""))}
            for r in rows if not r.get("ok") and broken_by(r.get("detail"))]


def _best(rows: Sequence[Mapping[str, Any]], minimize: bool) -> Mapping[str, Any] | None:
    ok = [r for r in rows if r.get("ok") and r.get("value") is not None]
    if not ok:
        return None
    # as the store ranks: by value, then the earliest
    return min(ok, key=lambda r: ((r["value"] if minimize else -r["value"]), r.get("index") or 0))


def summarize(run: Mapping[str, Any], rows: Sequence[Mapping[str, Any]],
              unit: str | None = None) -> RunSummary:
    """The run's summary from its stored row (`store.get_run`) and evaluations
    (`store.evaluation_rows`)."""
    device = run.get("device") if isinstance(run.get("device"), Mapping) else {}
    minimize = bool(run.get("minimize", True))
    unit = unit if unit is not None else str(device.get("unit") or "")
    best = _best(rows, minimize)
    ok = [r for r in rows if r.get("ok") and r.get("value") is not None]
    first = ok[0] if ok else None
    start = run.get("baseline_value")
    name = str(device.get("baseline") or "")
    resumed = bool(device.get("resumes"))
    summary = RunSummary(
        run_id=run.get("id"), minimize=minimize, unit=unit, evaluations=len(rows),
        succeeded=len(ok), speedup=None, speedup_basis="", basis_kind="", baseline_name=name,
        baseline_value=None, row_reference=start or (first["value"] if first else None),
        row_reference_label=(f"{name or 'baseline'} {format_value(start, unit)}" if start else
                             "first success" if first else ""),
        best=None if best is None else {k: best.get(k) for k in
                                        ("index", "key", "value", "agent", "config")},
        failures=failure_kinds(rows), dethroned=dethroned(rows),
        refused=sum(1 for r in rows if not r.get("ok") and r.get("reason") == SUSPECT))
    if best is not None:
        summary.hardware = hardware_fraction(best.get("metrics"), best.get("resources"),
                                             value=best.get("value"),
                                             limit=run.get("limit_value"), minimize=minimize)
        summary.profile = stage_profile(best)
        if device.get("kernel_source") and _far_below_a_memory_roof(summary.hardware):
            summary.notes.append(
                "your kernel declares no flops, so it is held to a memory roof; if its time goes "
                "to arithmetic, add flops = \"...\" (an expression of its dims) to [kernel] and "
                "it is held to the FP32 peak instead")
    final = device.get("final_comparison")
    whom = name or "the baseline"
    if best is not None and isinstance(final, Mapping) and final.get("key") == best.get("key") \
            and final.get("baseline_value") and final.get("best_value"):
        summary.speedup = gain(final["best_value"], final["baseline_value"], minimize)
        summary.baseline_name = str(final.get("baseline_name") or name)
        summary.baseline_value = float(final["baseline_value"])
        summary.basis_kind = "final"
        summary.comparison = dict(final)
        summary.speedup_basis = (
            f"vs {summary.baseline_name or 'the baseline'} "
            f"{format_value(summary.baseline_value, unit)}, both re-timed interleaved at the end "
            f"of the run (the best {format_value(float(final['best_value']), unit)} then)")
    elif best is not None and start:
        summary.speedup = gain(best["value"], start, minimize)
        summary.baseline_value = float(start)
        at_resume = device.get("baseline_at") == "resume"
        summary.basis_kind = "resume" if at_resume else "start"
        when = ("measured when the run was resumed" if at_resume else
                "measured at the start of the run" + (", before it was resumed" if resumed else ""))
        summary.speedup_basis = f"vs {whom} {format_value(start, unit)} {when}"
    elif best is not None and first is not None:
        summary.speedup = gain(best["value"], first["value"], minimize)
        summary.baseline_value = float(first["value"])
        summary.basis_kind = "first"
        summary.speedup_basis = (f"over the first successful evaluation "
                                 f"(#{first.get('index')}, {format_value(first['value'], unit)})")
    measured = [r.get("baseline_value") for r in device.get("resumes") or []
                if isinstance(r, Mapping) and r.get("baseline_value")]
    if device.get("baseline_at") == "resume":
        measured = measured[1:]  # the first resume's is the run's baseline
    if start and measured:
        summary.notes.append(
            f"resumed {len(measured)}×; the baseline measured then "
            f"({', '.join(format_value(float(v), unit) for v in measured)}) is kept beside the "
            "start's, never applied to stored rows")
    if isinstance(final, Mapping) and final and summary.basis_kind != "final" and best is not None:
        summary.notes.append("the end-of-run re-timing was of another candidate (the run went on "
                             "after it), so it is not used")
    unchecked, outputs = unchecked_outputs(run.get("goal_toml"))
    if unchecked and len(unchecked) == len(outputs):
        summary.notes.insert(0, "no output is checked (check = false on every output): any result "
                             "passes, so a kernel that computes nothing is kept; these times say "
                             "nothing about correctness")
    elif unchecked:
        summary.notes.insert(0, f"not checked (check = false): {', '.join(unchecked)}; their "
                             "values may be anything")
    return summary


def unchecked_outputs(goal_toml: Any) -> tuple[list[str], list[str]]:
    """(unchecked outputs, all outputs) of the [kernel] table in a run's stored goal."""
    if not isinstance(goal_toml, str) or "[kernel]" not in goal_toml:
        return [], []
    try:
        kernel = tomllib.loads(goal_toml).get("kernel") or {}
    except tomllib.TOMLDecodeError:
        return [], []
    args = [a for a in kernel.get("args") or [] if isinstance(a, Mapping)
            and a.get("role") in ("output", "inout")]
    return ([str(a.get("name")) for a in args if a.get("check", True) is False],
            [str(a.get("name")) for a in args])


def _far_below_a_memory_roof(hardware: tuple[float, str] | None) -> bool:
    """Under 1 % of a copy roof (GB/s): a compute-bound kernel measured as memory-bound."""
    return hardware is not None and hardware[0] < 0.01 and "GB/s" in hardware[1]


def summarize_store(store: Any, run_id: int) -> RunSummary:
    """The summary of a stored run (what `show`, the report and a reopened run display)."""
    from app.core.units import run_unit

    run = store.get_run(run_id)
    metric = store.goal_of_run(run_id).objective.metric
    return summarize(run, store.evaluation_rows(run_id), unit=run_unit(run, metric))
