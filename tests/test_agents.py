"""The swarm's four agents on real recorded spaces (and one restricted, unrecorded space):
valid and fresh proposals, determinism, search quality; and the benchmark's exact random
baseline checked against brute force."""

from __future__ import annotations

import importlib.util
import itertools
import random
import statistics
import sys

import pytest

from app.core.evaluator import Evaluator
from app.core.space import SearchSpace
from app.core.types import Candidate, Evaluation
from app.gpu.replay import ReplayEvaluator, load_cache_file
from app.paths import resources_dir
from app.swarm.agents import AGENT_NAMES, make_agent
from app.swarm.blackboard import Blackboard
from app.swarm.coordinator import Coordinator
from app.swarm.plan import RunPlan


@pytest.fixture(scope="module")
def pnpoly():
    return load_cache_file(resources_dir() / "spaces" / "pnpoly_RTX_3090.json.gz")


class FormulaEvaluator(Evaluator):
    """A test double for a space that has no recording: a deterministic cost over a
    restricted space, failing for one region (as a compiler would)."""

    def __init__(self) -> None:
        self.space = SearchSpace(
            {"bx": [16, 32, 64, 128, 256, 512], "by": [1, 2, 4, 8, 16], "unroll": [1, 2, 4, 8],
             "vec": [1, 2, 4]},
            restrictions=["bx*by<=1024", "bx*by>=32", "unroll*vec<=16"])

    def evaluate(self, candidate: Candidate) -> Evaluation:
        c = candidate.config
        base = {"key": candidate.key, "config": dict(c), "agent": candidate.agent}
        if c["bx"] >= 256 and c["vec"] >= 2:
            return Evaluation(ok=False, reason="compile_failed", **base)
        value = abs(c["bx"] * c["by"] - 256) / 64 + abs(c["unroll"] - 4) + 1.0 / c["vec"]
        return Evaluation(ok=True, value=value, **base)


def run_agent(evaluator, agent: str, budget: int, seed: int = 0):
    coord = Coordinator(evaluator.space, evaluator, RunPlan(agents=[agent], max_evals=budget,
                        workers=1, seed=seed))
    return coord.run()


@pytest.mark.parametrize("agent", AGENT_NAMES)
def test_proposals_are_valid_and_fresh_on_a_restricted_space(agent):
    evaluator = FormulaEvaluator()
    space = evaluator.space
    result = run_agent(evaluator, agent, budget=40)
    keys = [e.key for e in result.history]
    assert len(result.history) == 40
    assert len(set(keys)) == 40
    assert all(space.is_valid(e.config) for e in result.history)
    # Every evaluation was the agent's own idea, never the coordinator's fallback draw.
    assert result.credits[agent]["proposed"] == 40
    # The agent itself avoids what the board already knows.
    board = Blackboard(space)
    for e in result.history:
        board.record(e)
    proposals = make_agent(agent, space, random.Random(1)).propose(board, n=5)
    assert proposals
    assert all(space.is_valid(p) and not board.known(space.key(p)) for p in proposals)
    assert len({space.key(p) for p in proposals}) == len(proposals)


@pytest.mark.parametrize("agent", AGENT_NAMES)
def test_proposals_respect_a_recorded_space_with_extra_restrictions(pnpoly, agent):
    evaluator = ReplayEvaluator(pnpoly, restrictions=["block_size_x * tile_size <= 2048"],
                                simulate_time=False)
    result = run_agent(evaluator, agent, budget=30, seed=3)
    assert len({e.key for e in result.history}) == 30
    for e in result.history:
        assert e.config["block_size_x"] * e.config["tile_size"] <= 2048
        assert evaluator.space.as_tuple(e.config) in pnpoly.records
        assert e.reason != "invalid_config"


@pytest.mark.parametrize("agent", AGENT_NAMES)
def test_agents_are_deterministic_for_a_seed(pnpoly, agent):
    def keys(seed):
        return [e.key for e in run_agent(ReplayEvaluator(pnpoly, simulate_time=False), agent,
                                         budget=25, seed=seed).history]

    first = keys(7)
    assert keys(7) == first
    assert keys(8) != first


