"""ClusterEvaluator: an Evaluator whose evaluation workers are Ray actors on a cluster.

The coordinator sees one Evaluator with `max_parallel` = the number of actors and calls
`evaluate` from its threads as it does locally; each call borrows an idle actor, so results
stream back, and are committed, as they arrive. Faults:

- an actor (or its node) dies during an evaluation: the evaluation runs again once on another
  actor; if that one dies too the candidate is a failed evaluation (reason "crash"): a kernel
  that kills its workers is a failed candidate, not a lost run. Each dead actor is replaced.
- no actor is left and none can be started (the cluster is gone): with fallback "local" the
  run goes on here with the local evaluator; with "wait" it pauses, saying so, and resumes
  when the cluster takes actors again, or goes on here when the user chooses to
  (`continue_here`: the window's button, a command to the engine process).

What the user must know (gone, going on here, back) is a Notice on the run's bus (attach_bus),
so the window and the CLI say it where the user looks, not only in a log.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from app.cluster.actor import EvaluationActor
from app.cluster.connect import ClusterUnavailable, connect
from app.cluster.devices import ActorPlan, cluster_nodes, plan_actors
from app.core.cluster_settings import ClusterSettings
from app.core.evaluator import DeviceInfo, Evaluator
from app.core.events import EventBus, Notice
from app.core.types import CRASH, Candidate, Evaluation
from app.goal import Goal

log = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0  # an actor builds its local evaluator (a worker process) before use
WAIT_RETRY_S = 5.0  # how often a paused run asks the cluster for actors again
WATCH_PERIOD_S = 1.0  # how often the head's port is tried while the run uses the cluster
GONE_AFTER = 3  # failed tries in a row: the cluster is gone


@dataclass
class _Actor:
    handle: Any
    info: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.info['node']} pid {self.info['pid']}"


class ClusterEvaluator(Evaluator):
    def __init__(self, goal: Goal, validation_cases: Sequence[dict], settings: ClusterSettings,
                 *, wire: Callable[[], None], local: Callable[[], Evaluator] | None = None,
                 pace: float = 0.0,
                 notify: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self._local_factory = local  # the workstation's evaluator, for fallback "local"
        self._local: Evaluator | None = None
        self._notify = notify  # besides the bus (tests read the lines here)
        self._bus: EventBus | None = None
        self._run_id: int | None = None
        self._here = threading.Event()  # the user chose to go on on this machine
        self.ray = connect(settings.address, settings.connect_timeout_s)
        self._errors = _actor_errors(self.ray)
        nodes = cluster_nodes(self.ray)
        self.plan: ActorPlan = plan_actors(nodes, goal.backend, settings)
        self._remote = self.ray.remote(EvaluationActor).options(
            max_restarts=0, max_task_retries=0, **self.plan.options)
        # `wire` fills each actor's registries (the session's wire(): this layer cannot import it)
        self._args = (goal, list(validation_cases), wire, pace)
        self._cond = threading.Condition()
        self._idle: list[_Actor] = []
        self._busy: dict[str, _Actor] = {}  # candidate key -> actor evaluating it
        self._alive = 0
        self._starting = 0
        self._closed = False
        self._told = False  # the user was told the cluster is gone (once per outage)
        started = self._start_many(self.plan.count)
        if not started:
            raise ClusterUnavailable(f"no worker actor started on the cluster at "
                                     f"{settings.address} ({self.plan.why} asked)")
        first = started[0]
        self.space = self.ray.get(first.handle.space.remote())
        self._device = first.info
        self.devices = sorted({a.info["device_id"] for a in started})
        self.max_parallel = len(started)
        self._gone = threading.Event()
        self._head = self.ray.get_runtime_context().gcs_address  # "auto" resolved
        threading.Thread(target=self._watch, name="cluster-watch", daemon=True).start()

    def _watch(self) -> None:
        """Try the head's port every second: a dead head never answers Ray's calls (they hang),
        so the run learns it is gone here and stops waiting on them."""
        from app.cluster.connect import check_reachable

        misses = 0
        while not self._closed and not self._gone.is_set():
            try:
                check_reachable(self._head, WATCH_PERIOD_S)
                misses = 0
            except ClusterUnavailable:
                misses += 1
                if misses >= GONE_AFTER:
                    self._gone.set()
                    with self._cond:
                        self._cond.notify_all()
                    return
            time.sleep(WATCH_PERIOD_S)

    # ---- actors ---------------------------------------------------------------------------
    def _start_many(self, n: int) -> list[_Actor]:
        handles = [self._remote.remote(*self._args) for _ in range(n)]
        refs = [h.info.remote() for h in handles]
        # one deadline for all: an actor the cluster cannot place (too few GPUs) is left out
        ready, _ = self.ray.wait(refs, num_returns=len(refs), timeout=START_TIMEOUT_S)
        started: list[_Actor] = []
        first_error = "" if len(ready) == n else f"{n - len(ready)} of {n} never started"
        for h, ref in zip(handles, refs):
            try:
                if ref not in ready:
                    raise TimeoutError(f"not placed within {START_TIMEOUT_S:g} s")
                started.append(_Actor(h, self.ray.get(ref)))
            except Exception as exc:  # noqa: BLE001 - an actor that cannot start is left out
                first_error = first_error or _first_line(exc)
                self.ray.kill(h)
        if not started and first_error:
            raise ClusterUnavailable(f"worker actors failed to start on the cluster at "
                                     f"{self.settings.address}: {first_error}")
        with self._cond:
            self._idle.extend(started)
            self._alive += len(started)
            self._cond.notify_all()
        return started

    def _replace(self) -> None:
        """Start one actor in place of a dead one, off the evaluating thread."""
        def start() -> None:
            try:
                self._start_many(1)
            except Exception as exc:  # noqa: BLE001 - the cluster may be gone: see _take
                log.info("replacement actor did not start: %s", _first_line(exc))
            finally:
                with self._cond:
                    self._starting -= 1
                    self._cond.notify_all()

        with self._cond:
            if self._closed:
                return
            self._starting += 1
        threading.Thread(target=start, name="cluster-replace", daemon=True).start()

    def _take(self) -> _Actor | None:
        """An idle actor (a dead one never is: a requeued evaluation lands on another); None
        when none is alive or starting."""
        with self._cond:
            while True:
                if self._idle:
                    return self._idle.pop(0)
                if self._closed or self._gone.is_set() or (
                        self._alive == 0 and self._starting == 0):
                    return None
                self._cond.wait(0.5)

    def _release(self, actor: _Actor) -> None:
        with self._cond:
            self._idle.append(actor)
            self._cond.notify()

    def _died(self, actor: _Actor) -> None:
        with self._cond:
            self._alive -= 1
        self._replace()

    # ---- evaluating ------------------------------------------------------------------------
    def evaluate(self, candidate: Candidate) -> Evaluation:
        if self._here.is_set():  # chosen while the cluster was gone: the rest of the run is here
            return self._without_cluster(candidate)
        deaths: list[str] = []
        while True:
            actor = self._take()
            if actor is None:
                return self._without_cluster(candidate)
            with self._cond:
                self._busy[candidate.key] = actor
            try:
                evaluation = self._result(actor.handle.evaluate.remote(candidate))
                if evaluation is None:  # the cluster went away meanwhile: not this candidate's fault
                    return self._without_cluster(candidate)
            except Exception as exc:  # sorted below: the cluster, the actor, or a bug
                if not self._head_answers():  # the cluster died (a broken pipe to its raylet,
                    return self._without_cluster(candidate)  # dead actors): not this candidate
                if not isinstance(exc, self._errors):
                    raise
                self._died(actor)
                deaths.append(actor.name)
                log.warning("worker actor %s died evaluating %s: %s", actor.name, candidate.key,
                            _first_line(exc))
                if len(deaths) >= 2:
                    return _killed_twice(candidate, deaths)
                continue
            finally:
                with self._cond:
                    self._busy.pop(candidate.key, None)
            self._release(actor)
            if deaths:
                evaluation.resources["requeued_after"] = deaths[0]
            return evaluation

    def _head_answers(self) -> bool:
        from app.cluster.connect import check_reachable

        try:
            check_reachable(self._head, WATCH_PERIOD_S)
            return True
        except ClusterUnavailable:
            self._gone.set()
            return False

    def _result(self, ref: Any) -> Any:
        """The task's result; None when the cluster is gone before it comes."""
        while not self._gone.is_set():
            ready, _ = self.ray.wait([ref], timeout=0.5)
            if ready:
                return self.ray.get(ready[0])
        return None

    # ---- the cluster gone -------------------------------------------------------------------
    def attach_bus(self, bus: EventBus, run_id: int | None) -> None:
        """Where notices go: the run's bus (RunSession attaches it)."""
        self._bus, self._run_id = bus, run_id

    def _tell(self, text: str, choices: tuple[str, ...] = ()) -> None:
        if self._notify is not None:
            self._notify(text)
        if self._bus is not None:
            self._bus.publish(Notice(text=text, choices=choices, run_id=self._run_id))
        elif self._notify is None:
            log.warning("%s", text)

    def continue_here(self) -> bool:
        """The user's choice while the run waits for a cluster that went away: go on here for
        the rest of the run. False when there is no local evaluator to go on with."""
        if self._local_factory is None:
            return False
        self._here.set()
        with self._cond:
            self._cond.notify_all()
        return True

    def _without_cluster(self, candidate: Candidate) -> Evaluation:
        if self._local_factory is not None and (self.settings.fallback == "local"
                                                or self._here.is_set()):
            with self._cond:
                if self._local is None:
                    why = "fallback = local" if self.settings.fallback == "local" else "your choice"
                    self._tell(f"the Ray cluster at {self.settings.address} is gone; "
                               f"continuing on this machine ({why})")
                    self._local = self._local_factory()
            evaluation = self._local.evaluate(candidate)
            evaluation.resources.update(node="local", device=self._local.device().name,
                                        device_id=f"local/{self._local.device().name}")
            return evaluation
        with self._cond:
            out = self._gone.is_set() or (self._alive == 0 and self._starting == 0)
            told, self._told = self._told, self._told or out
        if not out:  # another thread rejoined meanwhile
            return self.evaluate(candidate)
        if not told:  # once per outage, not once per waiting evaluation
            self._tell(f"the Ray cluster at {self.settings.address} is gone or has no worker "
                       "left; the run is paused until it comes back (nothing committed is lost)",
                       choices=("continue_here",) if self._local_factory is not None else ())
        while not self._closed and not self._gone.is_set() and not self._here.is_set():
            try:
                self._start_many(1)
                return self.evaluate(candidate)
            except Exception as exc:  # noqa: BLE001 - still gone: wait and ask again
                log.info("cluster still unavailable: %s", _first_line(exc))
                with self._cond:  # woken early by continue_here
                    self._cond.wait(WAIT_RETRY_S)
        if self._gone.is_set() and not self._here.is_set():
            self._wait_for_head()
        if self._closed:
            return Evaluation(key=candidate.key, config=dict(candidate.config), ok=False,
                              reason=CRASH, detail="the run closed while the cluster was gone",
                              agent=candidate.agent, source=candidate.source,
                              parent_key=candidate.parent_key)
        return self.evaluate(candidate)  # rejoined, or here by the user's choice

    def _wait_for_head(self) -> None:
        """Paused: wait for the head to answer again, then join it afresh with new actors."""
        from app.cluster.connect import check_reachable

        with self._cond:  # one thread rejoins; the others wait for it
            while self._gone.is_set() and not self._closed and not self._here.is_set():
                try:
                    check_reachable(self._head, WATCH_PERIOD_S)
                    self._rejoin()
                except ClusterUnavailable as exc:
                    log.info("cluster still gone: %s", exc)
                    self._cond.wait(WAIT_RETRY_S)

    def _rejoin(self) -> None:
        from app.cluster.connect import disconnect

        disconnect()
        self.ray = connect(self.settings.address, self.settings.connect_timeout_s)
        self._remote = self.ray.remote(EvaluationActor).options(
            max_restarts=0, max_task_retries=0, **self.plan.options)
        self._idle.clear()
        self._busy.clear()
        self._alive, self._starting = 0, 1  # starting: other threads wait for these actors
        self._gone.clear()
        self._cond.release()  # _start_many takes the lock itself
        try:
            self._start_many(self.plan.count)
        finally:
            self._cond.acquire()
            self._starting -= 1
            self._told = False
        threading.Thread(target=self._watch, name="cluster-watch", daemon=True).start()
        self._tell(f"the Ray cluster at {self.settings.address} is back; the run goes on")

    def running(self) -> dict[str, dict[str, Any]]:
        """Candidate key -> info of the actor evaluating it now (progress views, tests)."""
        with self._cond:
            return {k: dict(a.info) for k, a in self._busy.items()}

    def _on_any(self, method: str, *args: Any) -> Any:
        actor = self._take()
        if actor is None:
            return None
        try:
            result = self._result(getattr(actor.handle, method).remote(*args))
        except self._errors:
            self._died(actor)
            return None
        self._release(actor)
        return result

    def recheck(self, candidate: Candidate) -> Evaluation | None:
        return self._on_any("recheck", candidate)

    def baseline(self) -> float | None:
        return self._on_any("baseline")

    def limit(self) -> float | None:
        return self._on_any("limit")

    def final_comparison(self, best: Evaluation) -> dict[str, float] | None:
        return self._on_any("final_comparison", best)

    def device(self) -> DeviceInfo:
        d = self._device
        details = dict(d["details"])
        details.update(cluster=self.settings.address, actors=self.max_parallel,
                       devices=len(self.devices))
        name, model = d["device"], self.plan.model
        if model:  # actors pinned to one GPU model: the run's device is named by it, so runs
            details["gpu_model"] = model  # on two models are two devices (and transfer between)
            if model.lower() not in name.lower():  # a replaying actor names its recording
                name = f"{model} ({name})"
        return DeviceInfo(kind=d["kind"], name=name, details=details)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            actors = list(self._idle) + list(self._busy.values())
            self._idle.clear()
            self._cond.notify_all()
        for a in actors if not self._gone.is_set() else []:  # a gone cluster has none to close
            try:
                self.ray.get(a.handle.close.remote(), timeout=10)
            except Exception as exc:  # noqa: BLE001 - dead already, or the cluster is gone
                log.info("actor %s did not close: %s", a.name, _first_line(exc))
            self.ray.kill(a.handle)
        if self._local is not None:
            self._local.close()


def _actor_errors(ray: Any) -> tuple[type[BaseException], ...]:
    from ray import exceptions as rx

    found = [getattr(rx, n, None) for n in ("RayActorError", "ActorUnavailableError",
                                               "WorkerCrashedError", "NodeDiedError")]
    return tuple(e for e in found if isinstance(e, type))


def _killed_twice(candidate: Candidate, deaths: list[str]) -> Evaluation:
    return Evaluation(key=candidate.key, config=dict(candidate.config), ok=False, reason=CRASH,
                      detail=f"the evaluation killed two cluster workers ({'; '.join(deaths)}): "
                             "a kernel that kills its worker is a failed candidate",
                      agent=candidate.agent, source=candidate.source,
                      parent_key=candidate.parent_key,
                      resources={"node": "", "device": "", "killed_workers": list(deaths)})


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
