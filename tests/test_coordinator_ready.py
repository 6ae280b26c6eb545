"""A reply already paid for (the fixer's repair of a near miss) must be
evaluated, not left waiting for its agent's allocation share to come round before the run ends.
An agent whose ready() says so is served first."""

from __future__ import annotations

import random

import pytest
from test_coordinator import RandomAgent, run

from app.gpu.replay import load_cache_file
from app.paths import resources_dir
from app.swarm.agents.base import Agent


@pytest.fixture(scope="module")
def recorded():
    return load_cache_file(resources_dir() / "spaces" / "pnpoly_RTX_3090.json.gz")


class PaidAgent(Agent):
    """Holds one configuration it has paid for; proposes nothing else."""

    name = "paid"

    def __init__(self, space, rng, minimize=True):
        super().__init__(space, rng, minimize)
        self.waiting = [space.sample(random.Random(7))]

    def ready(self) -> bool:
        return bool(self.waiting)

    def propose(self, board, n=1):
        out, self.waiting = self.waiting[:n], self.waiting[n:]
        return out


class Noisy(RandomAgent):
    name = "noisy"


class Other(RandomAgent):
    name = "other"


def test_a_paid_reply_is_evaluated_even_in_a_one_evaluation_run(recorded):
    for seed in range(8):  # the allocator's pick would leave it out most of the time
        _, result, _ = run(recorded, [Noisy, Other, PaidAgent], seed=seed, max_evals=1)
        assert [e.agent for e in result.history] == ["paid"], (seed, result.history)


def test_an_agent_with_nothing_paid_for_waits_for_its_share(recorded):
    _, result, _ = run(recorded, [Noisy, Other], seed=0, max_evals=6)
    assert len(result.history) == 6 and {e.agent for e in result.history} <= {"noisy", "other"}
