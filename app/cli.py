"""Headless entry point: `kernelswarm run | history | show | export | devices`; bare opens the GUI.

Bad input (a malformed goal, a missing space, an unknown run, a database that is not ours) gets
one line on stderr naming the problem and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any, TextIO

from app import __version__
from app.core.units import format_gain, format_value, gain, run_unit
from app.goal import Goal, GoalError

EXIT_ERROR = 1
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a command ended by Ctrl-C


class CliError(Exception):
    """A problem to report in one line."""


# ---- helpers --------------------------------------------------------------------------------
def _fmt(v: float | None, unit: str = "") -> str:
    if v is None:
        return "-"
    return format_value(v, unit)


def _open_store(path: str | None):
    from app.paths import default_db_path
    from app.store import Store

    return Store(Path(path) if path else default_db_path())


def _event_dict(event: Any) -> dict[str, Any]:
    data = asdict(event) if is_dataclass(event) else dict(vars(event))
    return {"event": type(event).__name__, **data}


# ---- run: progress, trace, summary ----------------------------------------------------------
class TraceWriter:
    """Every event as one JSON line, flushed as it happens (a killed run keeps its trace)."""

    def __init__(self, path: str, append: bool) -> None:
        try:
            self._fh = open(path, "a" if append else "w", encoding="utf-8")
        except OSError as exc:
            raise CliError(f"cannot write trace file {path!r}: {exc.strerror or exc}") from None
        self._lock = threading.Lock()

    def __call__(self, event: Any) -> None:
        line = json.dumps(_event_dict(event), default=str)
        with self._lock:
            self._fh.write(line + "\n")
            self._fh.flush()

    def close(self) -> None:
        self._fh.close()


class Progress:
    """A plain-text progress bar on stderr: redrawn in place on a terminal, a line every tenth
    of the budget otherwise (logs and CI)."""

    WIDTH = 30

    def __init__(self, stream: TextIO, max_evals: int, unit: str) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.max_evals = max(1, max_evals)
        self.unit = unit
        self.done = 0
        self.failed = 0
        self.best: float | None = None
        self.elapsed = 0.0
        self._last_draw = 0.0
        self._last_step = -1
        self._last_done = -1

    def __call__(self, event: Any) -> None:
        from app.core.events import Evaluated, Notice, RunFinished, RunStarted

        if isinstance(event, Notice):
            hint = (f"; Ctrl-C stops it, then `kernelswarm run --resume {event.run_id} "
                    "--cluster-fallback local` goes on here") if "continue_here" in event.choices else ""
            if self.tty:
                self.stream.write("\n")
            self._line(f"kernelswarm: {event.text}{hint}")
        elif isinstance(event, RunStarted):
            resumed = f", resuming after {event.resumed_evals} evaluations" if event.resumed_evals else ""
            self._line(f"run {event.run_id}: {event.goal_name} on {event.backend} with "
                       f"{', '.join(event.agents)}{resumed}")
        elif isinstance(event, Evaluated):
            self.done = event.index
            self.failed += 0 if event.evaluation.ok else 1
            self.best = event.best_value
            self.elapsed = event.elapsed_s
            self._draw()
        elif isinstance(event, RunFinished):
            self._draw(force=True)
            if self.tty:
                self.stream.write("\n")
                self.stream.flush()

    def _text(self) -> str:
        frac = min(1.0, self.done / self.max_evals)
        filled = int(frac * self.WIDTH)
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        return (f"[{bar}] {self.done}/{self.max_evals} evals, {self.failed} failed, "
                f"best {_fmt(self.best, self.unit)}, {self.elapsed:.1f} s")

    def _draw(self, force: bool = False) -> None:
        if self.tty:
            now = time.monotonic()
            if force or now - self._last_draw >= 0.1:
                self._last_draw = now
                self.stream.write("\r" + self._text())
                self.stream.flush()
            return
        step = int(10 * min(1.0, self.done / self.max_evals))
        if step > self._last_step or (force and self.done != self._last_done):
            self._last_step = step
            self._last_done = self.done
            self._line(self._text())

    def _line(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()


def _check_goal_endpoint(goal: Goal, args: argparse.Namespace) -> None:
    """The API key goes only to the user's own endpoint (settings or KERNELSWARM_LLM_*): a goal
    file's [llm] base_url that differs is refused unless --trust-goal-endpoint; a URL given
    with --llm-base-url is the user's own choice."""
    from app.llm import settings as llm_settings

    agents = [a.strip() for a in args.agents.split(",")] if args.agents else goal.swarm.agents
    if args.llm_base_url:
        llm_settings.approve_endpoint(args.llm_base_url)
    if "llm" not in agents or args.llm_base_url:
        return
    try:
        refusal = llm_settings.endpoint_needs_confirmation(
            goal.llm, llm_settings.user_endpoint_settings())
    except llm_settings.LLMSettingsError as exc:
        raise CliError(f"your LLM settings: {exc}") from None
    if refusal and args.trust_goal_endpoint:
        llm_settings.approve_endpoint(str(goal.llm["base_url"]))
    elif refusal:
        raise CliError(f"llm.base_url: {refusal} (pass --trust-goal-endpoint to allow it for "
                       "this run, or set KERNELSWARM_LLM_BASE_URL)")


