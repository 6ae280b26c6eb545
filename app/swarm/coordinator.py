"""The coordinator: runs the swarm's agents over a shared blackboard until a stop rule fires.

One coordinator thread owns the loop: it asks agents for proposals (budget moves toward agents
that recently improved), dedupes them on the blackboard, hands candidates to a thread pool that
calls the evaluator (up to `workers` at once, capped by the evaluator's evaluation workers) and
accepts results one at a time: publish (the store commits it), record on the board, let every
agent observe it, update credits and lessons. With one worker the run is deterministic for a
seed.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import logging
import random
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from app.core.evaluator import Evaluator
from app.core.events import (
    AgentCredit,
    BestRechecked,
    BestRevoked,
    Evaluated,
    EventBus,
    LessonLearned,
    NewBest,
    Proposed,
    RunFinished,
    RunStarted,
)
from app.core.noise import clear_of_noise, spread_of
from app.core.space import SearchSpace
from app.core.types import CRASH, Candidate, Evaluation
from app.swarm.adversary_driver import DEFAULT_SHARE, AdversaryDriver
from app.swarm.agents.base import Agent
from app.swarm.allocation import IMPROVEMENT_REWARD, NEAR_REWARD, BudgetAllocator
from app.swarm.blackboard import Blackboard
from app.swarm.lessons import FailureTally, LessonBook, good_regions
from app.swarm.plan import RunPlan

log = logging.getLogger(__name__)

LESSON_EVERY = 10  # evaluations between lesson distillations
PROPOSAL_ATTEMPTS = 8  # fresh proposals asked of one agent before trying another
# Transfer: the head of the ranking from other devices is evaluated first (a quarter of the
# budget at most, so the rest of the swarm always gets most of it).
TRANSFER_SEEDS = 5
NEAR_TOP = 0.2  # a result within the best fifth so far earns part of an improvement's credit
REWARD_NEAR_TOP = 0.5


@dataclass
class RunResult:
    reason: str
    evaluations: int
    best: Evaluation | None
    elapsed_s: float
    credits: dict[str, dict[str, float]]
    history: list[Evaluation] = field(default_factory=list)
    lessons: list = field(default_factory=list)
    # the best and the baseline re-timed interleaved at the end (backends that can: cpu)
    comparison: dict[str, float] = field(default_factory=dict)
    # the run's summary (app.run_summary.RunSummary.to_dict()), as RunFinished carried it
    summary: dict[str, Any] = field(default_factory=dict)


def _derive_seed(seed: int, name: str) -> int:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def _new_credit() -> dict[str, int]:
    return {"proposed": 0, "evaluated": 0, "failed": 0, "improvements": 0, "clear_improvements": 0}


def _clear(new: Evaluation, previous: Evaluation | None, minimize: bool) -> bool:
    """A new best clear of the timing noise of the best it replaced (app.core.noise)."""
    if previous is None or previous.value is None:
        return True
    return clear_of_noise(float(new.value), spread_of(new.metrics), float(previous.value),
                          spread_of(previous.metrics), minimize)


class Coordinator:
    def __init__(self, space: SearchSpace, evaluator: Evaluator, plan: RunPlan, *,
                 bus: EventBus | None = None,
                 on_finish: Callable[[str, Evaluation | None, list[Evaluation]], dict[str, Any]]
                 | None = None) -> None:
        self.space = space
        self.plan = plan
        # called once the search has ended, before RunFinished: the session re-times the best
        # against the baseline there and returns the run's speedup and summary, so the event
        # the window ends on carries the figure `show` and the report give
        self.on_finish = on_finish
        self.evaluator = evaluator
        self.minimize = minimize = plan.minimize
        self.bus = bus or EventBus()
        self.run_id = run_id = plan.run_id
        self.seed = seed = plan.seed
        self.target_value = plan.target_value
        self.simulated_clock = plan.simulated_clock
        # A local replay answers at once: taking results strictly oldest first costs nothing
        # there and makes a goal and seed give the same run with any number of workers (the
        # main job's 4 gave 9, 11 or 13 improvements from one goal file)
        self.in_order = evaluator.answers_at_once
        self.board = Blackboard(space, minimize=minimize)
        self.rng = random.Random(_derive_seed(seed, "coordinator"))
        self.agents: dict[str, Agent] = {}
        for a in plan.agents:
            agent = a if isinstance(a, Agent) else self._make_agent(a, seed)
            self.agents[agent.name] = agent
        if not self.agents:
            raise ValueError("the swarm needs at least one agent")
        self.learned_from: list[dict] = []
        self._seeds_left = 0
        transfer = plan.transfer
        if transfer:
            from app.swarm.agents.transfer import TransferAgent

            self.agents["transfer"] = TransferAgent(
                space, random.Random(_derive_seed(seed, "transfer")), minimize, transfer.ranked,
                transfer.scores, transfer.prior, transfer.candidates)
            self.learned_from = list(transfer.sources)
            self._seeds_left = min(TRANSFER_SEEDS, max(1, plan.max_evals // 4))
        self.allocator = BudgetAllocator(  # LLM agents report tokens: cost per improvement
            list(self.agents), spend=lambda a: self.agents[a].tokens_spent)
        cap = evaluator.max_parallel or 1
        self.slots = max(1, min(int(plan.workers), int(cap)))
        # "improvements": every new best (what the allocator is rewarded for); "clear_improvements":
        # those clear of the timing noise of the best they replaced (what the run reports)
        self._credits = {name: _new_credit() for name in self.agents}
        self._prior = list(plan.prior)
        # keys of stored correct rows not yet verified and timed by this process: a history
        # file may be a colleague's, its figures forged (_check_history_best)
        self._unchecked: set[str] = set()
        self._elapsed0 = float(plan.prior_elapsed_s)
        self._sim_clock = float(plan.prior_elapsed_s)
        self._t0 = 0.0
        self._stop = threading.Event()
        self._running = threading.Event()
        self._running.set()
        self._lessons = LessonBook()
        self._failures = FailureTally()
        self._since_improvement = 0
        self._index = 0
        self._lock = threading.Lock()
        # inputs that break the best, within a share of the run's time (app.swarm.adversary_driver)
        self.adversary = AdversaryDriver(
            evaluator, self.board, self.bus, random.Random(_derive_seed(seed, "adversary")),
            share=DEFAULT_SHARE if plan.adversary_share is None else plan.adversary_share,
            run_id=run_id,
            revoke=self._revoke_for_case)

    def _make_agent(self, name: str, seed: int) -> Agent:
        from app.swarm.agents import make_agent

        return make_agent(name, self.space, random.Random(_derive_seed(seed, name)), self.minimize)

    # ---- control (thread-safe) -------------------------------------------------------------
    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def stop(self) -> None:
        self._stop.set()
        self._running.set()

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    @property
    def credits(self) -> dict[str, dict[str, float]]:
        shares = self.allocator.shares()
        with self._lock:
            total_impr = sum(c["improvements"] for c in self._credits.values())
            out = {a: {**c, "share": shares.get(a, 0.0),
                       "improvement_share": (c["improvements"] / total_impr) if total_impr else 0.0}
                   for a, c in self._credits.items()}
        if self.adversary.enabled:  # its share is of the run's time, not of the proposals
            out["adversary"] = self.adversary.credits()
        return out

    def elapsed(self) -> float:
        if self.simulated_clock:
            return self._sim_clock
        return self._elapsed0 + (time.monotonic() - self._t0)

    # ---- the loop ------------------------------------------------------------------------
    def run(self) -> RunResult:
        self._t0 = time.monotonic()
        self._replay_prior()
        plan = self.plan
        self.bus.publish(RunStarted(
            goal_name=plan.goal_name, backend=plan.backend, agents=list(self.agents),
            max_evals=plan.max_evals, time_budget_s=plan.time_budget_s or None,
            baseline_value=plan.baseline_value, limit_value=plan.limit_value,
            baseline_name=plan.baseline_name,
            target_value=plan.target_value, resumed_evals=len(self._prior), unit=plan.unit,
            learned_from=self.learned_from, run_id=self.run_id))
        reason = "error"
        message = ""
        try:
            reason = self._loop()
        except Exception as exc:  # an engine bug must end the run visibly, not hang it
            log.exception("swarm run failed")
            message = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            for agent in self.agents.values():
                agent.close()
            if reason != "error" and self._index % LESSON_EVERY:
                self._distil_lessons()  # the lessons a run ends with match its final data
            self.bus.publish(AgentCredit(credits=self.credits, run_id=self.run_id))
            finish = self._finish(reason)
            self.bus.publish(RunFinished(reason=reason, evaluations=len(self.board),
                                         best=self.board.best, elapsed_s=self.elapsed(),
                                         message=message, run_id=self.run_id,
                                         speedup=finish.get("speedup"),
                                         speedup_basis=finish.get("speedup_basis", ""),
                                         summary=finish.get("summary") or {}))
        return RunResult(reason=reason, evaluations=len(self.board), best=self.board.best,
                         elapsed_s=self.elapsed(), credits=self.credits,
                         history=self.board.evaluations, lessons=self._lessons.current(),
                         comparison=finish.get("comparison") or {},
                         summary=finish.get("summary") or {})

    def _finish(self, reason: str) -> dict[str, Any]:
        if self.on_finish is None or reason == "error":
            return {}
        try:
            return self.on_finish(reason, self.board.best, self.board.evaluations) or {}
        except Exception:  # the run's evaluations stand without its summary
            log.exception("finishing the run failed")
            return {}

    def _replay_prior(self) -> None:
        """Resume: the evidence of the interrupted run goes back on the board, unevaluated."""
        for e in self._prior:
            self._failures.add(e)
            if e.ok and e.value is not None:
                self._unchecked.add(e.key)
            previous = self.board.best
            improved = self.board.record(e)
            self._since_improvement = 0 if improved else self._since_improvement + 1
            for agent in self.agents.values():
                agent.observe(e)
            if e.agent in self._credits:
                c = self._credits[e.agent]
                c["proposed"] += 1
                c["evaluated"] += 1
                c["failed"] += 0 if e.ok else 1
                c["improvements"] += 1 if improved else 0
                c["clear_improvements"] += 1 if improved and _clear(e, previous, self.minimize) else 0
        self._index = len(self._prior)

    def _budget_left(self) -> int:
        return self.plan.max_evals - self._index

    def _loop(self) -> str:
        in_flight: dict[cf.Future, tuple[int, Candidate]] = {}
        submitted = 0  # submission order, to accept results in it
        exhausted = False
        self._check_history_best()  # before a stop rule (a target) can trust a stored figure
        reason = self._check_stop()
        if reason:
            return reason
        with cf.ThreadPoolExecutor(max_workers=self.slots, thread_name_prefix="swarm-eval") as pool:
            while True:
                while (not self._stop.is_set() and self._running.is_set() and not exhausted
                       and len(in_flight) < min(self.slots, self._budget_left())):
                    cand = self._next_candidate()
                    if cand is None:
                        # Agents still waiting on slow ideas (LLM replies) are not out of ideas.
                        exhausted = not in_flight and not self._agents_pending()
                        if not exhausted:
                            self._stop.wait(0.05)
                        break
                    in_flight[pool.submit(self._evaluate, cand)] = (submitted, cand)
                    submitted += 1
                if not in_flight:
                    if self._stop.is_set():
                        return "stopped"
                    if exhausted:
                        return "exhausted"
                    if not self._running.is_set():
                        self._running.wait(0.1)
                        continue
                    if self._budget_left() <= 0:
                        return self._check_stop() or "max_evals"
                    continue  # agents are waiting on replies: ask again
                if self.in_order:
                    oldest = min(in_flight, key=lambda f: in_flight[f][0])
                    done = cf.wait([oldest], timeout=0.2).done
                else:
                    done, _ = cf.wait(list(in_flight), timeout=0.2,
                                      return_when=cf.FIRST_COMPLETED)
                # Accept in submission order so one-worker runs are reproducible.
                for fut in sorted(done, key=lambda f: in_flight[f][0]):
                    _, cand = in_flight.pop(fut)
                    self._accept(cand, fut.result())
                    reason = self._check_stop()
                    if reason:
                        self._stop.set()
                        for f in list(in_flight):
                            f.cancel()
                        # Results already running are accepted, so nothing measured is lost.
                        for f in cf.as_completed([f for f in in_flight if not f.cancelled()]):
                            _, c = in_flight.pop(f)
                            self._accept(c, f.result())
                        for _, c in in_flight.values():
                            self.board.release(c.key)
                        return reason
                if self._stop.is_set() and not in_flight:
                    return "stopped"

    def _agents_pending(self) -> bool:
        return any(a.pending() for a in self.agents.values())

    def _evaluate(self, cand: Candidate) -> Evaluation:
        try:
            return self.evaluator.evaluate(cand)
        except Exception:  # noqa: BLE001 - a backend bug costs one candidate, never the run
            return Evaluation(key=cand.key, config=dict(cand.config), ok=False, reason=CRASH,
                              detail="the evaluator raised an exception", agent=cand.agent,
                              source=cand.source, parent_key=cand.parent_key,
                              log=traceback.format_exc())

    def _seed_candidate(self) -> Candidate | None:
        """While seeds are left, the next configuration of the transferred ranking."""
        agent = self.agents["transfer"]
        for proposal in agent.propose(self.board, 1):
            cand = self._as_candidate(proposal, agent.name)
            if cand is not None and self.board.claim(cand.key):
                self._seeds_left -= 1
                with self._lock:
                    self._credits[agent.name]["proposed"] += 1
                self.bus.publish(Proposed(agent=agent.name, key=cand.key, config=cand.config,
                                          run_id=self.run_id))
                return cand
        self._seeds_left = 0  # the ranking is used up
        return None

    def _next_candidate(self) -> Candidate | None:
        if self._seeds_left > 0:
            cand = self._seed_candidate()
            if cand is not None:
                return cand
        for name, agent in self.agents.items():  # replies already paid for come first
            if agent.ready():
                cand = self._proposal_of(name, agent)
                if cand is not None:
                    return cand
        tried: set[str] = set()
        while True:
            name = self.allocator.pick(self.rng, exclude=tried)
            if name is None:
                break
            cand = self._proposal_of(name, self.agents[name])
            if cand is not None:
                return cand
            tried.add(name)
        # Every agent is out of fresh ideas: a last uniform draw before calling it exhausted.
        for _ in range(200):
            cfg = self.space.sample(self.rng)
            if cfg is None:
                return None
            key = self.space.key(cfg)
            if self.board.claim(key):
                return Candidate(config=cfg, key=key, agent="coordinator")
        return None

    def _proposal_of(self, name: str, agent: Agent) -> Candidate | None:
        """The agent's next fresh proposal (claimed on the board), or None."""
        for _ in range(PROPOSAL_ATTEMPTS):
            proposals = agent.propose(self.board, 1)
            if not proposals:
                return None
            for proposal in proposals:
                cand = self._as_candidate(proposal, name)
                if cand is not None and self.board.claim(cand.key):
                    with self._lock:
                        self._credits[name]["proposed"] += 1
                    self.bus.publish(Proposed(agent=name, key=cand.key, config=cand.config,
                                              run_id=self.run_id))
                    return cand
        return None

    def _as_candidate(self, proposal: object, agent: str) -> Candidate | None:
        if isinstance(proposal, Candidate):
            proposal.agent = proposal.agent or agent
            return proposal
        if isinstance(proposal, dict) and self.space.is_valid(proposal):
            return Candidate(config=dict(proposal), key=self.space.key(proposal), agent=agent)
        return None

    def _accept(self, cand: Candidate, evaluation: Evaluation) -> None:
        evaluation.agent = evaluation.agent or cand.agent
        evaluation.key = cand.key
        previous = self.board.best
        if self.simulated_clock:
            self._sim_clock += evaluation.sim_seconds / self.slots
        self._index += 1
        self._failures.add(evaluation)
        improved = self.board.record(evaluation)
        best = self.board.best
        elapsed = self.elapsed()
        # The store commits inside this publish, before anything else sees the result.
        self.bus.publish(Evaluated(index=self._index, evaluation=evaluation, elapsed_s=elapsed,
                                   best_value=best.value if best else None, run_id=self.run_id))
        if improved:
            self._since_improvement = 0
            self.bus.publish(NewBest(index=self._index, evaluation=evaluation, elapsed_s=elapsed,
                                     previous_value=previous.value if previous else None,
                                     run_id=self.run_id))
        else:
            self._since_improvement += 1
        if evaluation.failing_case is not None:
            self._recheck_best(evaluation)
        if not self._stop.is_set():
            self.adversary.maybe_round()
        for agent in self.agents.values():
            agent.observe(evaluation)
        # "llm-memory+local": an LLM structure tuned by a classical agent credits both
        names = [n for n in evaluation.agent.split("+") if n in self.agents] or [evaluation.agent]
        reward = self._reward(evaluation, improved)
        clear = improved and _clear(evaluation, previous, self.minimize)
        # only an allocator that weighs it pays for the comparison (every evaluation passes here)
        near = self.allocator.wants_near_incumbent and self._near_incumbent(evaluation, previous)
        for name in names:
            with self._lock:
                c = self._credits.setdefault(name, _new_credit())
                c["evaluated"] += 1
                c["failed"] += 0 if evaluation.ok else 1
                c["improvements"] += 1 if improved else 0
                c["clear_improvements"] += 1 if clear else 0
            self.allocator.near_incumbent(name, near)
            self.allocator.update(name, reward)
        if improved:
            self.bus.publish(AgentCredit(credits=self.credits, run_id=self.run_id))
        if self._index % LESSON_EVERY == 0:
            self._distil_lessons()

    def _recheck_best(self, failure: Evaluation) -> None:
        """A new failing input joins the validation set: the current best must pass it too,
        or it is revoked (a faster kernel that is subtly wrong is worth nothing)."""
        if self.adversary.can_probe:  # every kept kernel re-verified against the case
            self.adversary.new_case(failure.failing_case or {},
                                    f"verification failure of candidate {failure.key[:12]}",
                                    broke=failure.key)
            self._check_history_best()
            return
        best = self.board.best
        if best is None or best.key == failure.key:
            return
        again = self.evaluator.recheck(Candidate(
            config=dict(best.config), key=best.key, agent=best.agent, source=best.source,
            parent_key=best.parent_key))
        if again is None or again.ok:
            return
        again.agent, again.key = best.agent, best.key
        self._revoke(again, f"revoked: failed re-verification ({again.detail})")
        self._check_history_best()  # the best may fall back onto a stored row

    def _revoke(self, again: Evaluation, detail: str, case_id: int | None = None) -> None:
        """A kept kernel (the best, mostly) failed when checked again: off the board, and said
        so; the best falls back to the next correct kernel."""
        again.detail = detail
        was_best = self.board.best is not None and self.board.best.key == again.key
        new_best = self.board.revoke(again)
        log.warning("candidate %s %s", again.key, detail)
        self.bus.publish(BestRevoked(key=again.key, evaluation=again,
                                     new_best_value=new_best.value if new_best else None,
                                     case_id=case_id, was_best=was_best, run_id=self.run_id))

    def _revoke_for_case(self, again: Evaluation, detail: str, case_id: int | None) -> None:
        """A validation case broke a kept kernel; a stored row that falls into the best's
        place is re-checked as on resume."""
        self._revoke(again, detail, case_id)
        if self.board.best is not None and self.board.best.key in self._unchecked:
            self._check_history_best()

    def _check_history_best(self) -> None:
        """A resumed run's rows come from a history file (perhaps a colleague's, its figures
        forged). Before a stored row is the run's best it is evaluated again by the run's own
        evaluator, as a new candidate is (the LLM source policy where the run has LLM agents,
        then the cascade: sandbox, verification, timing, roofs): it keeps the
        figure measured now, or it is revoked and the next row falls back into its place and
        is checked in turn. Only rows that would be the best are re-checked, once each."""
        while not self._stop.is_set():
            best = self.board.best
            if best is None or best.key not in self._unchecked:
                return
            self._unchecked.discard(best.key)
            again = self._evaluate(Candidate(
                config=dict(best.config), key=best.key, agent=best.agent, source=best.source,
                parent_key=best.parent_key))
            again.key, again.agent, again.source = best.key, best.agent, best.source
            again.parent_key = best.parent_key
            if self.simulated_clock:
                self._sim_clock += again.sim_seconds / self.slots
            if again.ok and again.value is not None:
                again.detail = (f"re-checked on resume: the history said {best.value:.6g}, "
                                f"measured {again.value:.6g} now")
                self.board.replace(again)
                log.info("stored best %s %s", best.key, again.detail)
                self.bus.publish(BestRechecked(key=best.key, evaluation=again,
                                               stored_value=best.value, run_id=self.run_id))
                continue
            self._revoke(again, f"revoked: a stored result failed re-verification "
                                f"({again.detail})")

    def _near_incumbent(self, evaluation: Evaluation, previous: Evaluation | None) -> bool:
        """Whether the result differs from the best before it in one parameter at most: the
        local agent walks that neighbourhood, so another agent's find there may be no gain."""
        if previous is None or not isinstance(evaluation.config, dict):
            return False
        try:
            mine, best = self.space.as_tuple(evaluation.config), self.space.as_tuple(previous.config)
        except KeyError:
            return False
        return sum(a != b for a, b in zip(mine, best)) <= 1

    def _reward(self, evaluation: Evaluation, improved: bool) -> float:
        """Credit for one evaluation: 1 for a new best, graded credit for a result near the
        top of everything measured so far (its quality, not just its luck of timing), none
        for a failure or an ordinary result."""
        if improved:
            return IMPROVEMENT_REWARD
        if not evaluation.ok or evaluation.value is None:
            return 0.0
        threshold = self.board.rank_threshold(max(3, len(self.board) // 10))
        if threshold is not None and not self.board.better(threshold, evaluation.value):
            return NEAR_REWARD  # in the top decile, without beating the best
        return 0.0

    def _distil_lessons(self) -> None:
        n = self._index
        now = self._failures.regions(as_of=n) + good_regions(self.board.elites(5), as_of=n)
        for lesson in self._lessons.update(now, as_of=n):
            self.board.add_lesson(lesson)
            self.bus.publish(LessonLearned(lesson=lesson, run_id=self.run_id))

    def _check_stop(self) -> str | None:
        if self._stop.is_set():
            return "stopped"
        if self._index >= self.plan.max_evals:
            return "max_evals"
        budget = self.plan.time_budget_s
        if budget and self.elapsed() >= budget:
            return "time_budget"
        patience = self.plan.plateau_patience
        if patience and self._since_improvement >= patience and self.board.best is not None:
            return "plateau"
        best = self.board.best
        if self.target_value is not None and best is not None and best.value is not None \
                and not self.board.better(self.target_value, best.value):
            return "target"
        return None
