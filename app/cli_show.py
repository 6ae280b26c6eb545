"""`kernelswarm history | show | export | devices`: what is stored, read back."""

from __future__ import annotations

import argparse
import sys

from app.cli_common import CliError, _fmt, _learned_from, _open_store, _when, summary_lines
from app.core.noise import ImprovementCount, new_bests
from app.core.types import Evaluation
from app.core.units import run_unit


def cmd_history(args: argparse.Namespace) -> int:
    with _open_store(args.db) as store:
        runs = store.list_runs(limit=args.limit)
    if not runs:
        print(f"no runs yet in {store.path}")
        return 0
    print(f"{'run':>5}  {'started':<16}  {'status':<11}  {'evals':>6}  {'best':>12}  backend  goal")
    for r in runs:
        best = _fmt(r["best_value"])
        print(f"{r['id']:>5}  {_when(r['started_at']):<16}  {r['status']:<11}  "
              f"{r['evaluations']:>6}  {best:>12}  {r['backend']:<7}  {r['name']}")
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from app.run_summary import profile_lines, summarize
    from app.swarm.lessons import current_lessons

    with _open_store(args.db) as store:
        run = store.get_run(args.run_id)
        goal = store.goal_of_run(args.run_id)
        rows = store.evaluation_rows(args.run_id)
        lessons = current_lessons(store.lessons(run_id=args.run_id))
        usage = store.llm_usage(args.run_id)
    unit = run_unit(run, goal.objective.metric)
    summary = summarize(run, rows, unit=unit)  # the model `run`, the report and the window read
    device = run["device"].get("name", "?") if isinstance(run["device"], dict) else run["device"]
    print(f"run {run['id']}: {run['name']}  [{run['status']}"
          f"{', ' + run['reason'] if run['reason'] else ''}]")
    print(f"  goal key {run['goal_key']}, backend {run['backend']}, device {device}, seed {run['seed']}")
    print(f"  started {_when(run['started_at'])}, finished {_when(run['finished_at'])}, "
          f"run clock {run['elapsed_s'] or 0:.1f} s"
          + (" (simulated: the recorded measurements' times)" if run["backend"] == "replay" else ""))
    print(f"  evaluations {run['evaluations']} ({run['succeeded']} ok), "
          f"best {_fmt(run['best_value'], unit)}")
    if run["message"]:
        print(f"  message: {run['message']}")
    learned = _learned_from(run)
    if learned:  # the earlier runs whose ranking seeded this one (app.swarm.transfer)
        print("  started from " + "; ".join(
            f"run {s.get('run_id')} ({s.get('device', '?')}, {s.get('evaluations', '?')} evaluations)"
            for s in learned))
    for line in summary_lines(summary):
        print(line)
    # the count `run` printed and the window shows, from the same stored rows (app.core.noise)
    history = [Evaluation.from_dict(r) for r in rows]  # the rows read above, not read again
    print("  " + ImprovementCount.of(new_bests(history, goal.objective.minimize)).sentence())
    ok = [r for r in rows if r["ok"]]
    ok.sort(key=lambda r: r["value"], reverse=not goal.objective.minimize)
    if ok:
        print(f"top {min(args.top, len(ok))} configurations:")
        for r in ok[:args.top]:
            params = ", ".join(f"{k}={v}" for k, v in r["config"].items())
            print(f"  #{r['index']:<5} {_fmt(r['value'], unit):>12}  {r['agent']:<10} {params}")
    if summary.profile and summary.best is not None:  # where the best's evaluation time went
        print(f"time profile of the best's evaluation (#{summary.best['index']}, "
              f"{sum(s for _, s in summary.profile):.2f} s):")
        for line in profile_lines(summary.profile):
            print(f"  {line}")
    for d in summary.dethroned:  # kept kernels a validation case broke later
        print(f"  dethroned #{d['index']} ({d['agent']}): {d['detail']}")
    if run["credits"]:
        agents = {a: c for a, c in run["credits"].items() if not c.get("time_budget")}
        print("agents: " + ", ".join(f"{a} {int(c.get('evaluated', 0))} evaluated / "
                                     f"{_agent_bests(c)}" for a, c in agents.items()))
        adversary = run["credits"].get("adversary")
        if adversary:  # its share is of the run's time, not of the evaluations
            print(f"adversary: {int(adversary.get('proposed', 0))} inputs in "
                  f"{int(adversary.get('probes', adversary.get('evaluated', 0)))} probes, "
                  f"{int(adversary.get('cases', 0))} case(s) kept, "
                  f"{int(adversary.get('dethroned', 0))} kernel(s) broken; "
                  f"{100 * adversary.get('time_share', 0.0):.1f} % of the run's time "
                  f"(share {100 * adversary.get('share', 0.0):.0f} %)")
    if lessons:
        print("lessons:")
        for lesson in lessons[:10]:
            print(f"  [{lesson['kind']}] {lesson['text']}")
    if usage["requests"]:
        print(f"llm: {usage['requests']} requests, {usage['prompt_tokens']} prompt + "
              f"{usage['completion_tokens']} completion tokens, cost {usage['cost']:.4g}, "
              + ", ".join(f"{k} {v}" for k, v in sorted(usage["by_status"].items())))
    return 0


def _agent_bests(credit: dict) -> str:
    """'3 new bests, 1 clear of noise'; a run stored before the noise count says only the first."""
    bests = int(credit.get("improvements", 0))
    text = f"{bests} new best{'s' if bests != 1 else ''}"
    if "clear_improvements" in credit:
        text += f", {int(credit['clear_improvements'])} clear of noise"
    return text


def cmd_export(args: argparse.Namespace) -> int:
    from app.export import render, write_atomic

    with _open_store(args.db) as store:
        text = render(store, args.run_id, args.format)
    if args.output and args.output != "-":
        try:
            write_atomic(args.output, text)
        except OSError as exc:
            raise CliError(f"cannot write {args.output!r}: {exc.strerror or exc}") from None
        print(f"wrote {args.format} export of run {args.run_id} to {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def available_devices() -> list[tuple[str, bool, str]]:
    """(backend, available, details) for each registered backend on this machine."""
    from app.gpu.registry import backends

    out: list[tuple[str, bool, str]] = []
    for spec in backends():
        try:
            ok, details = spec.probe()
        except Exception as exc:  # noqa: BLE001 - a broken probe says so; the others still report
            ok, details = False, f"probe failed ({type(exc).__name__}: {exc})"
        out.append((spec.name, ok, details))
    return out


def cmd_devices(args: argparse.Namespace) -> int:
    if getattr(args, "cluster", None):
        from app.cluster.report import print_cluster_devices

        return print_cluster_devices(args.cluster)
    from app.gpu.sandbox import sandbox_summary, status

    cell = sandbox_summary()  # backends that run candidate code do it in a sandbox cell
    for backend, ok, details in available_devices():
        extra = f"; sandbox: {cell}" if backend != "replay" else ""
        print(f"{backend:<7} {'yes' if ok else 'no ':<4} {details}{extra}")
    for name, line in status().items():
        print(f"sandbox {name:<20} {line}", file=sys.stderr)
    return 0