def _apply_overrides(goal: Goal, args: argparse.Namespace) -> Goal:
    _check_goal_endpoint(goal, args)
    if args.seed is not None:
        goal.swarm.seed = args.seed
    if args.max_evals is not None:
        goal.stop.max_evals = args.max_evals
    if args.time_budget is not None:
        goal.stop.time_budget_s = args.time_budget
    if args.workers is not None:
        goal.swarm.workers = args.workers
    if args.agents:
        goal.swarm.agents = [a.strip() for a in args.agents.split(",") if a.strip()]
    if args.llm_base_url:
        goal.llm["base_url"] = args.llm_base_url
    if args.llm_model:
        goal.llm["model"] = args.llm_model
    if getattr(args, "cluster", None):  # evaluate on a Ray cluster; Ray is imported only then
        goal.cluster = {**goal.cluster, "address": args.cluster}
    if getattr(args, "cluster_fallback", None) and goal.cluster:
        goal.cluster["fallback"] = args.cluster_fallback
    return goal


def _load_goal(path: str) -> Goal:
    try:
        return Goal.load(path)
    except GoalError as exc:
        if exc.field in ("file", "toml"):
            raise CliError(exc.problem) from None
        raise CliError(f"goal file {path!r}: {exc}") from None


class _CtrlC:
    """Ctrl-C during a run: the first press stops it cleanly (the evaluations in flight are
    accepted and committed, the workers shut down, the store closes last), a second one quits
    at once. SIGINT is blocked while a run is prepared and runs, so the threads and worker
    processes started meanwhile inherit the mask: the terminal's Ctrl-C, sent to the whole
    process group, reaches only this loop and never kills a worker mid-measurement."""

    def __init__(self) -> None:
        self.presses = 0
        self._saved: tuple[Any, Any] | None = None

    def start(self) -> None:
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        # Delivered only to a thread started before the mask: counted the same.
        self._saved = (mask, signal.signal(signal.SIGINT, self._pressed))

    def _pressed(self, *_: Any) -> None:
        self.presses += 1

    def wait(self, timeout_s: float) -> int:
        """Wait up to `timeout_s` for a press; the number of presses so far."""
        if signal.sigtimedwait({signal.SIGINT}, timeout_s) is not None:
            self.presses += 1
        return self.presses

    def end(self) -> None:
        if self._saved is None:
            return
        while signal.sigtimedwait({signal.SIGINT}, 0) is not None:  # presses still pending
            self.presses += 1
        mask, handler = self._saved
        self._saved = None
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGINT, handler)


