"""Two allocation variants that try to measure an agent's marginal value inside a run rather
than its credit (bench/README.md, "Marginal value instead of credit"): `decay-redundant`
discounts results another agent would have reached anyway (one parameter from the incumbent,
where the local agent walks), `decay-holdout` alternates stretches with and without one
agent's turns and drops it when the run does better without it. Neither is the default; these
check that each does what it says."""

from __future__ import annotations

import random

from app.swarm.allocation import DecayAllocator, HoldoutAllocator, make_allocator

AGENTS = ["explorer", "local", "evolution", "model"]


def test_redundant_results_earn_a_fraction_except_for_the_neighbourhood_walker():
    plain, red = DecayAllocator(AGENTS), make_allocator("decay-redundant", AGENTS)
    for alloc in (plain, red):
        for agent in ("model", "local"):
            alloc.near_incumbent(agent, True)
            alloc.update(agent, 1.0)
        alloc.near_incumbent("evolution", False)
        alloc.update("evolution", 1.0)
    assert abs(red.reward["model"] - 0.25 * plain.reward["model"]) < 1e-12
    assert red.reward["local"] == plain.reward["local"]  # its own neighbourhood: full credit
    assert red.reward["evolution"] == plain.reward["evolution"]  # far from the incumbent
    assert red.shares()["model"] < plain.shares()["model"]
    # the flag holds for one result only
    red.update("model", 1.0)
    plain.update("model", 1.0)
    assert red.reward["model"] > 0.25 * plain.reward["model"]


def _run(alloc: HoldoutAllocator, credit_with: float, credit_without: float, n: int) -> list[str]:
    """n results, the run's credit depending on whether the subject has turns; the picks."""
    rng, picks = random.Random(0), []
    for _ in range(n):
        with_it = alloc._with_subject()
        picks.append(alloc.pick(rng))
        alloc.update(picks[-1], credit_with if with_it else credit_without)
    return picks


def test_holdout_withholds_the_subject_in_alternate_stretches_then_drops_it():
    alloc = make_allocator("decay-holdout", AGENTS)
    picks = _run(alloc, 0.0, 1.0, 30)  # start 10, stretches of 10: 10-19 with, 20-29 without
    assert "model" not in picks[20:30]
    assert alloc.pick(random.Random(0), exclude={"explorer", "local", "evolution"}) == "model"
    assert alloc.verdict is None
    assert alloc.shares()["model"] > 0.0  # evaluation 30: a stretch with it
    _run(alloc, 0.0, 1.0, 40)  # three pairs, the run better without it every time
    assert alloc.verdict is False
    assert alloc.shares()["model"] == 0.0
    assert alloc.pick(random.Random(0), exclude={"explorer", "local", "evolution"}) is None
    assert "model" not in _run(alloc, 0.0, 0.0, 50)


def test_holdout_keeps_the_subject_when_stretches_with_it_do_better():
    alloc = make_allocator("decay-holdout", AGENTS)
    _run(alloc, 1.0, 0.0, 70)
    assert alloc.verdict is True
    assert alloc.shares() == DecayAllocator.shares(alloc)  # the decay rule alone from here
    assert "model" in _run(alloc, 0.0, 0.0, 60)
