"""`kernelswarm run`: a goal run headless, its progress on stderr, a JSON-lines trace, Ctrl-C
that stops cleanly, and the run's summary (the same model `show` and the report read)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from dataclasses import asdict, is_dataclass
from typing import Any, TextIO

from app.cli_common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_NOTHING_SUCCEEDED,
    CliError,
    _fmt,
    _learned_from,
    _open_store,
    summary_lines,
)
from app.goal import Goal, GoalError


def _event_dict(event: Any) -> dict[str, Any]:
    data = asdict(event) if is_dataclass(event) else dict(vars(event))
    return {"event": type(event).__name__, **data}


# ---- run: progress, trace, summary ----------------------------------------------------------
class TraceWriter:
    """Every event as one JSON line, flushed as it happens (a killed run keeps its trace)."""

    def __init__(self, path: str, append: bool) -> None:
        try:
            self._fh = open(path, "a" if append else "w", encoding="utf-8")  # noqa: SIM115 - open for the run
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


def _check_goal_spending(goal: Goal, args: argparse.Namespace) -> None:
    """A goal file may lower the user's spending limits, never raise them or change the model
    unless --trust-goal-llm (a model given with --llm-model is the user's own choice)."""
    from app.llm import settings as llm_settings
    from app.llm import spending

    if "llm" not in goal.swarm.agents or not goal.llm:
        return
    try:
        own = llm_settings.user_endpoint_settings()
    except llm_settings.LLMSettingsError as exc:
        raise CliError(f"your LLM settings: {exc}") from None
    if args.llm_model:
        own.model = args.llm_model
    refusal = spending.needs_confirmation(goal.llm, own)
    if (refusal and args.trust_goal_llm) or (not refusal and args.llm_model):
        spending.approve(goal.llm)  # the engine compares with the saved settings again
    elif refusal:
        raise CliError(f"{refusal} (pass --trust-goal-llm to allow it for this run)")


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
    _check_goal_spending(goal, args)
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
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
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
        session, result, summary = _run_session(args, goal, store, ctrl_c)
        if ctrl_c.presses and result.reason == "stopped":
            print(f"stopped by Ctrl-C after {result.evaluations} evaluations; resume with "
                  f"kernelswarm run --resume {session.run_id}", file=sys.stderr)
            return EXIT_INTERRUPTED
        return _exit_code(result, summary)
    finally:
        ctrl_c.end()
        store.close()


def _run_session(args: argparse.Namespace, goal: Goal, store: Any, ctrl_c: _CtrlC,
                 append_trace: bool = False) -> tuple[Any, Any, Any]:
    """One run of `goal` (or the resumed run), its progress and its summary printed:
    (session, result, summary)."""
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
    summary = _print_summary(store, session.run_id, goal, result, session.unit)
    return session, result, summary


def _exit_code(result: Any, summary: Any) -> int:
    """1 for a run that ended in an error, 3 for one that ended without a single correct
    candidate (a script must not read it as a success), else 0."""
    if result.reason == "error":
        return EXIT_ERROR
    if result.reason != "stopped" and result.best is None \
            and (summary is None or not summary.succeeded):
        return EXIT_NOTHING_SUCCEEDED
    return 0


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
            session, result, summary = _run_session(args, goal_for_model(goal, model), store,
                                                    ctrl_c, append_trace=i > 0)
        except BackendUnavailable as exc:  # this model's actors did not start: go on
            print(f"kernelswarm: error: {model}: {exc}", file=sys.stderr, flush=True)
            lines.append(f"  {model}: no run ({exc})")
            rc = EXIT_ERROR
            continue
        lines.append(_model_line(model, session, result))
        rc = rc or _exit_code(result, summary)
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
             else "no candidate succeeded")
    learned = session.coordinator.learned_from  # a new run: what its device record says
    from_runs = f", started from run {', '.join(str(s['run_id']) for s in learned)}" \
        if learned else ""
    return (f"  {model}: run {session.run_id} {result.reason}, {result.evaluations} "
            f"evaluations, {found}{from_runs}")


def _print_summary(store: Any, run_id: int | None, goal: Goal, result: Any, unit: str) -> Any:
    """The end of `run`: counts, the best, and the run's summary (app.run_summary) from the
    store, as `show` and the report read it. Returns the summary."""
    from app.core.noise import ImprovementCount, new_bests
    from app.run_summary import RunSummary, summarize_store

    history = result.history
    ok = [e for e in history if e.ok]
    print(f"run {run_id} {result.reason}: {result.evaluations} evaluations "
          f"({len(ok)} ok, {len(history) - len(ok)} failed), {result.elapsed_s:.1f} s on the run clock"
          + (" (simulated: the recorded measurements' times)" if goal.backend == "replay" else ""))
    learned = _learned_from(store.get_run(run_id)) if store is not None and run_id is not None \
        else []
    if learned:
        print("started from " + ", ".join(f"run {s.get('run_id')}" for s in learned)
              + " (their best configurations first, evaluated again here)")
    summary = summarize_store(store, run_id) if store is not None and run_id is not None \
        else RunSummary.from_dict(result.summary) if result.summary else None
    best = result.best
    if best is None:
        print("no candidate succeeded" + ("; why:" if summary and summary.failures else ""))
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
    if summary is not None:
        for line in summary_lines(summary, failures_heading=best is not None):
            print(line)
    # counted from the stored rows, as `show`, the report and a reopened window count them
    history = [e for _, e, _ in store.load_evaluations(run_id)] \
        if store is not None and run_id is not None else history
    print(ImprovementCount.of(new_bests(history, goal.objective.minimize)).sentence())
    if result.credits:  # "new bests" is what the allocator rewards; clear ones are improvements
        print("agents:      evaluated  failed  new bests  clear of noise  budget share")
        for name, c in result.credits.items():
            print(f"  {name:<10} {int(c.get('evaluated', 0)):>9} {int(c.get('failed', 0)):>7} "
                  f"{int(c.get('improvements', 0)):>10} "
                  f"{int(c.get('clear_improvements', c.get('improvements', 0))):>15} "
                  f"{c.get('share', 0.0):>13.0%}")