def _run_in_thread(session: Any, ctrl_c: _CtrlC) -> Any:
    """Run the session off the main thread, which waits for Ctrl-C / SIGTERM and stops it
    cleanly (the run ends as 'stopped' with everything evaluated so far committed)."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = session.run()
        except BaseException as exc:  # reported by the main thread
            outcome["error"] = exc

    worker = threading.Thread(target=target, name="kernelswarm-run")
    worker.start()
    previous = signal.signal(signal.SIGTERM, lambda *_: session.stop())
    stopping = False
    try:
        while worker.is_alive():
            presses = ctrl_c.wait(0.2)
            if presses >= 2:
                print("\nkernelswarm: quit by a second Ctrl-C; the evaluations committed so far "
                      "are kept", file=sys.stderr, flush=True)
                os._exit(EXIT_INTERRUPTED)
            if presses and not stopping:
                print("\nstopping: finishing the evaluations in flight (Ctrl-C again to quit at "
                      "once)...", file=sys.stderr, flush=True)
                session.stop()
                stopping = True
        worker.join()
    finally:
        signal.signal(signal.SIGTERM, previous)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def cmd_run(args: argparse.Namespace) -> int:
    from app.store import StoreError, goal_key

    if not args.goal and args.resume is None:
        raise CliError("give a goal file to run, or --resume RUN_ID")
    goal = _load_goal(args.goal) if args.goal else None
    store = _open_store(args.db)
    ctrl_c = _CtrlC()
    try:
        if args.resume is not None:
            run = store.get_run(args.resume)
            if run["status"] == "running":
                raise StoreError(f"run {args.resume} is still running (process {run['pid']}); "
                                 "stop it before resuming")
            if goal is None:
                goal = store.goal_of_run(args.resume)
            elif goal_key(goal) != run["goal_key"]:
                raise CliError(f"goal file {args.goal!r} is not the goal of run {args.resume}; "
                               "resume without a goal file to use the run's own")
        assert goal is not None
        _apply_overrides(goal, args)
        ctrl_c.start()  # before the session: the workers it starts inherit the blocked Ctrl-C
        if goal.cluster and args.resume is None:  # GPUs of several models: a search per model
            from app.cluster.per_model import models_to_search

            models = models_to_search(goal)
            if models:
                return _run_per_model(args, goal, models, store, ctrl_c)
        session, result = _run_session(args, goal, store, ctrl_c)
        if ctrl_c.presses and result.reason == "stopped":
            print(f"stopped by Ctrl-C after {result.evaluations} evaluations; resume with "
                  f"kernelswarm run --resume {session.run_id}", file=sys.stderr)
            return EXIT_INTERRUPTED
        return EXIT_ERROR if result.reason == "error" else 0
    finally:
        ctrl_c.end()
        store.close()


def _run_session(args: argparse.Namespace, goal: Goal, store: Any, ctrl_c: _CtrlC,
                 append_trace: bool = False) -> tuple[Any, Any]:
    """One run of `goal` (or the resumed run), its progress and its summary printed."""
    from app.core.events import EventBus
    from app.session import RunSession

    bus = EventBus()
    try:  # the session checks the goal, once, before anything is stored
        session = RunSession(goal, store=store, bus=bus, resume_run_id=args.resume)
    except GoalError as exc:
        raise CliError(f"goal {args.goal or f'run {args.resume}'!r}: {exc}") from None
    trace = TraceWriter(args.trace, append=append_trace or args.resume is not None) \
        if args.trace else None
    if trace:
        bus.subscribe(trace)
    if not args.quiet:
        bus.subscribe(Progress(sys.stderr, goal.stop.max_evals, session.unit))
    try:
        result = _run_in_thread(session, ctrl_c)
    finally:
        if trace:
            trace.close()
    _print_summary(store, session.run_id, goal, result, session.unit)
    return session, result


def _run_per_model(args: argparse.Namespace, goal: Goal, models: list[str], store: Any,
                   ctrl_c: _CtrlC) -> int:
    """A cuda goal on a cluster with GPUs of several models: one run per model, one after the
    other, each on its model's GPUs only; later ones start from the earlier ones' evidence
    (app.cluster.per_model says why not concurrently). Ends with one line per model."""
    from app.cluster.per_model import goal_for_model
    from app.core.evaluator import BackendUnavailable

    print(f"the cluster has GPUs of {len(models)} models ({', '.join(models)}): one search per "
          "model, one after the other", file=sys.stderr, flush=True)
    lines: list[str] = []
    rc = 0
    for i, model in enumerate(models):
        if ctrl_c.presses:  # Ctrl-C after the previous run had ended: the rest is not searched
            print(f"stopped by Ctrl-C; not searched: {', '.join(models[i:])}", file=sys.stderr)
            rc = EXIT_INTERRUPTED
            break
        print(f"{model} ({i + 1} of {len(models)}):", flush=True)
        try:
            session, result = _run_session(args, goal_for_model(goal, model), store, ctrl_c,
                                           append_trace=i > 0)
        except BackendUnavailable as exc:  # this model's actors did not start: go on
            print(f"kernelswarm: error: {model}: {exc}", file=sys.stderr, flush=True)
            lines.append(f"  {model}: no run ({exc})")
            rc = EXIT_ERROR
            continue
        lines.append(_model_line(model, session, result))
        if result.reason == "error":
            rc = EXIT_ERROR
        if ctrl_c.presses and result.reason == "stopped":
            left = models[i + 1:]
            print(f"stopped by Ctrl-C after {result.evaluations} evaluations; resume with "
                  f"kernelswarm run --resume {session.run_id}"
                  + (f" (not searched: {', '.join(left)})" if left else ""), file=sys.stderr)
            rc = EXIT_INTERRUPTED
            break
    print(f"one search per GPU model ({len(lines)} of {len(models)}):")
    for line in lines:
        print(line)
    return rc


def _model_line(model: str, session: Any, result: Any) -> str:
    best = result.best
    found = (f"best {_fmt(best.value, session.unit)} (key {best.key})" if best is not None
             else "no configuration succeeded")
    learned = session.coordinator.learned_from  # a new run: what its device record says
    from_runs = f", started from run {', '.join(str(s['run_id']) for s in learned)}" \
        if learned else ""
    return (f"  {model}: run {session.run_id} {result.reason}, {result.evaluations} "
            f"evaluations, {found}{from_runs}")


def _learned_from(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The earlier runs a stored run started from (its device record says; app.swarm.transfer)."""
    device = run.get("device")
    return list(device.get("learned_from") or []) if isinstance(device, dict) else []


