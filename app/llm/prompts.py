"""Prompts for LLM agents: the goal, its constraints, the device and its limits, the current
best kernel with its metrics, a few elites of other structural niches (app.llm.niches), what
recent attempts broke, and the lessons of this and earlier runs. Each section is capped so a
prompt stays within a small context. A repair is a conversation that ends with the failed
attempt's code and its measured failure."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from app.core.types import Evaluation
from app.core.units import occupancy_text
from app.goal import Goal
from app.llm.contract import argument_lines, math_line
from app.llm.hardware import sheet as hardware_sheet
from app.llm.headers import shorten_prefix
from app.llm.outcome import failure_summary
from app.llm.scrub import scrub
from app.llm.spec import KernelSpec
from app.llm.tunables import INSTRUCTIONS as TUNABLES

MAX_SOURCE = 12_000  # an inspiration's share; CURRENT (the kernel rewritten) is never cut
MAX_ELITES = 2
MAX_FAILURES = 4
MAX_LESSONS = 12
MAX_HISTORY = 6

ROLE_BRIEFS = {
    "memory": ("memory-access specialist",
               ("Make memory access cheaper: contiguous and aligned loads/stores, vector width, "
               "fewer passes over the data, reuse of loaded values, prefetching, avoiding "
               "false sharing and bank conflicts.")),
    "tiling": ("tiling specialist",
               ("Restructure the loop nest: blocking/tiling for the cache (or shared memory), "
               "register blocking, loop order, unrolling, work split across threads.")),
    "fixer": ("repair engineer",
              ("A recent candidate came close but failed. Fix exactly what broke (compiler "
              "error, wrong result, resource overrun, rejected construct) and keep its idea.")),
}

FORMAT = (
    "Answer in this form:\n"
    "Idea: <one line naming the transformation>\n"
    "then EITHER one fenced code block holding the whole new kernel file, OR one or more edit "
    "blocks against the source shown as CURRENT:\n"
    "<<<<<<< SEARCH\n<exact lines from CURRENT>\n=======\n<replacement lines>\n>>>>>>> REPLACE\n"
    "No other code blocks.")

RULES = (
    "Rules: change only the kernel (device) code; the harness, launch, timing and compile "
    "options are fixed. Forbidden (rejected before compiling): threads or processes other than "
    "OpenMP parallel loops, streams, host callbacks, clocks/timers, inline asm timers, static or "
    "global mutable state (no caching between calls), I/O, allocation, system calls, includes "
    "beyond math/SIMD headers, redefining tuning parameters, and lowering precision below the "
    "goal's dtype. The result is verified on several shapes (including ones that are not "
    "multiples of any tile) and input distributions, then timed as HARNESS says; the timed "
    "outputs are verified too.")


@dataclass
class PromptContext:
    goal: Goal
    spec: KernelSpec
    device: str = ""
    limits: dict[str, Any] = field(default_factory=dict)  # "baseline" and "roof" (objective unit)
    current_source: str = ""
    current: Evaluation | None = None  # the evaluation CURRENT belongs to
    elites: list[Evaluation] = field(default_factory=list)
    failures: list[tuple[str, Evaluation]] = field(default_factory=list)  # (idea, outcome)
    lessons: list[str] = field(default_factory=list)
    extraction_errors: list[str] = field(default_factory=list)  # replies with no usable code
    repair_target: Evaluation | None = None  # fixer: the near miss to repair
    config: dict[str, Any] = field(default_factory=dict)  # the configuration CURRENT runs with
    tunables: dict[str, list[int]] = field(default_factory=dict)  # CURRENT's declared tunables
    structures: dict[str, str] = field(default_factory=dict)  # evaluation key -> niche label
    history: list[str] = field(default_factory=list)  # app.llm.memory lines, oldest first
    best: Evaluation | None = None  # the run's best (None: CURRENT is the best)
    compiler: list[str] = field(default_factory=list)  # app.llm.feedback lines on CURRENT
    crossover: Evaluation | None = None  # a good kernel of another niche to combine with CURRENT


CROSSOVER_TASK = ("Combine CURRENT and SECOND PARENT, two correct kernels of different "
                  "structure, into one kernel faster than both: keep what makes each fast "
                  "(see their structure and measured figures) where the two designs fit "
                  "together. Edit blocks apply to CURRENT.")


def build_messages(role: str, ctx: PromptContext) -> list[dict[str, str]]:
    _, brief = ROLE_BRIEFS[role]
    task = ("Repair CURRENT." if ctx.repair_target is not None else
            CROSSOVER_TASK if ctx.crossover is not None and ctx.crossover.source else
            "Write a faster correct version of CURRENT.")
    return [{"role": "system", "content": _system(role, ctx)},
            {"role": "user", "content": _user_prompt(ctx, f"{task} {brief}")}]


def build_repair_messages(ctx: PromptContext, attempt_source: str,
                          failure: Evaluation) -> list[dict[str, str]]:
    """The fixer's request as a conversation: the task the failed attempt answered (`ctx`,
    CURRENT being the kernel it started from), the attempt as the assistant's turn (its code
    only, in normal form: the model's prose is never fed back), then what measuring it showed
    and what to fix. Edits apply to the attempt."""
    ctx = replace(ctx, repair_target=None)
    lines = ["YOUR KERNEL ABOVE FAILED: " + _eval_line(failure, ctx), _failure_text(failure),
             ("TASK: Repair YOUR KERNEL ABOVE: fix exactly what broke (compiler error, wrong "
              "result, resource overrun, rejected construct) and keep its idea. Answer as before: "
              "the whole file, or SEARCH/REPLACE edit blocks against YOUR KERNEL ABOVE (not "
              "against CURRENT).")]
    return [{"role": "system", "content": _system("fixer", ctx)},
            {"role": "user", "content": _user_prompt(
                ctx, "Write a faster correct version of CURRENT.")},
            {"role": "assistant", "content": _code(attempt_source, ctx, limit=None)},
            {"role": "user", "content": "\n".join(lines)}]


def _system(role: str, ctx: PromptContext) -> str:
    title, brief = ROLE_BRIEFS[role]
    return (f"You are a {title} in a team optimising one {ctx.spec.language.upper()} kernel. "
            f"{brief}\n{RULES}\n{TUNABLES}\n{FORMAT}")


def _user_prompt(ctx: PromptContext, task: str) -> str:
    parts = [_goal_section(ctx), _harness_section(ctx), _device_section(ctx)]
    if ctx.lessons:
        parts.append("LESSONS (from this run and earlier runs of similar goals):\n"
                     + "\n".join(f"- {t}" for t in ctx.lessons[-MAX_LESSONS:]))
    best = ctx.best if ctx.best is not None else ctx.current
    is_best = ctx.current is None or best is None or best.key == ctx.current.key
    if ctx.repair_target is not None:
        parts.append("CURRENT (the near miss to repair):\n" + _eval_line(ctx.repair_target, ctx)
                     + "\n" + _failure_text(ctx.repair_target) + "\n"
                     + _code(ctx.current_source, ctx, limit=None))
        if best is not None:
            parts.append("The best correct kernel so far: " + _eval_line(best, ctx))
    else:
        # CURRENT is the best, or (a repair) the kernel the failed attempt started from
        what = ("the best correct kernel so far" if is_best
                else "the correct kernel the failed attempt started from")
        parts.append(f"CURRENT ({what}"
                     + (f"; {_eval_line(ctx.current, ctx)}" if ctx.current else "")
                     + _structure_note(ctx.current, ctx) + "):\n"
                     + _code(ctx.current_source, ctx, limit=None))
        if not is_best and best is not None:
            parts.append("The best correct kernel so far (not shown): " + _eval_line(best, ctx))
        if ctx.tunables:
            parts.append("CURRENT's declared tunables (the swarm searches them; keep the "
                         "#ifndef defaults and redeclare the ones you keep): " + "; ".join(
                             f"{k} = {v}" for k, v in ctx.tunables.items()))
    if ctx.compiler:
        parts.append(("COMPILER ON CURRENT (gcc's vectorisation report, loops by line of CURRENT "
                      "as shown):\n" if ctx.spec.language == "c" else
                      "COMPILER ON CURRENT (ptxas, compile only):\n")
                     + "\n".join(f"- {c}" for c in ctx.compiler))
    if ctx.crossover is not None and ctx.crossover.source:
        # the second parent is combined, not glanced at: shown whole, like CURRENT
        parts.append("SECOND PARENT (" + _eval_line(ctx.crossover, ctx)
                     + _structure_note(ctx.crossover, ctx) + "):\n"
                     + _code(ctx.crossover.source, ctx, limit=None))
    for e in ctx.elites[:MAX_ELITES]:
        if ctx.crossover is not None and e.key == ctx.crossover.key:
            continue
        if e.source:
            parts.append("ANOTHER GOOD KERNEL for inspiration (" + _eval_line(e, ctx)
                         + _structure_note(e, ctx) + "):\n"
                         + _code(e.source, ctx, limit=MAX_SOURCE // 3))
        else:
            parts.append("ANOTHER GOOD CONFIGURATION of the template: " + _eval_line(e, ctx)
                         + _structure_note(e, ctx))
    if ctx.history:
        parts.append("EARLIER ATTEMPTS (the harness's own summary of each code change and what "
                      "measuring it showed; oldest first):\n"
                      + "\n".join(f"- {h}" for h in ctx.history[-MAX_HISTORY:]))
    if ctx.failures:
        parts.append("RECENT FAILED ATTEMPTS (do not repeat):\n" + "\n".join(
            f"- {idea + ' -> ' if idea else ''}{_failure_text(e)}"
            for idea, e in ctx.failures[-MAX_FAILURES:]))
    if ctx.extraction_errors:
        parts.append("PROBLEMS WITH YOUR RECENT REPLIES:\n" + "\n".join(
            f"- {m}" for m in ctx.extraction_errors[-3:]))
    parts.append(f"TASK: {task}")
    return "\n\n".join(parts)


def _structure_note(e: Evaluation | None, ctx: PromptContext) -> str:
    """Its structural niche (app.llm.niches), when the agent labelled it."""
    label = ctx.structures.get(e.key) if e is not None else None
    return f"; structure: {label}" if label else ""


def _goal_section(ctx: PromptContext) -> str:
    g = ctx.goal
    c = g.constraints
    shapes = ", ".join("x".join(map(str, s)) for s in g.shapes)
    own = ctx.spec.operator.description if ctx.spec.operator is not None else ""
    what = (f"operator {g.operator}" if g.kernel is None else
            "your own kernel " + (own or ctx.spec.entry).removeprefix("your kernel "))
    lines = [f"GOAL: {g.name}", f"{what}, dtype {g.dtype}, shapes {shapes}",
             f"objective: {g.objective.metric} ({'minimize' if g.objective.minimize else 'maximize'})"
             + (f", in {ctx.spec.unit}" if ctx.spec.unit else "")]
    extra = []
    if c.max_registers:
        extra.append(f"at most {c.max_registers} registers per thread")
    if c.max_shared_memory_bytes:
        extra.append(f"at most {c.max_shared_memory_bytes} bytes of shared memory")
    if c.forbid:
        extra.append("forbidden: " + ", ".join(c.forbid))
    if extra:
        lines.append("constraints: " + "; ".join(extra))
    return "\n".join(lines)


def _device_section(ctx: PromptContext) -> str:
    unit = ctx.spec.unit
    minimize = ctx.goal.objective.minimize
    lines = [f"DEVICE: {ctx.device or 'unknown'}"]
    lines += ["hardware: " + h for h in hardware_sheet(
        ctx.spec.language, ctx.device, ctx.goal.dtype, ctx.limits.get("measured"))]
    for k, v in ctx.limits.items():
        if v in (None, "") or k == "measured":
            continue
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            text = f"{k}: {_num(v, unit)}"
            if k == "roof":
                text += (" (the hardware limit: " + ("no kernel can take less time)" if minimize
                         else "no kernel can go faster)"))
            lines.append(text)
        else:
            lines.append(f"{k}: {v}")
    best = ctx.current.value if ctx.current is not None and ctx.current.ok else None
    roof, base = ctx.limits.get("roof"), ctx.limits.get("baseline")
    if best and isinstance(roof, (int, float)) and roof:
        frac = roof / best if minimize else best / roof
        lines.append(f"CURRENT achieves {100 * frac:.3g}% of the roof")
    if best and isinstance(base, (int, float)) and base:
        gain = base / best if minimize else best / base
        lines.append(f"CURRENT is {gain:.3g}x as good as the baseline (above 1: better)")
    return "\n".join(lines)


def _num(v: float, unit: str) -> str:
    return f"{v:.4g} {unit}".rstrip()


def _harness_section(ctx: PromptContext) -> str:
    spec = ctx.spec
    lines = ["HARNESS (fixed; only the kernel file changes):", f"contract: {spec.contract}"]
    math = math_line(spec.operator)
    if math:
        lines.append(f"math: {math}")
    if spec.operator is not None and spec.shapes:
        lines += argument_lines(spec.operator, list(spec.shapes[0]), spec.dtype)
    lines += spec.harness_facts(ctx.config)
    prefix = spec.prefix(ctx.config)
    if prefix:
        # fixed headers are cut to what CURRENT uses; CURRENT itself never is
        shown = shorten_prefix(prefix, ctx.current_source or spec.template)
        note = shown.note()
        lines.append("HARNESS PREFIX: the harness compiles this text followed by your file "
                     "(the #defines follow the configuration and the shape; do not repeat it)"
                     + (f"; {note}" if note else "") + ":\n"
                     f"```{spec.language}\n{shown.text.rstrip()}\n```")
    return "\n".join(lines)


def _eval_line(e: Evaluation, ctx: PromptContext) -> str:
    bits = [f"config {e.config}"]
    if e.ok and e.value is not None:
        bits.append(f"{ctx.goal.objective.metric} {_num(e.value, ctx.spec.unit)}")
        if e.p10_ms is not None and e.p90_ms is not None:
            bits.append(f"time p10..p90 {e.p10_ms:.4g}..{e.p90_ms:.4g} ms")
    for k, v in e.metrics.items():
        if _shown_metric(k):
            bits.append(_metric_text(k, v))
    res = e.resources or {}
    for k in ("registers", "spill_stores", "spill_loads", "stack_bytes", "static_shared_bytes",
              "dynamic_shared_bytes", "threads_per_block"):
        if isinstance(res.get(k), (int, float)) and not isinstance(res.get(k), bool):
            bits.append(f"{k} {res[k]:.4g}" if isinstance(res[k], float) else f"{k} {res[k]}")
    occupancy = occupancy_text(res)
    if occupancy:
        bits.append(occupancy)
    return ", ".join(bits)


# Metrics a prompt leaves out: speedups against other references (the DEVICE section states the
# one speedup, against the run's baseline: two figures for one kernel read as a contradiction),
# figures the objective already states, and the measurement's own bookkeeping.
HIDDEN_METRICS = {"speedup", "baseline_ms", "anchor_ms", "time_ms", "samples", "cpu_count",
                  "noisy", "cores_busy", "roof_threads", "timed_by_cell_clock", "spread",
                  "throughput"}


def _shown_metric(k: str) -> bool:
    return k not in HIDDEN_METRICS and not k.startswith("speedup")


def _metric_text(k: str, v: Any) -> str:
    if k == "fraction_of_roof" and isinstance(v, (int, float)):
        return f"{100 * v:.3g}% of the roof"
    return f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"


def _failure_text(e: Evaluation) -> str:
    """The product's own summary, never the candidate's output or the compiler's words
    (app.llm.outcome); scrubbed as well, for the names it keeps."""
    return scrub(failure_summary(e), keep_names=("kernel.c", "kernel.cu"))


def _code(source: str, ctx: PromptContext, limit: int | None = MAX_SOURCE) -> str:
    """A fenced kernel; `limit` None: whole (the kernel being rewritten: an answer must not
    invent what it cannot see). Otherwise cut at a line end, saying how much was left out."""
    src = source
    if limit is not None and len(source) > limit:
        at = source.rfind("\n", 0, limit)
        at = at if at > 0 else limit
        src = source[:at] + f"\n/* ... ({len(source) - at} more characters not shown) */\n"
    return f"```{ctx.spec.language}\n{src.rstrip()}\n```"  # the operator's language: c or cuda
