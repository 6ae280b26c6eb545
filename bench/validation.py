"""Planted wrong kernels against the validation data (issue 29): is each caught, by what, after
how many evaluations, did it ever become the run's best, and what the adversary cost.

Each planted kernel (tests/kernels/planted/) is right on most inputs and wrong on one kind:
denormals, [0, 1), sorted rows, one prime shape, all-equal rows, magnitudes above ln(max), or
a racy reduction that fails one call in N. It enters a real short CPU run (app.session.
RunSession, what `kernelswarm run` uses: the sandboxed worker, the store, the adversary at its
default share) as an LLM agent's proposal (a loopback chat server replies with its source),
beside the explorer tuning the honest template.

Mechanism: "adversary" when the case that broke it came from the adversary (its origin in the
history database), else the input family or check named by the failure ("unit", "special",
"prime shape", "determinism", "timed call", ...).

    .venv/bin/python bench/validation.py [--evals 8] [--only NAME,...]

Last line: `planted bugs caught X of N, adversary cost Y% of run time`.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from app.core.events import BestRevoked, CaseFound, Evaluated, EventBus, NewBest
from app.goal import Goal, StopRules
from app.session import RunSession
from app.store import Store

PLANTED = ROOT / "tests" / "kernels" / "planted"
KEY = "sk-bench-validation-0123456789"


@dataclass
class Planted:
    name: str
    operator: str
    file: str
    wrong_on: str
    shape: list[int]
    restrictions: tuple[str, ...] = ()  # on the run's configurations


PLANTS = [
    Planted("denormals", "transpose", "flush_tiny_transpose.c", "denormals, |x| < 1e-30",
            [96, 160]),
    Planted("unit", "softmax", "unit_lowprec_softmax.c", "every input in [0, 1)", [64, 256]),
    Planted("sorted", "rmsnorm", "increasing_garbage_rmsnorm.c", "first 32 inputs increasing",
            [64, 256]),
    Planted("prime", "bias_gelu", "prime_shape_bias_gelu.c", "both dimensions prime",
            [64, 256]),
    Planted("equal_rows", "layernorm", "constant_rows_layernorm.c", "all-equal rows",
            [64, 256]),
    Planted("magnitude", "softmax", "overflow_softmax.c", "|x| above ln(max) = 88.7",
            [64, 256]),
    # two threads, or there is no race: every configuration of the run declares THREADS 2
    Planted("racy", "rmsnorm", "racy_rmsnorm.c", "one call in N (a lost update)", [64, 256],
            ("THREADS == 2",)),
]


def planted(ev: object) -> bool:
    """The LLM agent's only code is the planted kernel (every other reply has none)."""
    return str(getattr(ev, "agent", "")).startswith("llm") and bool(getattr(ev, "source", None))


def reply(source: str, idea: str) -> str:
    return f"Idea: {idea}\n```c\n{source}\n```\n"


def mechanism(detail: str, origin: str) -> str:
    """What caught it, from the failure's message and the breaking case's origin."""
    if origin.startswith("adversary"):
        return "adversary"
    if "not deterministic" in detail:
        return "determinism"
    if "timed call" in detail:
        return "timed call"
    shape = re.search(r"\[(tiny|prime) shape\]", detail)
    if shape:
        return f"{shape.group(1)} shape"
    family = re.search(r", ([a-z_]+) inputs, seed", detail)
    if family:
        return ("reverify " if detail.startswith("reverify") else "") + family.group(1)
    return "other"