def _print_summary(store: Any, run_id: int | None, goal: Goal, result: Any, unit: str) -> None:
    minimize = goal.objective.minimize
    history = result.history
    ok = [e for e in history if e.ok]
    print(f"run {run_id} {result.reason}: {result.evaluations} evaluations "
          f"({len(ok)} ok, {len(history) - len(ok)} failed), {result.elapsed_s:.1f} s on the run clock")
    learned = _learned_from(store.get_run(run_id)) if store is not None and run_id is not None \
        else []
    if learned:
        print("started from " + ", ".join(f"run {s.get('run_id')}" for s in learned)
              + " (their best configurations first, evaluated again here)")
    best = result.best
    if best is None:
        print("no configuration succeeded")
    else:
        params = ", ".join(f"{k}={v}" for k, v in best.config.items())
        print(f"best {goal.objective.metric}: {_fmt(best.value, unit)} by {best.agent or '?'} "
              f"(key {best.key})")
        print(f"  configuration: {params}")
        if best.p10_ms is not None and best.p90_ms is not None and best.time_ms:
            busy = ("; measured while the machine was busy (load "
                    f"{best.metrics.get('load_before', 0):.2g} on {int(best.metrics.get('cpu_count', 0))} "
                    "cores) or with a wide spread: treat it with care"
                    if best.metrics.get("noisy") else "")
            print(f"  timing: median {best.time_ms:.4g} ms, p10-p90 {best.p10_ms:.4g}-{best.p90_ms:.4g} ms"
                  f"{busy}")
        run = store.get_run(run_id) if store is not None and run_id is not None else {}
        baseline = run.get("baseline_value")
        which = (run.get("device") or {}).get("baseline")
        named = f"the baseline ({which})" if which else "the baseline"
        again = getattr(result, "comparison", None) or {}
        if again.get("baseline_value") and again.get("best_value"):
            factor = gain(again["best_value"], again["baseline_value"], minimize)
            print(f"  {format_gain(factor)} over {named}, both re-timed interleaved at the end "
                  f"({_fmt(again['best_value'], unit)} vs {_fmt(again['baseline_value'], unit)}; "
                  f"{format_gain(again.get('speedup_vs_c_reference'))} over the plain C loop)")
        elif baseline:
            factor = gain(best.value, baseline, minimize)
            print(f"  {format_gain(factor)} over {which or 'the baseline'} ({_fmt(baseline, unit)})")
        elif ok:
            first = ok[0]
            factor = gain(best.value, first.value, minimize)
            if factor:
                print(f"  {format_gain(factor)} over the first successful evaluation "
                      f"({_fmt(first.value, unit)})")
    if result.credits:
        print("agents:      evaluated  failed  improvements  budget share")
        for name, c in result.credits.items():
            print(f"  {name:<10} {int(c.get('evaluated', 0)):>9} {int(c.get('failed', 0)):>7} "
                  f"{int(c.get('improvements', 0)):>13} {c.get('share', 0.0):>13.0%}")


