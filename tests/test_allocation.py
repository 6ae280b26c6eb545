"""Budget allocation between agents, and the transfer agent's share on real recorded spaces:
the allocator moves proposals to the agent that earns rewards without starving the others,
and a ranking from another device that is wrong here stops being followed."""

from __future__ import annotations

import random

from project_paths import SPACES

from app.core.types import Evaluation
from app.goal import StopRules
from app.gpu.replay import ReplayEvaluator, load_cache_file
from app.swarm.allocation import BudgetAllocator
from app.swarm.coordinator import TRANSFER_SEEDS, Coordinator
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
    coordinator = Coordinator(evaluator.space, evaluator,
                              agents=["explorer", "local", "evolution", "model"],
                              stop=StopRules(max_evals=budget), workers=1, seed=seed,
                              transfer=transfer(evaluator.space) if transfer else None)
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
