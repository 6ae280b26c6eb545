"""Budget allocation between agents, and the transfer agent's share on real recorded spaces:
the allocator moves proposals to the agent that earns rewards without starving the others,
and a ranking from another device that is wrong here stops being followed."""

from __future__ import annotations

import random

from project_paths import SPACES

from app.core.types import Evaluation
from app.gpu.replay import ReplayEvaluator, load_cache_file
from app.swarm.agents.explorer import ExplorerAgent
from app.swarm.allocation import MAX_COST_FACTOR, BudgetAllocator
from app.swarm.coordinator import TRANSFER_SEEDS, Coordinator
from app.swarm.plan import RunPlan
from app.swarm.transfer import SourceRun, rank_correlation, rank_transfer

PNPOLY_OLD = SPACES / "pnpoly_RTX_2080_Ti.json.gz"
PNPOLY_NEW = SPACES / "pnpoly_RTX_3090.json.gz"


def test_rewarded_agent_gets_more_proposals_and_nobody_starves():
    alloc = BudgetAllocator(["a", "b", "c"])
    for _ in range(20):
        alloc.update("a", 1.0)
        alloc.update("b", 0.0)
    shares = alloc.shares()
    assert abs(sum(shares.values()) - 1.0) < 1e-9
    assert shares["a"] > shares["b"] and shares["a"] > shares["c"]
    assert min(shares.values()) >= alloc.floor / 3 - 1e-9
    rng = random.Random(0)
    picks = [alloc.pick(rng) for _ in range(2000)]
    assert picks.count("a") > 2 * picks.count("b")
    assert alloc.pick(rng, exclude={"a", "b", "c"}) is None


def test_an_agent_that_spends_more_per_improvement_gets_a_smaller_share():
    spent = {"llm-a": 10_000.0, "llm-b": 10_000.0, "local": None}
    alloc = BudgetAllocator(["llm-a", "llm-b", "local"], spend=spent.get)
    for _ in range(10):  # the same record for all three: a new best, then ordinary results
        for a in alloc.agents:
            alloc.update(a, 1.0)
            alloc.update(a, 0.0)
    even = alloc.shares()
    assert abs(even["llm-a"] - even["llm-b"]) < 1e-12 and abs(even["llm-a"] - even["local"]) < 1e-12
    spent["llm-b"] = 40_000.0  # four times the tokens for the same improvements
    shares = alloc.shares()
    assert abs(sum(shares.values()) - 1.0) < 1e-9
    assert shares["llm-b"] < even["llm-b"] < shares["llm-a"]
    assert shares["llm-b"] < shares["local"]  # a free agent is not weighed
    assert alloc.cost_factors()["local"] == 1.0
    assert min(shares.values()) >= alloc.floor / 3 - 1e-9  # nobody starves
    # the weight is bounded, and improvements buy a costly agent its share back
    spent["llm-b"] = 1e9
    assert alloc.cost_factors()["llm-b"] == 1.0 / MAX_COST_FACTOR
    spent["llm-b"] = 40_000.0
    for _ in range(60):  # 70 improvements for 4x the tokens of llm-a's 10
        alloc.update("llm-b", 1.0)
    assert alloc.cost_factors()["llm-b"] > 1.0
    # one paying agent alone has nothing to be compared with
    assert BudgetAllocator(["llm-a", "local"], spend=spent.get).cost_factors() == {
        "llm-a": 1.0, "local": 1.0}


class _Paid(ExplorerAgent):
    """A real search strategy that reports tokens per proposal as the LLM agents do."""

    def __init__(self, name: str, tokens_per_proposal: int, space, seed: int) -> None:
        super().__init__(space, random.Random(seed))
        self.name = name
        self.tokens_per_proposal = tokens_per_proposal
        self.tokens_spent = 0

    def propose(self, board, n=1):
        self.tokens_spent += self.tokens_per_proposal
        return super().propose(board, n)


def test_the_coordinator_moves_proposals_away_from_the_costly_agent():
    """Two copies of one strategy, one paying 40x the tokens per proposal: over three seeded
    runs the costly one is weighed down and proposes less (one run alone is noisy)."""
    proposed = {"llm-cheap": 0, "llm-costly": 0}
    for seed in range(3):
        evaluator = ReplayEvaluator(load_cache_file(PNPOLY_NEW), simulate_time=False)
        space = evaluator.space
        cheap, costly = _Paid("llm-cheap", 500, space, 1), _Paid("llm-costly", 20_000, space, 2)
        coordinator = Coordinator(space, evaluator, RunPlan(agents=[cheap, costly, "local"],
                                  max_evals=150, workers=1, seed=seed))
        coordinator.run()
        factors = coordinator.allocator.cost_factors()
        assert factors["llm-costly"] < 1.0 < factors["llm-cheap"] and factors["local"] == 1.0
        credits = coordinator.credits
        assert credits["llm-costly"]["share"] < credits["llm-cheap"]["share"], credits
        for name in proposed:
            proposed[name] += credits[name]["proposed"]
    assert proposed["llm-costly"] < 0.85 * proposed["llm-cheap"], proposed


def test_rank_correlation():
    assert rank_correlation([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert rank_correlation([1, 2, 3, 4], [4, 3, 2, 1]) == -1.0
    assert rank_correlation([1, 2], [1, 2]) == 0.0


def _source(path, flip=False) -> SourceRun:
    rec = load_cache_file(path)
    names = list(rec.params)
    out = []
    for values, r in rec.records.items():
        ok = isinstance(r["time"], float)
        value = (-r["time"] if flip else r["time"]) if ok else None
        out.append(Evaluation(key=str(values), config=dict(zip(names, values)), ok=ok, value=value))
    return SourceRun(run_id=1, device=rec.device_name, evaluations=out)


def _run(transfer, budget=60, seed=0):
    evaluator = ReplayEvaluator(load_cache_file(PNPOLY_NEW), simulate_time=False)
    coordinator = Coordinator(evaluator.space, evaluator, RunPlan(agents=["explorer", "local",
                              "evolution", "model"], max_evals=budget, workers=1, seed=seed,
                              transfer=transfer(evaluator.space) if transfer else None))
    return coordinator, coordinator.run()


def test_transferred_seeds_come_first_from_distinct_regions():
    coordinator, result = _run(lambda space: rank_transfer(space, [_source(PNPOLY_OLD)]))
    head = result.history[:TRANSFER_SEEDS]
    assert [e.agent for e in head] == ["transfer"] * TRANSFER_SEEDS
    ranked = coordinator.agents["transfer"].ranked
    assert [e.config for e in head] == ranked[:TRANSFER_SEEDS]
    assert coordinator.agents["transfer"].trusted


def test_a_wrong_ranking_is_dropped_and_the_others_take_over():
    # The other device's ranking turned upside down: its best is this device's worst.
    coordinator, result = _run(lambda space: rank_transfer(space, [_source(PNPOLY_OLD, flip=True)]))
    agent = coordinator.agents["transfer"]
    assert not agent.trusted
    by_transfer = sum(e.agent == "transfer" for e in result.history)
    assert by_transfer < len(result.history) // 4
    # After the check, the transfer agent proposes nothing more.
    last_transfer = max(i for i, e in enumerate(result.history) if e.agent == "transfer")
    assert last_transfer < 40
