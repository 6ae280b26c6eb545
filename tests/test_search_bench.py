"""bench/search_efficiency.py runs Kernel Tuner's strategies faster without changing them:
each process parses a cache file and builds its Searchspace once (every run gets a pristine
copy), and strategies whose budget only stops them run once at the largest budget and are
scored on their first M distinct evaluations. These tests check that both give exactly the
traces of separate, fresh runs, on a recorded space."""

from __future__ import annotations

import importlib.util
import json
import sys
import time

import pytest
from project_paths import ROOT, SMALL_SPACE

pytest.importorskip("kernel_tuner")


def _load_bench():
    path = ROOT / "bench" / "search_efficiency.py"
    spec = importlib.util.spec_from_file_location("search_efficiency", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look themselves up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return _load_bench()


@pytest.fixture(scope="module")
def kt_json(bench, tmp_path_factory):
    return bench.uncompressed_copy(SMALL_SPACE, tmp_path_factory.mktemp("kt"))


class _CountingClock:
    """bayes_opt's default method decides when to refit its model from wall-clock timings
    (prediction time against evaluation time), so two runs with one seed can differ on a busy
    machine. With this clock every timing is the same and a run is a function of its seed."""

    def __init__(self) -> None:
        self.t = 0

    def perf_counter(self) -> float:
        self.t += 1
        return float(self.t)

    def perf_counter_ns(self) -> int:
        self.t += 1
        return self.t * 1_000_000_000

    def __getattr__(self, name):
        return getattr(time, name)


@pytest.fixture
def steady_clock(monkeypatch):
    from kernel_tuner.strategies import bayes_opt

    monkeypatch.setattr(bayes_opt, "time", _CountingClock())


def _trace(bench, kt_json, strategy, budget, seed, shared=True):
    task = bench.Task(str(SMALL_SPACE), str(kt_json), strategy, budget, seed)
    return bench.kernel_tuner_trace(task, shared=shared)


def _distinct(trace):
    seen: dict[tuple, float | None] = {}
    for config, value in trace:
        seen.setdefault(config, value)
    return list(seen.items())


@pytest.mark.parametrize("strategy", ["random_sample", "genetic_algorithm", "bayes_opt", "pso",
                                      "diff_evo", "greedy_ils", "firefly_algorithm"])
def test_prefix_safe_strategies_run_once_like_separate_runs(bench, kt_json, strategy, steady_clock):
    assert strategy in bench.KT_PREFIX_SAFE
    for seed in (0, 3):
        long = _distinct(_trace(bench, kt_json, strategy, 100, seed))
        assert len(long) == 100
        for m in (25, 60):
            short = _distinct(_trace(bench, kt_json, strategy, m, seed))
            assert short == long[:m], (strategy, seed, m)
            task = bench.Task(str(SMALL_SPACE), str(kt_json), strategy, 100, seed, prefixes=(m, 100))
            assert bench.run_kernel_tuner(task)[m] == bench.best_of_first(short, m)


@pytest.mark.parametrize("strategy", ["dual_annealing", "simulated_annealing"])
def test_budget_dependent_strategies_run_once_per_budget(bench, kt_json, strategy):
    """Why these two are not in KT_PREFIX_SAFE: a short run is not the start of a long one
    (dual_annealing stops at scipy's maxfun, which counts revisits; simulated_annealing cools
    on a schedule scaled to the budget)."""
    assert strategy not in bench.KT_PREFIX_SAFE
    differs = 0
    for seed in (0, 1, 2):
        long = _distinct(_trace(bench, kt_json, strategy, 100, seed))
        short = _distinct(_trace(bench, kt_json, strategy, 50, seed))
        differs += short != long[:50]
    assert differs > 0


@pytest.mark.parametrize("strategy", ["random_sample", "genetic_algorithm", "dual_annealing",
                                      "simulated_annealing", "bayes_opt", "pso", "diff_evo",
                                      "greedy_ils", "firefly_algorithm"])
def test_shared_cache_and_searchspace_give_fresh_runs(bench, kt_json, strategy, steady_clock):
    """Runs on the process's shared parse and Searchspace (after other strategies ran on it,
    which fills and pops its neighbour caches) match runs that parse and build everything
    afresh."""
    for other in ("greedy_ils", "diff_evo", "simulated_annealing"):  # dirty the shared space
        _trace(bench, kt_json, other, 40, 7)
    for seed in (0, 1):
        fresh = _trace(bench, kt_json, strategy, 60, seed, shared=False)
        assert _trace(bench, kt_json, strategy, 60, seed) == fresh
        assert _trace(bench, kt_json, strategy, 60, seed) == fresh


def test_latin_hypercube_samples_follow_the_seed(bench, kt_json):
    """diff_evo's first population is a Latin hypercube sample: without the benchmark's seeding
    it came from fresh OS entropy and every run differed whatever its seed."""
    a = _trace(bench, kt_json, "diff_evo", 30, 5, shared=False)
    assert _trace(bench, kt_json, "diff_evo", 30, 5, shared=False) == a
    assert _trace(bench, kt_json, "diff_evo", 30, 6, shared=False) != a


def test_shared_runs_restore_kernel_tuner(bench, kt_json):
    """Outside a run Kernel Tuner is its unpatched self."""
    from kernel_tuner import interface, util
    from kernel_tuner.searchspace import Searchspace
    from scipy.stats import qmc

    read_cache, lhs = util.read_cache, qmc.LatinHypercube
    _trace(bench, kt_json, "random_sample", 10, 0)
    assert util.read_cache is read_cache and qmc.LatinHypercube is lhs
    assert interface.Searchspace is Searchspace


def test_the_ablation_margin_carries_the_spread_of_its_seeds(bench):
    """The swarm-vs-virtual-best margin is reported with one standard error: the runs of the
    swarm and of the chosen agent are independent, so their variances add per space."""
    assert bench.standard_error([1.0]) == 0.0
    assert bench.standard_error([0.0, 2.0]) == pytest.approx(1.0)  # sd sqrt(2), over sqrt(2)

    def cell(p, se):
        return {"P": p, "se": se}

    report = {"budgets": [50], "spaces": {
        "a": {"strategies": {"swarm": {"50": cell(0.5, 0.03)},
                             "swarm-local": {"50": cell(0.6, 0.04)},
                             "swarm-model": {"50": cell(0.2, 0.5)}}},
        "b": {"strategies": {"swarm": {"50": cell(0.4, 0.0)},
                             "swarm-local": {"50": cell(0.1, 0.0)},
                             "swarm-model": {"50": cell(0.3, 0.12)}}}}}
    row = bench.virtual_best(report)["50"]
    assert row["virtual_best"] == pytest.approx((0.6 + 0.3) / 2)  # local on a, model on b
    assert row["swarm"] == pytest.approx(0.45)
    # sqrt(0.03² + 0.04² + 0.12²) / 2 spaces
    assert row["margin_se"] == pytest.approx(0.13 / 2)


def test_first_seed_runs_another_range_of_seeds(bench, tmp_path, capsys):
    """A change chosen on one range of seeds is checked on another: --first-seed K runs seeds
    K..K+N-1, so two one-seed runs are exactly the two halves of a two-seed run."""
    space_dir = tmp_path / "spaces"
    space_dir.mkdir()
    (space_dir / SMALL_SPACE.name).write_bytes(SMALL_SPACE.read_bytes())

    def mean_f(first: int, seeds: int) -> float:
        out = tmp_path / f"r{first}-{seeds}.json"
        rc = bench.main([str(space_dir), "--strategies", "swarm-explorer", "--budgets", "6",
                         "--seeds", str(seeds), "--first-seed", str(first), "--jobs", "1",
                         "--quiet", "--json", str(out)])
        assert rc == 0
        report = json.loads(out.read_text())
        assert report["first_seed"] == first
        (space,) = report["spaces"].values()
        return space["strategies"]["swarm-explorer"]["6"]["f"]

    both = mean_f(0, 2)
    first, second = mean_f(0, 1), mean_f(1, 1)
    assert first != second  # the seeds really differ on this space
    assert both == pytest.approx((first + second) / 2, rel=1e-12)
    with pytest.raises(SystemExit):
        bench.parse_args(["--first-seed", "-1"])
    capsys.readouterr()