@pytest.mark.parametrize("agent", AGENT_NAMES)
def test_each_agent_beats_the_median_with_a_modest_budget(pnpoly, agent):
    times = sorted(pnpoly.valid_times())
    median, decile = statistics.median(times), times[len(times) // 10]
    for seed in (0, 1):
        best = run_agent(ReplayEvaluator(pnpoly, simulate_time=False), agent, budget=60,
                         seed=seed).best
        assert best is not None
        assert best.value < median
        assert best.value <= decile


def test_failures_do_not_become_parents_or_models_targets():
    """Once evidence exists, the learning agents propose into the failing region less often
    than uniform sampling would."""
    evaluator = FormulaEvaluator()
    space = evaluator.space
    valid = [c for c in (space.as_config(v) for v in itertools.product(*space.params.values()))
             if space.is_valid(c)]
    fail_rate = sum(not evaluator.evaluate(Candidate(c, space.key(c))).ok for c in valid) / len(valid)
    for agent in ("evolution", "model"):
        late_failures = sum(not e.ok for seed in (0, 1, 2)
                            for e in run_agent(evaluator, agent, budget=50, seed=seed).history[25:])
        assert late_failures < 0.8 * fail_rate * 25 * 3, (agent, late_failures)


def _bench():
    path = resources_dir().parent / "bench" / "search_efficiency.py"
    spec = importlib.util.spec_from_file_location("search_efficiency", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module


def test_exact_random_baseline_matches_brute_force():
    bench = _bench()
    times = [3.0, None, 1.5, 7.0, 2.0, None, 4.5, 2.0]
    penalty = 7.0
    for m in range(1, len(times) + 1):
        draws = list(itertools.combinations(times, m))
        brute = sum(min((t for t in d if t is not None), default=penalty) for d in draws) / len(draws)
        assert bench.expected_random_best(times, m, penalty) == pytest.approx(brute, rel=1e-12)
    with pytest.raises(ValueError):
        bench.expected_random_best(times, 0, penalty)


def test_best_of_first_counts_distinct_configurations_only():
    bench = _bench()
    trace = [((1,), 5.0), ((1,), 5.0), ((2,), None), ((3,), 4.0), ((4,), 1.0)]
    assert bench.best_of_first(trace, 1) == 5.0
    assert bench.best_of_first(trace, 2) == 5.0
    assert bench.best_of_first(trace, 3) == 4.0
    assert bench.best_of_first(trace, 4) == 1.0


@pytest.mark.parametrize("agent", AGENT_NAMES)
def test_agents_follow_the_direction_when_maximizing(pnpoly, agent):
    """With a throughput-like objective (higher is better) the search climbs the other way."""
    evaluator = ReplayEvaluator(pnpoly, simulate_time=False)
    coord = Coordinator(evaluator.space, evaluator, RunPlan(agents=[agent], minimize=False,
                        max_evals=60, workers=1, seed=4))
    best = coord.run().best
    times = sorted(pnpoly.valid_times())
    assert best.value >= times[-len(times) // 10]


def test_an_unknown_agent_name_is_refused_with_the_known_names():
    with pytest.raises(ValueError, match="explorer"):
        make_agent("oracle", FormulaEvaluator().space, random.Random(0))


# ---- two basins: a climbed one that crowds the elites, and the one holding the optimum -------
def _two_basins() -> tuple[SearchSpace, Blackboard, dict, dict]:
    """A board where one basin has been climbed (its best and every configuration one
    parameter change away: 22 evaluations, all better than anything else) and, ranked below
    all of them, the best configuration of a second basin, plus a few far-off ones."""
    space = SearchSpace({"a": list(range(8)), "b": list(range(8)), "c": list(range(8))})
    board = Blackboard(space)
    climbed, other = {"a": 1, "b": 1, "c": 1}, {"a": 6, "b": 6, "c": 6}

    def record(cfg: dict, value: float) -> None:
        board.record(Evaluation(key=space.key(cfg), config=dict(cfg), ok=True, value=value,
                                agent="test"))

    record(climbed, 1.0)
    for i, cfg in enumerate(space.hamming_neighbours(climbed)):
        record(cfg, 1.01 + i * 0.001)
    record(other, 1.5)
    for i, cfg in enumerate(({"a": 3, "b": 7, "c": 4}, {"a": 7, "b": 3, "c": 0},
                             {"a": 0, "b": 5, "c": 7})):
        record(cfg, 2.0 + i)
    return space, board, climbed, other


def _changes(a: dict, b: dict) -> int:
    return sum(a[n] != b[n] for n in a)


def test_spread_elites_keep_one_per_basin_where_plain_elites_keep_only_the_climbed_one():
    from app.swarm.agents.moves import spread_elites

    space, board, climbed, other = _two_basins()
    plain = [e.config for e in board.elites(20)]
    assert other not in plain  # the climbed basin's near-copies fill the plain elites
    spread = [e.config for e in spread_elites(space, board, 20)]
    assert spread[:2] == [climbed, other]  # best first, one per basin
    assert len(spread) == 5
    assert all(_changes(a, b) > 1 for a, b in itertools.combinations(spread, 2))


def test_a_local_optimum_restarts_the_climb_in_another_basin():
    """The climbed basin's best has no unknown neighbour left: the next proposal is around
    the other basin's best, not beside the exhausted one (its near-copies rank higher)."""
    space, board, climbed, other = _two_basins()
    for seed in range(5):
        agent = make_agent("local", space, random.Random(seed))
        proposal = agent.propose(board, 1)[0]
        assert _changes(proposal, other) == 1, proposal
        assert _changes(proposal, climbed) > 1


def test_evolution_breeds_from_the_other_basins_too():
    """Children with the other basin's genes appear although its best ranks below 22
    near-copies of the climbed basin's best (a plain top-20 parent pool never holds it)."""
    space, board, _, other = _two_basins()
    agent = make_agent("evolution", space, random.Random(0))
    children = [agent.propose(board, 1)[0] for _ in range(60)]
    near_other = sum(_changes(c, other) <= 1 for c in children)
    assert near_other >= 5, near_other