# ---- history / show / export / devices --------------------------------------------------------
def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "-"


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
    from app.swarm.lessons import current_lessons

    with _open_store(args.db) as store:
        run = store.get_run(args.run_id)
        goal = store.goal_of_run(args.run_id)
        rows = store.evaluation_rows(args.run_id)
        lessons = current_lessons(store.lessons(run_id=args.run_id))
        usage = store.llm_usage(args.run_id)
    unit = run_unit(run, goal.objective.metric)
    device = run["device"].get("name", "?") if isinstance(run["device"], dict) else run["device"]
    print(f"run {run['id']}: {run['name']}  [{run['status']}"
          f"{', ' + run['reason'] if run['reason'] else ''}]")
    print(f"  goal key {run['goal_key']}, backend {run['backend']}, device {device}, seed {run['seed']}")
    print(f"  started {_when(run['started_at'])}, finished {_when(run['finished_at'])}, "
          f"run clock {run['elapsed_s'] or 0:.1f} s")
    print(f"  evaluations {run['evaluations']} ({run['succeeded']} ok), "
          f"best {_fmt(run['best_value'], unit)}")
    if run["message"]:
        print(f"  message: {run['message']}")
    learned = _learned_from(run)
    if learned:  # the earlier runs whose ranking seeded this one (app.swarm.transfer)
        print("  started from " + "; ".join(
            f"run {s.get('run_id')} ({s.get('device', '?')}, {s.get('evaluations', '?')} evaluations)"
            for s in learned))
    ok = [r for r in rows if r["ok"]]
    ok.sort(key=lambda r: r["value"], reverse=not goal.objective.minimize)
    if ok:
        print(f"top {min(args.top, len(ok))} configurations:")
        for r in ok[:args.top]:
            params = ", ".join(f"{k}={v}" for k, v in r["config"].items())
            print(f"  #{r['index']:<5} {_fmt(r['value'], unit):>12}  {r['agent']:<10} {params}")
    if run["credits"]:
        print("agents: " + ", ".join(f"{a} {int(c.get('evaluated', 0))} evaluated / "
                                     f"{int(c.get('improvements', 0))} improvements"
                                     for a, c in run["credits"].items()))
    if lessons:
        print("lessons:")
        for lesson in lessons[:10]:
            print(f"  [{lesson['kind']}] {lesson['text']}")
    if usage["requests"]:
        print(f"llm: {usage['requests']} requests, {usage['prompt_tokens']} prompt + "
              f"{usage['completion_tokens']} completion tokens, cost {usage['cost']:.4g}, "
              + ", ".join(f"{k} {v}" for k, v in sorted(usage["by_status"].items())))
    return 0


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
        print(f"sandbox {name:<11} {line}", file=sys.stderr)
    return 0


# ---- parser and entry -----------------------------------------------------------------------
def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"{v} must be at least 1")
    return v


