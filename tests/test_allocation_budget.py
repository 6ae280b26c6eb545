"""P as the budget grows: the search benchmark scores one swarm run at every budget
on its first M evaluations, which is only fair if a run with a larger budget is a continuation
of a shorter one. It is: the allocation and the agents never look at the budget, so the same
seed gives the same first M evaluations whatever the budget. P(M) can still fall with M (a run
stuck in a basin while random search's expected best keeps improving), never because runs at
different budgets followed different schedules."""

from __future__ import annotations

from project_paths import SPACES

from app.gpu.replay import ReplayEvaluator, load_cache_file
from app.swarm.agents import AGENT_NAMES
from app.swarm.coordinator import Coordinator
from app.swarm.plan import RunPlan


def _keys(budget: int, seed: int, policy: str = "") -> list[str]:
    evaluator = ReplayEvaluator(load_cache_file(SPACES / "pnpoly_RTX_3090.json.gz"),
                                simulate_time=False)
    coordinator = Coordinator(evaluator.space, evaluator, RunPlan(agents=list(AGENT_NAMES),
                              max_evals=budget, workers=1, seed=seed))
    if policy:
        from app.swarm.allocation import make_allocator

        old = coordinator.allocator
        coordinator.allocator = make_allocator(policy, old.agents, spend=old.spend)
    return [e.key for e in coordinator.run().history]


def test_a_larger_budget_continues_the_shorter_run():
    for policy in ("", "bandit"):
        short, long = _keys(25, seed=4, policy=policy), _keys(70, seed=4, policy=policy)
        assert len(short) == 25 and len(long) == 70
        assert long[:25] == short, policy
