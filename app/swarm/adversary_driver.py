"""Runs the adversary within its share of the run's time and applies what it finds.

The coordinator calls `maybe_round` after each accepted result. A round runs only while the
adversary's seconds (its probes and the re-verifications its cases cause) stay within `share`
of the run's own time. A case it finds (or one a verification failure left) joins the goal's
validation set (the evaluator checks every later candidate against it; the store keeps it with
its origin: CaseFound), and every kept kernel measured before it becomes stale: a stale kernel
is re-verified against the case (a probe, in its sandboxed worker) before it may stay the best,
and the others are re-verified as the share allows. One that fails is revoked: "broken by
case N", and the best falls back to the next correct kernel.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import Any

from app.core.events import CaseFound, EventBus
from app.core.types import VERIFY_FAILED, Evaluation
from app.swarm.agents.adversary import Adversary, Case
from app.swarm.blackboard import Blackboard

log = logging.getLogger(__name__)

DEFAULT_SHARE = 0.08  # of the run's time: the default keeps the adversary well under 15 %
RECHECK_PER_ROUND = 4  # stale kept kernels (below the best) re-verified per round

Revoke = Callable[[Evaluation, str, int | None], None]


class AdversaryDriver:
    def __init__(self, evaluator: Any, board: Blackboard, bus: EventBus, rng: random.Random, *,
                 share: float = DEFAULT_SHARE, run_id: int | None = None,
                 revoke: Revoke) -> None:
        self.board, self.bus, self.run_id, self._revoke = board, bus, run_id, revoke
        self.share = max(0.0, float(share))
        # optional evaluator capabilities (app.core.evaluator; cpu and cuda have them, replay
        # and a cluster do not): the plan of what may vary, the probe, the validation set
        self._evaluator = evaluator
        plan = evaluator.probe_plan()
        self.adversary = Adversary(plan, rng) if plan else None
        self.can_probe = plan is not None
        self.seconds = 0.0
        self._t0 = time.monotonic()
        self._last_round_s = 0.0
        self._stale: dict[str, list[tuple[Case, int | None]]] = {}
        self._labels = 0

    @property
    def enabled(self) -> bool:
        return self.adversary is not None and self.adversary.usable and self.share > 0

    def run_seconds(self) -> float:
        return time.monotonic() - self._t0

    def time_share(self) -> float:
        run = self.run_seconds()
        return self.seconds / run if run > 0 else 0.0

    # ---- the budget -----------------------------------------------------------------------
    def maybe_round(self) -> None:
        """One round against the best, when the share allows it."""
        best = self.board.best
        if not self.enabled or best is None:
            return
        if self.seconds + self._last_round_s > self.share * self.run_seconds():
            return
        t0 = time.monotonic()
        try:
            self._recheck_some(RECHECK_PER_ROUND)
            best = self.board.best
            if best is None:
                return
            target = best
            assert self.adversary is not None
            found = self.adversary.round(lambda cases: self._call(target, cases), self._cases())
            if found is not None:
                log.warning("adversary broke %s: %s", target.key, found.problem)
                self.new_case(found.case, f"adversary (broke candidate {target.key[:12]})",
                              broke=target.key)
        finally:
            spent = time.monotonic() - t0
            self._last_round_s = spent
            self.seconds += spent

    def _cases(self) -> list[Case]:
        return list(self._evaluator.validation_cases)

    def _call(self, target: Evaluation, cases: list[Case]) -> list[dict[str, Any]]:
        unscored = [{"score": None, "problem": "", "corrupted": False}] * len(cases)
        try:
            found = self._evaluator.probe(target, cases)
        except Exception:  # a backend bug costs one probe, never the run
            log.exception("adversary probe failed")
            return unscored
        return list(found) if found is not None else unscored

    # ---- cases ----------------------------------------------------------------------------
    def new_case(self, case: Case, origin: str, broke: str = "") -> int | None:
        """A case joins the goal's validation set; every kept kernel is stale until re-verified
        against it. Returns the store's id of the case (None without a store)."""
        event = CaseFound(case=dict(case), origin=origin, broke=broke, run_id=self.run_id)
        self.bus.publish(event)  # the store's recorder fills in case_id
        self._evaluator.add_validation_case(dict(case))
        if not self.can_probe:
            return event.case_id
        for kept in self.board.successes():
            self._stale.setdefault(kept.key, []).append((dict(case), event.case_id))
        self.settle()
        return event.case_id

    def settle(self) -> None:
        """While the best is stale, re-verify it against its pending cases: it stays, or it is
        revoked and the next one is checked in turn (never budget-limited: correctness)."""
        t0 = time.monotonic()
        try:
            while True:
                best = self.board.best
                if best is None or best.key not in self._stale:
                    return
                self._recheck(best)
        finally:
            self.seconds += time.monotonic() - t0

    def _recheck_some(self, n: int) -> None:
        for key in list(self._stale)[:n]:
            kept = self.board.get(key)
            if kept is None or not kept.ok:
                self._stale.pop(key, None)
                continue
            self._recheck(kept)

    def _recheck(self, kept: Evaluation) -> None:
        pending = self._stale.pop(kept.key, [])
        if not pending:
            return
        results = self._call(kept, [c for c, _ in pending])
        if self.adversary is not None:
            self.adversary.stats.rechecks += 1
        for (case, case_id), result in zip(pending, results):
            if not result.get("problem"):
                continue
            label = f"case {case_id}" if case_id is not None else self._local_label()
            again = Evaluation(key=kept.key, config=dict(kept.config), ok=False,
                               reason=VERIFY_FAILED, agent=kept.agent, source=kept.source,
                               parent_key=kept.parent_key, failing_case=dict(case),
                               resources=dict(kept.resources), metrics=dict(kept.metrics),
                               stages=list(kept.stages), time_ms=kept.time_ms,
                               sim_seconds=kept.sim_seconds)
            if self.adversary is not None:
                self.adversary.stats.dethroned += 1
            self._revoke(again, f"broken by {label}: {result['problem']}", case_id)
            return

    def _local_label(self) -> str:
        self._labels += 1
        return f"case #{self._labels} of this run"

    # ---- what the agent panel shows -------------------------------------------------------
    def credits(self) -> dict[str, float]:
        s = self.adversary.stats if self.adversary is not None else None
        # "evaluated" stays 0: a probe is not an evaluation (the run's evaluations add up)
        return {"proposed": float(s.inputs if s else 0), "evaluated": 0.0,
                "probes": float(s.probes if s else 0),
                "failed": 0.0, "improvements": float(s.found if s else 0),
                "share": self.share, "time_share": self.time_share(),
                "seconds": self.seconds, "cases": float(s.found if s else 0),
                "dethroned": float(s.dethroned if s else 0), "time_budget": 1.0}
