"""One run of a goal, end to end: goal -> evaluator -> coordinator -> store and events.

Used by the CLI, the GUI and the benchmarks alike, so a run behaves the same everywhere.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.core.evaluator import Evaluator
from app.core.events import EventBus
from app.core.types import Evaluation
from app.goal import Goal
from app.gpu.registry import BackendSpec, backend_spec, check_backend_fields
from app.run_summary import RunSummary, summarize
from app.session.registries import wire
from app.swarm.agents import agent_spec, check_agents
from app.swarm.coordinator import Coordinator, RunResult
from app.swarm.plan import RunPlan
from app.swarm.transfer import evidence_from_store

if TYPE_CHECKING:  # the store is optional: benchmarks run without one
    from app.store import Store

log = logging.getLogger(__name__)



def check_goal(goal: Goal) -> BackendSpec:
    """Everything a run needs to know about its goal, checked once per run: the goal's own
    fields, then what only the registries can judge (the backend and its operator, the agents
    and the settings they read). Raises GoalError naming the field; returns the backend."""
    wire()
    goal.validate()
    spec = check_backend_fields(goal)
    check_agents(goal)
    return spec


def build_evaluator(goal: Goal, validation_cases: Sequence[dict] = ()) -> Evaluator:
    """The backend a goal asks for (a goal already checked by check_goal). Raises
    BackendUnavailable / CacheFileError / GoalError with a message that names the problem."""
    return make_evaluator(goal, list(validation_cases))  # on a Ray cluster: goal.cluster


def make_evaluator(goal: Goal, cases: Sequence[dict]) -> Evaluator:
    """The evaluator a goal runs on: its backend's, on a Ray cluster when the goal has a
    [cluster] table (Ray is imported only then; app.cluster sits above the backends). Wires
    the registries first: a benchmark may build an evaluator without checking the goal."""
    wire()
    spec = backend_spec(goal.backend)
    if not goal.cluster:
        return spec.make_evaluator(goal, cases)
    from app.cluster.pool import ClusterEvaluator
    from app.core.cluster_settings import check_cluster_table

    return ClusterEvaluator(goal, cases, check_cluster_table(goal.cluster), wire=wire,
                            local=lambda: spec.make_evaluator(goal, cases))


def target_value(goal: Goal, baseline: float | None, limit: float | None) -> float | None:
    """The goal's target in the objective's unit, when it can be computed."""
    kind, value = goal.target.kind, goal.target.value
    minimize = goal.objective.minimize
    if kind == "absolute":
        return value
    if kind == "speedup" and baseline:
        return baseline / value if minimize else baseline * value
    if kind == "fraction_of_limit" and limit:
        return limit / value if minimize else limit * value
    return None


KERNEL_SOURCE_CHARS = 200_000  # a user's kernel is kept with the run up to this size


def kernel_source_record(goal: Goal) -> dict[str, Any]:
    """A custom kernel's own source, kept in the run's record: the report shows what ran even
    after the file is edited or the goal directory is gone. Empty for catalog operators (their
    template is in the catalog) and for files that cannot be read (the run's check says why)."""
    table = goal.kernel
    if table is None or not table.source:
        return {}
    names = table.source if isinstance(table.source, list) else [table.source]
    base = Path(goal.source_path).parent if goal.source_path else Path.cwd()
    try:  # joined as app.catalog.custom.spec joins them for the compiler
        text = "\n".join((base / name).read_text(encoding="utf-8") for name in names)
    except (OSError, UnicodeDecodeError):
        return {}
    if len(text) > KERNEL_SOURCE_CHARS:
        return {}
    language = table.language or ("cuda" if goal.backend == "cuda" else "c")
    return {"kernel_source": {"files": [Path(n).name for n in names], "text": text,
                              "language": language}}


class RunSession:
    """Runs a goal (or resumes a run) with its evaluator, coordinator and store subscriber."""

    def __init__(self, goal: Goal | None = None, store: Store | None = None,
                 bus: EventBus | None = None, resume_run_id: int | None = None,
                 evaluator: Evaluator | None = None) -> None:
        if goal is None and resume_run_id is None:
            raise ValueError("give a goal to run or a run to resume")
        if resume_run_id is not None and store is None:
            raise ValueError("resuming a run needs the store it was recorded in")
        self.store = store
        self.bus = bus or EventBus()
        prior: list[Any] = []
        prior_elapsed = 0.0
        stored_run: dict[str, Any] = {}
        if resume_run_id is not None:
            assert store is not None
            stored_run = store.get_run(resume_run_id)  # a clear error for an unknown run
            goal = goal or store.goal_of_run(resume_run_id)
            rows = store.load_evaluations(resume_run_id)
            prior = [e for _, e, _ in rows]
            prior_elapsed = max((t for _, _, t in rows), default=0.0)
            self.run_id: int | None = resume_run_id
        assert goal is not None
        self.goal = goal
        self.backend = check_goal(goal)
        self.unit = self.backend.unit(goal)  # decided once; published and stored with the run
        cases = store.validation_cases(goal) if store is not None else []
        self.evaluator = evaluator or build_evaluator(goal, cases)
        device = self.evaluator.device()
        transfer = None
        if resume_run_id is None and store is not None and goal.swarm.transfer:
            transfer = evidence_from_store(  # runs of this kernel on other devices
                store, goal=goal, kernel=str(device.details.get("kernel", "")),
                device_name=device.name, space=self.evaluator.space,
                minimize=goal.objective.minimize)
        if resume_run_id is None:
            # the unit rides in the run's device record, so reopened runs and exports know it;
            # so do the earlier runs this one learned from
            learned = {"learned_from": transfer.sources} if transfer else {}
            self.record: dict[str, Any] = {"kind": device.kind, "name": device.name,
                                           **device.details, "unit": self.unit, **learned}
            self.record.update(kernel_source_record(goal))
            self.run_id = store.create_run(goal, self.record) if store else None
        else:
            self.record = {**kernel_source_record(goal), **stored_run["device"]}
        measured = self.evaluator.baseline()
        measured_name = (self.evaluator.baseline_name() or "") if measured is not None else ""
        self.measured_baseline_name = measured_name  # what a final re-timing times again
        baseline, baseline_name = self._run_baseline(stored_run, measured, measured_name)
        self.baseline_value, self.baseline_name = baseline, baseline_name
        limit = self.limit_value = self.evaluator.limit()
        # strategies the swarm makes by name; the others (llm) are made here as a team
        agents: list[Any] = [a for a in goal.swarm.agents if agent_spec(a).make is not None]
        evaluator_for_run = self.evaluator
        self.llm_team = None
        if "llm" in goal.swarm.agents:
            self.llm_team = self._make_llm_team(goal)
            agents += self.llm_team.agents
            evaluator_for_run = self.llm_team.evaluator  # source policy before compiling
        plan = RunPlan(
            agents=agents, minimize=goal.objective.minimize, seed=goal.swarm.seed,
            workers=goal.swarm.workers, max_evals=goal.stop.max_evals,
            time_budget_s=goal.stop.time_budget_s, plateau_patience=goal.stop.plateau_patience,
            target_value=target_value(goal, baseline, limit), baseline_value=baseline,
            baseline_name=baseline_name, limit_value=limit, goal_name=goal.name,
            backend=goal.backend, unit=self.unit, run_id=self.run_id, prior=prior,
            prior_elapsed_s=prior_elapsed, transfer=transfer,
            simulated_clock=self.backend.runs_on_simulated_clock(goal))
        self.coordinator = Coordinator(self.evaluator.space, evaluator_for_run, plan,
                                       bus=self.bus, on_finish=self._finish)
        self._unsubscribe: list = []
        if store is not None and self.run_id is not None:
            # critical: a failed commit must stop the run, never silently drop an evaluation.
            # The subscriber also adds failing verification cases to the goal's validation set.
            self._unsubscribe.append(self.bus.subscribe(store.subscriber(self.run_id), critical=True))
        # backends with their own events (CUDA's NVML telemetry sampler, a cluster's questions)
        self.evaluator.attach_bus(self.bus, self.run_id)

    def _run_baseline(self, stored_run: dict[str, Any], measured: float | None,
                      measured_name: str) -> tuple[float | None, str]:
        """The baseline the run's rows are compared to: the one measured at its start. A resumed
        run keeps it (re-measuring would rescale every stored row); what it measures now is kept
        beside it in the record, never applied. A run without one takes the first measured, and
        its record says it was measured at a resume."""
        record = self.record
        if not stored_run:  # a new run: this is its start
            if measured_name:
                record["baseline"] = measured_name
                self._save_record()
            return measured, measured_name
        record["resumes"] = [*record.get("resumes", []),
                             {"at": time.time(), "baseline_value": measured,
                              "baseline_name": measured_name}]
        kept = stored_run.get("baseline_value")
        if kept is None and measured is not None:
            record.update(baseline=measured_name, baseline_at="resume")
            kept = measured
        self._save_record()
        return kept, str(record.get("baseline") or "") if kept is not None else ""

    def _save_record(self) -> None:
        if self.store is not None and self.run_id is not None:
            self.store.set_run_info(self.run_id, device=self.record)

    def _finish(self, reason: str, best: Evaluation | None, history: list[Evaluation]
                ) -> dict[str, Any]:
        """The end of the search, before RunFinished: the best re-timed against the baseline,
        then the run's summary as `show` and the report will give it."""
        comparison = self._final_comparison(reason, best)
        summary = self.summary(history)
        return {"comparison": comparison, "summary": summary.to_dict(),
                "speedup": summary.speedup, "speedup_basis": summary.speedup_basis}

    def summary(self, history: list[Evaluation] | None = None) -> RunSummary:
        """The run's summary: from the store when there is one (what a reopened run shows),
        otherwise from the evaluations in memory, read the same way."""
        if self.store is not None and self.run_id is not None:
            return summarize(self.store.get_run(self.run_id),
                             self.store.evaluation_rows(self.run_id), unit=self.unit)
        rows = [{**e.to_dict(), "index": i} for i, e in enumerate(history or [], 1)]
        run = {"id": None, "minimize": self.goal.objective.minimize,
               "baseline_value": self.baseline_value, "limit_value": self.limit_value,
               "device": self.record}
        return summarize(run, rows, unit=self.unit)

    def _make_llm_team(self, goal: Goal) -> Any:
        from app.llm import make_llm_team
        from app.llm.settings import run_settings

        # The user's saved settings, then the goal's [llm] table, then KERNELSWARM_LLM_* vars;
        # a goal's base_url other than the user's own endpoint is refused unless approved
        # (EndpointNotTrusted): the API key goes only where the user said.
        settings = run_settings(goal.llm)
        db_path = getattr(self.store, "path", None) if self.store is not None else None
        # close calls between a rewrite and its parent are re-timed, interleaved, where the
        # backend can (cpu, cuda: retime_pair); replay cannot, and there the lesson says "within the spread"
        return make_llm_team(goal, self.evaluator, settings=settings, bus=self.bus,
                             run_id=self.run_id, db_path=db_path,
                             retime=self.evaluator.retime_pair if self.evaluator.can_retime else None)

    def run(self) -> RunResult:
        try:
            return self.coordinator.run()  # re-timed and summarised before RunFinished
        finally:
            self.evaluator.close()
            for unsubscribe in self._unsubscribe:
                unsubscribe()

    def _final_comparison(self, reason: str, best: Evaluation | None) -> dict[str, Any]:
        """Before a speedup is claimed, the best and the baseline are timed again, interleaved.
        The figures are kept in the run's record as a fact of their own, beside the baseline
        measured at the start (which the stored rows stay compared to)."""
        if best is None or reason in ("stopped", "error"):
            return {}
        try:
            figures = self.evaluator.final_comparison(best)
        except Exception:  # the run's results stand without the re-timing
            log.exception("final comparison failed")
            return {}
        if not figures:
            return {}
        numbers = {k: float(v) for k, v in figures.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        self.record["final_comparison"] = {
            **numbers, "key": best.key, "at": time.time(),
            "baseline_name": self.measured_baseline_name}
        self._save_record()
        return dict(figures)

    def pause(self) -> None:
        self.coordinator.pause()

    def resume(self) -> None:
        self.coordinator.resume()

    def stop(self) -> None:
        self.coordinator.stop()

    def continue_here(self) -> bool:
        """A run waiting for a cluster that went away goes on on this machine (the user's
        choice, app.cluster.pool); False when its evaluator has no such choice."""
        return self.evaluator.continue_here()