def _non_negative_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"{text} must be >= 0")
    return v


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelswarm",
        description="A swarm of search agents that optimises GPU kernels. Without a command, "
                    "opens the desktop app.")
    parser.add_argument("--version", action="version", version=f"kernelswarm {__version__}")
    db = argparse.ArgumentParser(add_help=False)
    db.add_argument("--db", metavar="PATH",
                    help="history database (default: $KERNELSWARM_DB or the user data directory)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", parents=[db], help="run a goal headless",
                         description="Run a goal (TOML) headless, or resume an interrupted run.")
    run.add_argument("goal", nargs="?", metavar="GOAL.toml", help="goal file")
    run.add_argument("--seed", type=int, help="swarm seed (overrides the goal)")
    run.add_argument("--max-evals", type=_positive_int, metavar="N",
                     help="evaluation budget, counting those of a resumed run")
    run.add_argument("--time-budget", type=_non_negative_float, metavar="S",
                     help="wall-clock budget in seconds (run clock; 0 = none)")
    run.add_argument("--workers", type=_positive_int, metavar="N", help="evaluation threads")
    run.add_argument("--agents", metavar="A,B,...",
                     help="agents to use (explorer, local, evolution, model, llm); overrides the goal")
    run.add_argument("--llm-base-url", metavar="URL",
                     help="OpenAI-compatible endpoint for the llm agents (key from "
                          "KERNELSWARM_LLM_API_KEY or OPENAI_API_KEY)")
    run.add_argument("--llm-model", metavar="NAME", help="model for the llm agents")
    run.add_argument("--trust-goal-endpoint", action="store_true",
                     help="send the API key to the goal file's [llm] base_url even though it is "
                          "not your configured endpoint")
    run.add_argument("--trace", metavar="FILE.jsonl", help="write every event as a JSON line")
    run.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--resume", type=int, metavar="RUN_ID",
                     help="continue an interrupted run without re-evaluating anything")
    run.add_argument("--cluster", metavar="ADDRESS",
                     help="evaluate on a Ray cluster: auto, host:port or ray://host:10001")
    run.add_argument("--cluster-fallback", choices=("wait", "local"),
                     help="when the cluster disappears: wait for it, or go on here")
    run.set_defaults(func=cmd_run)

    hist = sub.add_parser("history", parents=[db], help="list recorded runs")
    hist.add_argument("--limit", type=_positive_int, default=50, metavar="N")
    hist.set_defaults(func=cmd_history)

    show = sub.add_parser("show", parents=[db], help="show one run")
    show.add_argument("run_id", type=int, metavar="RUN_ID")
    show.add_argument("--top", type=_positive_int, default=10, metavar="N")
    show.set_defaults(func=cmd_show)

    exp = sub.add_parser("export", parents=[db], help="export a run as json, csv or T4")
    exp.add_argument("run_id", type=int, metavar="RUN_ID")
    exp.add_argument("--format", choices=("json", "csv", "t4", "html"), default="json")
    exp.add_argument("-o", "--output", metavar="FILE", help="output file (default: stdout)")
    exp.set_defaults(func=cmd_export)

    dev = sub.add_parser("devices", help="which backends can run here")
    dev.add_argument("--cluster", metavar="ADDRESS", help="list a Ray cluster's nodes and devices")
    dev.set_defaults(func=cmd_devices)

    kt = sub.add_parser("import-kt", help="turn a Kernel Tuner script into a goal directory")
    kt.add_argument("script", metavar="SCRIPT.py", help="a script that calls kernel_tuner.tune_kernel")
    kt.add_argument("-o", "--output", metavar="DIR", help="goal directory (default: SCRIPT_goal)")
    kt.set_defaults(func=cmd_import_kt)

    selftest = sub.add_parser("selftest", help="check this installation (storage, replay, CPU, NVRTC)",
                              add_help=False)
    selftest.add_argument("selftest_args", nargs=argparse.REMAINDER)
    selftest.set_defaults(func=cmd_selftest)
    return parser


def cmd_import_kt(args: argparse.Namespace) -> int:
    from app.kt_import import ImportRefused, import_script

    try:
        done = import_script(args.script, args.output)
    except ImportRefused as exc:
        raise CliError(f"import-kt {args.script}: {exc}") from None
    for note in done.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"wrote {done.goal_path}; run it with: kernelswarm run {done.goal_path}")
    return 0


def cmd_selftest(args: argparse.Namespace) -> int:
    from app.selftest import main as selftest_main

    return selftest_main(args.selftest_args)


def _open_gui(parser: argparse.ArgumentParser) -> int:
    try:
        from app.ui.app import run_gui
    except ImportError:
        parser.print_help()
        return 0
    return int(run_gui() or 0)


def _known_errors() -> tuple[type[BaseException], ...]:
    from app.core.evaluator import BackendUnavailable
    from app.gpu.replay import CacheFileError
    from app.store import StoreError
    from app.core.restrictions import RestrictionError

    return (CliError, GoalError, StoreError, CacheFileError, RestrictionError, BackendUnavailable,
            FileNotFoundError)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        return _open_gui(parser)
    known = _known_errors()
    from app.store import DatabaseError

    try:
        return args.func(args)
    except known as exc:
        print(f"kernelswarm: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except DatabaseError as exc:
        print(f"kernelswarm: error: history database: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # `kernelswarm export 3 | head`
        return 0
    except Exception as exc:
        if os.environ.get("KERNELSWARM_DEBUG"):
            raise
        print(f"kernelswarm: error: {type(exc).__name__}: {exc} "
              "(set KERNELSWARM_DEBUG=1 for the traceback)", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