def run_one(plant: Planted, evals: int, workdir: Path) -> dict:
    from llm_server import ChatServer, Reply
    from test_llm_run import NO_CODE

    source = (PLANTED / plant.file).read_text()
    goal = Goal(name=f"planted {plant.name}", backend="cpu", operator=plant.operator,
                shapes=[plant.shape], stop=StopRules(max_evals=evals, time_budget_s=240.0))
    goal.constraints.restrictions = list(plant.restrictions)
    goal.swarm.agents = ["llm", "explorer"]
    goal.swarm.workers = 1
    store = Store(workdir / f"{plant.name}.sqlite")
    bus = EventBus()
    seen: dict = {"index": 0, "best": False, "caught_at": None, "revoked": None, "cases": {}}

    def on_event(event: object) -> None:
        if isinstance(event, Evaluated):
            ev = event.evaluation
            if planted(ev) and not ev.ok and seen["caught_at"] is None:
                seen["caught_at"] = event.index
                seen["detail"] = ev.detail
        elif isinstance(event, NewBest) and planted(event.evaluation):
            seen["best"] = True
        elif isinstance(event, BestRevoked) and planted(event.evaluation):
            seen["revoked"] = (event.case_id, event.evaluation.detail)
        elif isinstance(event, CaseFound):
            seen["cases"][event.case_id] = event.origin

    bus.subscribe(on_event)
    t0 = time.monotonic()
    with ChatServer([Reply(reply(source, f"a faster {plant.operator}"))], default=Reply(NO_CODE),
                    lifetime_s=600) as server:
        os.environ.update({"KERNELSWARM_LLM_BASE_URL": server.base_url,
                           "KERNELSWARM_LLM_API_KEY": KEY, "KERNELSWARM_LLM_ROLES": "memory",
                           "KERNELSWARM_LLM_TIMEOUT_S": "30"})
        session = RunSession(goal, store=store, bus=bus)
        result = session.run()
    wall = time.monotonic() - t0
    rows = store.evaluation_rows(session.run_id)
    origins = {r["id"]: str(r.get("origin") or "")
               for r in store.validation_case_rows(store.run_goal(session.run_id)[1])}
    store.close()
    planted_rows = [r for r in rows if str(r["agent"]).startswith("llm") and r.get("source")]
    adversary = result.credits.get("adversary")
    caught_at, detail, origin = seen["caught_at"], seen.get("detail", ""), ""
    if seen["revoked"] is not None:
        case_id, revoked_detail = seen["revoked"]
        origin = seen["cases"].get(case_id) or origins.get(case_id, "")
        if caught_at is None:
            caught_at, detail = len(rows), revoked_detail
    best_now = result.best is not None and planted(result.best)
    return {"plant": plant, "proposed": bool(planted_rows), "caught": caught_at is not None
            and not best_now, "at": caught_at, "by": mechanism(detail, origin) if detail else "-",
            "became_best": seen["best"] or best_now, "evals": len(rows), "wall": wall,
            "adversary_s": float(adversary["seconds"]) if adversary else None,
            "detail": detail}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--evals", type=int, default=8, help="evaluations per run")
    parser.add_argument("--only", default="", help="comma list of planted kernel names")
    args = parser.parse_args(argv)
    chosen = [p for p in PLANTS if not args.only or p.name in args.only.split(",")]
    if not chosen:
        print(f"no planted kernel named {args.only!r}; known: {', '.join(p.name for p in PLANTS)}")
        return 2
    results = []
    with tempfile.TemporaryDirectory(prefix="ks-bench-validation-") as tmp:
        for plant in chosen:
            print(f"{plant.name}: {plant.file} in a {plant.operator} run ...", file=sys.stderr,
                  flush=True)
            results.append(run_one(plant, args.evals, Path(tmp)))
    print(f"{'planted':<11} {'operator':<10} {'wrong on':<30} {'caught':<6} {'by':<16} "
          f"{'at eval':>7} {'best?':<5} {'run s':>6} {'adv s':>6}")
    for r in results:
        p = r["plant"]
        adv = f"{r['adversary_s']:.1f}" if r["adversary_s"] is not None else "-"
        caught = "yes" if r["caught"] else ("n/a" if not r["proposed"] else "NO")
        print(f"{p.name:<11} {p.operator:<10} {p.wrong_on:<30} {caught:<6} {r['by']:<16} "
              f"{r['at'] if r['at'] else '-':>7} {'YES' if r['became_best'] else 'no':<5} "
              f"{r['wall']:>6.1f} {adv:>6}")
    for r in results:
        if r["detail"]:
            print(f"  {r['plant'].name}: {r['detail'][:160]}")
    caught = sum(1 for r in results if r["caught"])
    if any(r["adversary_s"] is None for r in results):
        print("adversary: not available")
    adv_s = sum(r["adversary_s"] or 0.0 for r in results)
    wall = sum(r["wall"] for r in results)
    print(f"planted bugs caught {caught} of {len(results)}, adversary cost "
          f"{100.0 * adv_s / wall if wall else 0.0:.1f}% of run time")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
