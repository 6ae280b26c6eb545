"""One run of a goal, end to end: goal -> evaluator -> coordinator -> store and events.

Used by the CLI, the GUI and the benchmarks alike, so a run behaves the same everywhere.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from app.core.evaluator import Evaluator
from app.core.events import EventBus, Telemetry
from app.goal import Goal
from app.gpu.registry import BackendSpec, backend_spec, check_backend_fields
from app.swarm.agents import agent_spec, check_agents
from app.swarm.coordinator import Coordinator, RunResult
from app.swarm.transfer import evidence_from_store

if TYPE_CHECKING:  # the store is optional: benchmarks run without one
    from app.store import Store

log = logging.getLogger(__name__)

TELEMETRY_PERIOD_S = 1.0


def check_goal(goal: Goal) -> BackendSpec:
    """Everything a run needs to know about its goal, checked once per run: the goal's own
    fields, then what only the registries can judge (the backend and its operator, the agents
    and the settings they read). Raises GoalError naming the field; returns the backend."""
    import app.llm  # noqa: F401 - registers the llm agent with the swarm's agent registry

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
    [cluster] table (Ray is imported only then; app.cluster sits above the backends)."""
    spec = backend_spec(goal.backend)
    if not goal.cluster:
        return spec.make_evaluator(goal, cases)
    from app.cluster.pool import ClusterEvaluator
    from app.core.cluster_settings import check_cluster_table

    return ClusterEvaluator(goal, cases, check_cluster_table(goal.cluster),
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
        if resume_run_id is not None:
            assert store is not None
            store.get_run(resume_run_id)  # raises a clear error for an unknown run
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
            record = {"kind": device.kind, "name": device.name, **device.details, "unit": self.unit,
                      **learned}
            self.run_id = store.create_run(goal, record) if store else None
        baseline = self.evaluator.baseline()
        name_baseline = getattr(self.evaluator, "baseline_name", None)
        baseline_name = (name_baseline() or "") if baseline is not None and name_baseline else ""
        if baseline_name and self.run_id and store is not None:
            # which library or compiler baseline "the baseline" is, for the report; a resumed
            # run re-measured it, and may have another (a compiler gone, a library added)
            stored = store.get_run(self.run_id)["device"] if resume_run_id is not None else record
            if stored.get("baseline") != baseline_name:
                store.set_run_info(self.run_id, device={**stored, "baseline": baseline_name})
        limit = self.evaluator.limit()
        # strategies the swarm makes by name; the others (llm) are made here as a team
        agents: list[Any] = [a for a in goal.swarm.agents if agent_spec(a).make is not None]
        evaluator_for_run = self.evaluator
        self.llm_team = None
        if "llm" in goal.swarm.agents:
            self.llm_team = self._make_llm_team(goal)
            agents += self.llm_team.agents
            evaluator_for_run = self.llm_team.evaluator  # source policy before compiling
        self.coordinator = Coordinator(
            self.evaluator.space, evaluator_for_run, agents=agents,
            minimize=goal.objective.minimize, stop=goal.stop, workers=goal.swarm.workers,
            seed=goal.swarm.seed, bus=self.bus, run_id=self.run_id, prior=prior,
            prior_elapsed_s=prior_elapsed,
            simulated_clock=self.backend.runs_on_simulated_clock(goal),
            target_value=target_value(goal, baseline, limit), baseline_value=baseline,
            baseline_name=baseline_name,
            limit_value=limit, goal_name=goal.name, backend=goal.backend, unit=self.unit,
            transfer=transfer,
        )
        self._unsubscribe: list = []
        if store is not None and self.run_id is not None:
            # critical: a failed commit must stop the run, never silently drop an evaluation.
            # The subscriber also adds failing verification cases to the goal's validation set.
            self._unsubscribe.append(self.bus.subscribe(store.subscriber(self.run_id), critical=True))
        self._telemetry_stop = threading.Event()
        attach_bus = getattr(self.evaluator, "attach_bus", None)
        if attach_bus is not None:  # backends with their own telemetry sampler (NVML)
            attach_bus(self.bus, self.run_id)

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
                             retime=getattr(self.evaluator, "retime_pair", None))

    def _telemetry_loop(self) -> None:
        sample = getattr(self.evaluator, "sample_telemetry", None)
        while sample and not self._telemetry_stop.wait(TELEMETRY_PERIOD_S):
            try:
                readings = sample()
            except Exception:  # telemetry is best effort; the run goes on without it
                log.exception("telemetry sampling failed")
                return
            if readings:
                self.bus.publish(Telemetry(device=self.evaluator.device().name,
                                           readings=readings, run_id=self.run_id))

    def run(self) -> RunResult:
        telemetry = threading.Thread(target=self._telemetry_loop, name="telemetry", daemon=True)
        telemetry.start()
        try:
            result = self.coordinator.run()
            self._final_comparison(result)
            return result
        finally:
            self._telemetry_stop.set()
            self.evaluator.close()
            for unsubscribe in self._unsubscribe:
                unsubscribe()

    def _final_comparison(self, result: Any) -> None:
        """Before a speedup is claimed, the best and the baseline are timed again, interleaved;
        the re-timed baseline becomes the run's baseline."""
        compare = getattr(self.evaluator, "final_comparison", None)
        if compare is None or result.best is None or result.reason in ("stopped", "error"):
            return
        try:
            figures = compare(result.best)
        except Exception:  # the run's results stand without the re-timing
            log.exception("final comparison failed")
            return
        if not figures:
            return
        result.comparison = figures
        if self.store is not None and self.run_id is not None:
            self.store.set_run_info(self.run_id, baseline_value=figures["baseline_value"])

    def pause(self) -> None:
        self.coordinator.pause()

    def resume(self) -> None:
        self.coordinator.resume()

    def stop(self) -> None:
        self.coordinator.stop()

    def continue_here(self) -> bool:
        """A run waiting for a cluster that went away goes on on this machine (the user's
        choice, app.cluster.pool); False when its evaluator has no such choice."""
        choose = getattr(self.evaluator, "continue_here", None)
        return bool(choose is not None and choose())
