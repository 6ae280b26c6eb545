"""The transfer agent beyond the head of the ranking: it models how this device departs from
the sources, so a region that disappointed here is left for the next-best region the sources
liked, and a region that kept its promise is followed further."""

from __future__ import annotations

import math
import random

from app.core.space import SearchSpace
from app.core.types import Evaluation
from app.swarm.agents.moves import distance
from app.swarm.agents.transfer import TransferAgent
from app.swarm.blackboard import Blackboard
from app.swarm.transfer import SourceRun, log_gaps, rank_transfer

SPACE = SearchSpace({"a": list(range(10)), "b": list(range(10))})
A = (1, 1)  # the sources' best region
B = (8, 8)  # their second best, far away


def _source_value(a: int, b: int) -> float:
    """Two narrow basins on the old device: A (best, and two steps from its centre still
    better than B's centre) and B (10% slower), much worse elsewhere."""
    da = abs(a - A[0]) + abs(b - A[1])
    db = abs(a - B[0]) + abs(b - B[1])
    return min(1.0 + 0.02 * da + 0.5 * max(0, da - 2), 1.10 + 0.02 * db + 0.5 * max(0, db - 2))


def _source() -> SourceRun:
    evals = [Evaluation(key=f"{a},{b}", config={"a": a, "b": b}, ok=True,
                        value=_source_value(a, b)) for a in range(10) for b in range(10)]
    return SourceRun(run_id=1, device="old", evaluations=evals)


def _agent():
    evidence = rank_transfer(SPACE, [_source()])
    agent = TransferAgent(SPACE, random.Random(0), True, evidence.ranked, evidence.scores,
                          evidence.prior, evidence.candidates, head=1)
    return evidence, agent


def _measure(board, agent, config, value):
    e = Evaluation(key=SPACE.key(config), config=dict(config), ok=value is not None, value=value)
    board.record(e)
    agent.observe(e)


def _seed_results(board, agent, slow: bool):
    """The seeds here: A's best and its neighbours as promised or 3x slower, B's centre as
    promised."""
    for a, b in [A, (1, 2), (2, 1), (0, 1)]:
        value = _source_value(a, b) * (3.0 if slow else 1.0)
        _measure(board, agent, {"a": a, "b": b}, value)
    _measure(board, agent, {"a": B[0], "b": B[1]}, _source_value(*B))


def test_log_gaps_are_relative_to_the_runs_best():
    run = [Evaluation(key="x", config={}, ok=True, value=2.0),
           Evaluation(key="y", config={}, ok=True, value=4.0),
           Evaluation(key="z", config={}, ok=False)]
    assert log_gaps(run, minimize=True) == {"x": 0.0, "y": math.log(2.0)}
    assert log_gaps(run, minimize=False) == {"x": math.log(2.0), "y": 0.0}
    assert log_gaps([Evaluation(key="n", config={}, ok=True, value=-1.0)], True) == {}


def test_the_head_comes_first():
    evidence, agent = _agent()
    board = Blackboard(SPACE)
    assert agent.propose(board, 1) == [{"a": A[0], "b": A[1]}]
    assert evidence.prior[SPACE.key({"a": 1, "b": 1})] == 0.0
    assert len(evidence.candidates) == 25  # the best quarter of 100


def test_a_region_that_disappointed_here_gives_way_to_one_that_kept_its_promise():
    _, agent = _agent()
    board = Blackboard(SPACE)
    agent.propose(board, 1)
    _seed_results(board, agent, slow=True)
    nxt = agent.propose(board, 1)[0]
    assert distance(SPACE, nxt, {"a": B[0], "b": B[1]}) <= 2 / 9 + 1e-9
    # the ranking alone would have gone on with A's near-copies


def test_a_region_that_kept_its_promise_is_followed_further():
    _, agent = _agent()
    board = Blackboard(SPACE)
    agent.propose(board, 1)
    _seed_results(board, agent, slow=False)
    nxt = agent.propose(board, 1)[0]
    assert distance(SPACE, nxt, {"a": A[0], "b": A[1]}) <= 3 / 9 + 1e-9


def test_failures_here_count_against_their_region():
    _, agent = _agent()
    board = Blackboard(SPACE)
    agent.propose(board, 1)
    for a, b in [A, (1, 2), (2, 1), (0, 1)]:
        _measure(board, agent, {"a": a, "b": b}, None)
    _measure(board, agent, {"a": B[0], "b": B[1]}, _source_value(*B))
    nxt = agent.propose(board, 1)[0]
    assert distance(SPACE, nxt, {"a": B[0], "b": B[1]}) <= 2 / 9 + 1e-9


def test_without_ratios_the_agent_follows_the_ranking():
    """Values that are not all positive give no log gaps: the agent walks the ranking."""
    evidence, _ = _agent()
    agent = TransferAgent(SPACE, random.Random(0), True, evidence.ranked, evidence.scores,
                          head=1)
    board = Blackboard(SPACE)
    got = [agent.propose(board, 1)[0] for _ in range(3)]
    assert got == evidence.ranked[:3]
