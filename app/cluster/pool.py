"""ClusterEvaluator: an Evaluator whose evaluation workers are Ray actors on a cluster.

The coordinator sees one Evaluator with `max_parallel` = the number of actors and calls
`evaluate` from its threads as it does locally; each call borrows an idle actor, so results
stream back, and are committed, as they arrive. Faults:

- an actor (or its node) dies during an evaluation: the evaluation runs again once on another
  actor; if that one dies too the candidate is a failed evaluation (reason "crash"): a kernel
  that kills its workers is a failed candidate, not a lost run. Each dead actor is replaced.
- no actor is left and none can be started (the cluster is gone): with fallback "local" the
  run goes on here with the local evaluator; with "wait" it pauses, saying so, and resumes
  when the cluster takes actors again.
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
from app.cluster.settings import ClusterSettings
from app.core.evaluator import DeviceInfo, Evaluator
from app.core.types import CRASH, Candidate, Evaluation
from app.goal import Goal

log = logging.getLogger(__name__)

START_TIMEOUT_S = 120.0  # an actor builds its local evaluator (a worker process) before use
WAIT_RETRY_S = 5.0  # how often a paused run asks the cluster for actors again


@dataclass
class _Actor:
    handle: Any
    info: dict[str, Any]

    @property
    def name(self) -> str:
        return f"{self.info['node']} pid {self.info['pid']}"


class ClusterEvaluator(Evaluator):
    def __init__(self, goal: Goal, validation_cases: Sequence[dict], settings: ClusterSettings,
                 *, local: Callable[[], Evaluator] | None = None, pace: float = 0.0,
                 notify: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self._local_factory = local  # the workstation's evaluator, for fallback "local"
        self._local: Evaluator | None = None
        self._notify = notify or (lambda line: log.warning("%s", line))
        self.ray = connect(settings.address, settings.connect_timeout_s)
        self._errors = _actor_errors(self.ray)
        nodes = cluster_nodes(self.ray)
        self.plan: ActorPlan = plan_actors(nodes, goal.backend, settings)
        self._remote = self.ray.remote(EvaluationActor).options(
            max_restarts=0, max_task_retries=0, **self.plan.options)
        self._args = (goal, list(validation_cases), pace)
        self._cond = threading.Condition()
        self._idle: list[_Actor] = []
        self._busy: dict[str, _Actor] = {}  # candidate key -> actor evaluating it
        self._alive = 0
        self._starting = 0
        self._closed = False
        started = self._start_many(self.plan.count)
        if not started:
            raise ClusterUnavailable(f"no worker actor started on the cluster at "
                                     f"{settings.address} ({self.plan.why} asked)")
        first = started[0]
        self.space = self.ray.get(first.handle.space.remote())
        self._device = first.info
        self.devices = sorted({a.info["device_id"] for a in started})
        self.max_parallel = len(started)

    # ---- actors ---------------------------------------------------------------------------
    def _start_many(self, n: int) -> list[_Actor]:
        handles = [self._remote.remote(*self._args) for _ in range(n)]
        started: list[_Actor] = []
        first_error = ""
        for h in handles:
            try:
                started.append(_Actor(h, self.ray.get(h.info.remote(), timeout=START_TIMEOUT_S)))
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
                if self._closed or (self._alive == 0 and self._starting == 0):
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
        deaths: list[str] = []
        while True:
            actor = self._take()
            if actor is None:
                return self._without_cluster(candidate)
            with self._cond:
                self._busy[candidate.key] = actor
            try:
                evaluation = self.ray.get(actor.handle.evaluate.remote(candidate))
            except self._errors as exc:
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

    def _without_cluster(self, candidate: Candidate) -> Evaluation:
        if self.settings.fallback == "local" and self._local_factory is not None:
            with self._cond:
                if self._local is None:
                    self._notify(f"the Ray cluster at {self.settings.address} is gone; "
                                 "continuing on this machine (fallback = local)")
                    self._local = self._local_factory()
            evaluation = self._local.evaluate(candidate)
            evaluation.resources.update(node="local", device=self._local.device().name,
                                        device_id=f"local/{self._local.device().name}")
            return evaluation
        self._notify(f"the Ray cluster at {self.settings.address} has no worker left; the run "
                     "is paused until it takes actors again (Ctrl-C stops it, nothing "
                     "committed is lost; --cluster-fallback local goes on here)")
        while not self._closed:
            try:
                self._start_many(1)
                return self.evaluate(candidate)
            except Exception as exc:  # noqa: BLE001 - still gone: wait and ask again
                log.info("cluster still unavailable: %s", _first_line(exc))
                time.sleep(WAIT_RETRY_S)
        return Evaluation(key=candidate.key, config=dict(candidate.config), ok=False,
                          reason=CRASH, detail="the run closed while the cluster was gone",
                          agent=candidate.agent, source=candidate.source,
                          parent_key=candidate.parent_key)

    def running(self) -> dict[str, dict[str, Any]]:
        """Candidate key -> info of the actor evaluating it now (progress views, tests)."""
        with self._cond:
            return {k: dict(a.info) for k, a in self._busy.items()}

    def _on_any(self, method: str, *args: Any) -> Any:
        actor = self._take()
        if actor is None:
            return None
        try:
            result = self.ray.get(getattr(actor.handle, method).remote(*args))
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
        return DeviceInfo(kind=d["kind"], name=d["device"], details=details)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            actors = list(self._idle) + list(self._busy.values())
            self._idle.clear()
            self._cond.notify_all()
        for a in actors:
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
