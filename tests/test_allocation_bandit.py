"""Allocation policies that learn, within one run, which agents pay off on this space. The
bandit (discounted Thompson sampling over the agents' rewards per evaluation): an agent that
stops paying loses its share whatever it earned at the start, a stagnating run spreads its
picks out again, nobody falls below the floor. It is not the default: judged leave-one-space-
out on the development spaces it lost to the decay rule (bench/README.md), so the coordinator
keeps the decay rule and the bandit runs as `swarm@bandit` in the search benchmark."""

from __future__ import annotations

import random

from project_paths import SPACES

from app.gpu.replay import ReplayEvaluator, load_cache_file
from app.swarm.allocation import (
    ALLOCATORS,
    BanditAllocator,
    BudgetAllocator,
    DecayAllocator,
    make_allocator,
)
from app.swarm.coordinator import Coordinator
from app.swarm.plan import RunPlan

AGENTS = ["explorer", "local", "evolution", "model"]


def _play(alloc, rates, steps: int, rng: random.Random) -> list[str]:
    """Each pick is rewarded 1 (a new best) with the picked agent's rate at that step."""
    picks = []
    for step in range(steps):
        agent = alloc.pick(rng)
        picks.append(agent)
        rate = rates(agent, step)
        alloc.update(agent, 1.0 if rng.random() < rate else 0.0)
    return picks


def test_picks_move_to_the_agent_that_pays_and_nobody_starves():
    alloc = BanditAllocator(AGENTS)
    rng = random.Random(1)
    rates = {"explorer": 0.03, "local": 0.3, "evolution": 0.03, "model": 0.0}
    picks = _play(alloc, lambda a, _: rates[a], 300, rng)
    late = picks[150:]
    assert late.count("local") > 0.5 * len(late)
    floor_picks = alloc.floor / len(AGENTS) * len(late)
    for agent in AGENTS:  # the floor is a fixed part of the picks: everyone keeps evidence
        assert late.count(agent) > 0.5 * floor_picks
    shares = alloc.shares()
    assert abs(sum(shares.values()) - 1.0) < 1e-9
    assert min(shares.values()) >= alloc.floor / len(AGENTS) - 1e-9
    assert shares == alloc.shares()  # the displayed shares are a function of the state
    assert alloc.pick(rng, exclude=set(AGENTS)) is None
    assert alloc.pick(rng, exclude={"explorer", "local", "evolution"}) == "model"


def test_an_agent_that_paid_early_and_stopped_loses_its_share():
    """Early in a run every agent improves; the one that stops paying (a model whose
    suggestions miss on this space) must not keep the share its first results earned."""
    alloc = BanditAllocator(AGENTS)
    rng = random.Random(2)

    def rates(agent, step):
        if step < 25:
            return 0.9 if agent == "model" else 0.2
        return {"local": 0.15, "evolution": 0.1, "explorer": 0.05, "model": 0.0}[agent]

    picks = _play(alloc, rates, 200, rng)
    early, late = picks[:25], picks[100:]
    assert early.count("model") > len(early) / 4  # it did earn a large share at first
    # the floor alone gives it 7.5%; what it earned at the start is gone
    assert late.count("model") < 0.2 * len(late)
    assert alloc.shares()["model"] < 0.2 < alloc.shares()["local"]


def test_a_stagnating_run_spreads_its_picks_again():
    """Old evidence fades for every agent alike: when nobody improves any more, the agent
    that paid long ago is no longer favoured and the others (the explorer among them) get
    their turn back."""
    alloc = BanditAllocator(AGENTS)
    rng = random.Random(3)
    _play(alloc, lambda a, s: 0.8 if a == "local" else 0.0, 60, rng)
    assert alloc.shares()["local"] > 0.5
    _play(alloc, lambda a, s: 0.0, 200, rng)
    shares = alloc.shares()
    assert max(shares.values()) - min(shares.values()) < 0.15


def test_policies_by_name_and_the_default():
    assert BudgetAllocator is DecayAllocator  # kept: the bandit lost leave-one-space-out
    assert set(ALLOCATORS) >= {"bandit", "decay"}
    assert isinstance(make_allocator("decay", AGENTS), DecayAllocator)
    try:
        make_allocator("nonsense", AGENTS)
    except ValueError as exc:
        assert "unknown allocation policy 'nonsense'" in str(exc)
    else:
        raise AssertionError("an unknown policy was accepted")


def test_the_coordinator_allocates_with_the_bandit_on_a_recorded_space():
    evaluator = ReplayEvaluator(load_cache_file(SPACES / "pnpoly_RTX_3090.json.gz"),
                                simulate_time=False)
    coordinator = Coordinator(evaluator.space, evaluator, RunPlan(agents=AGENTS, max_evals=80,
                              workers=1, seed=0))
    old = coordinator.allocator
    coordinator.allocator = make_allocator("bandit", old.agents, spend=old.spend)
    result = coordinator.run()
    assert len(result.history) == 80
    credits = coordinator.credits
    assert abs(sum(credits[a]["share"] for a in AGENTS) - 1.0) < 1e-9
    assert all(credits[a]["evaluated"] >= 5 for a in AGENTS)  # the floor: nobody starves


def test_decay_paid_weighs_down_an_agent_that_only_lands_near_the_best():
    """`decay-paid`: near-misses (the coordinator's top-decile reward) alone do not keep a
    large earned part when the agent's new bests per evaluation fall behind the run's."""
    plain, paid = DecayAllocator(AGENTS), make_allocator("decay-paid", AGENTS)
    for alloc in (plain, paid):
        for step in range(120):
            alloc.update("model", 0.25)  # always in the top decile, never a new best
            alloc.update("local", 1.0 if step % 4 == 0 else 0.0)
    assert plain.shares()["model"] > plain.shares()["local"]
    assert paid.paid_factors()["model"] == 0.25 and paid.paid_factors()["local"] == 1.0
    assert paid.shares()["model"] < paid.shares()["local"]
    assert plain.paid_factors() == {a: 1.0 for a in AGENTS}  # the default rule is unchanged


def test_decay_cap_keeps_an_agent_below_the_explorer_to_its_floor_part():
    """`decay-cap`: an agent whose credit per evaluation over the run's latest evaluations is
    below the space-filling explorer's, over enough evidence, keeps only its floor part; one
    above the explorer is untouched, and so is everyone before the evidence is there."""
    plain, cap = DecayAllocator(AGENTS), make_allocator("decay-cap", AGENTS)
    for alloc in (plain, cap):
        for step in range(3):
            alloc.update("explorer", 1.0 if step % 2 == 0 else 0.0)
            alloc.update("model", 0.25 if step % 2 == 0 else 0.0)
            alloc.update("local", 1.0)
    assert cap.capped() == set()  # three evaluations each: not enough to judge
    for alloc in (plain, cap):
        for step in range(40):
            alloc.update("explorer", 1.0 if step % 2 == 0 else 0.0)
            alloc.update("model", 0.25 if step % 2 == 0 else 0.0)
            alloc.update("local", 1.0)
    assert cap.capped() == {"model"}
    floor_part = cap.floor / len(AGENTS)
    assert plain.shares()["model"] > floor_part + 0.02
    assert abs(cap.shares()["model"] - floor_part) < 1e-12
    assert cap.shares()["local"] > plain.shares()["local"]
