"""Search efficiency: the swarm against Kernel Tuner's strategies on recorded tuning spaces.

    python bench/search_efficiency.py [DIR] [--budgets 50,100,200] [--seeds 20] [--first-seed 0]
                                      [--strategies swarm,genetic_algorithm,...] [--json FILE]

Every cache file in DIR (default ../shared/datasets/tuning-spaces) is searched by the swarm
(the coordinator with its four agents, one worker, replay backend) and by Kernel Tuner's
strategies in its cache simulation mode (`tune_cache`), each with the same evaluation budgets
and seeds. Scores follow Willemsen et al., FGCS 2024 (standardised performance):

    P(M) = (f_rand(M) - f(M)) / (f_rand(M) - f_opt)

f(M) is the mean over seeds of the best valid time among the first M distinct configurations
a strategy evaluated; f_rand(M) is the exact expected best of M draws without replacement from
all configurations in the file (failed ones are draws without a value), computed with order
statistics. A run that finds no valid configuration (and the rare all-failed random draw) is
charged the worst valid time. 0 is random search, 1 finds the optimum every time. Scores are
averaged over budgets and spaces.

Extra strategy names for diagnosis: `swarm-AGENT` runs the coordinator with that agent alone,
`swarm~AGENT` the swarm without that agent; `swarm+nocheck` (`swarm-model+nocheck`) turns the
model agent's predictive check off (app/swarm/agents/model_check.py), `+check0.2` sets its bar.
`--kt-cache FILE` keeps Kernel Tuner's results (JSON lines) so a rerun only redoes the swarm.
`--ablation` runs every agent alone too and compares the swarm with the virtual best agent;
`--transfer` runs the swarm cold and warm-started from a sibling space (the same kernel on
another device) at budgets 20/50/100. See bench/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import math
import multiprocessing as mp
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "bench"):  # the app, and this benchmark's sibling modules
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from search_ablation import (  # noqa: F401 (virtual_best: tests)
    print_ablation,
    print_shares,
    virtual_best,
)
from search_kt import _kt_shared, _seeded_lhs

KT_STRATEGIES = ("random_sample", "genetic_algorithm", "dual_annealing", "simulated_annealing",
                 "bayes_opt", "pso", "diff_evo", "greedy_ils", "firefly_algorithm")
# Strategies whose run at budget M evaluates exactly the first M distinct configurations of a
# longer run with the same seed: max_fevals only stops them (checked in
# tests/test_search_bench.py). One run at the largest budget is scored at every budget.
# dual_annealing (scipy's maxfun also counts revisits and invalid points, so a short run
# stops early) and simulated_annealing (its cooling schedule is scaled to max_fevals) are not:
# they run once per budget.
KT_PREFIX_SAFE = frozenset({"random_sample", "genetic_algorithm", "bayes_opt", "pso", "diff_evo",
                            "greedy_ils", "firefly_algorithm"})
DEFAULT_DIR = ROOT.parent / "shared" / "datasets" / "tuning-spaces"


# ---- scoring ---------------------------------------------------------------------------------
def expected_random_best(times: Sequence[float | None], m: int, penalty: float) -> float:
    """Exact expected minimum of the valid values among m draws without replacement from
    `times` (None: a failed configuration, a draw without a value). Draws that hold no valid
    value count as `penalty`.

    With the valid values sorted t_1 <= ... <= t_V among N configurations, the i-th smallest
    is the best drawn exactly when it is drawn and t_1..t_{i-1} are not:
    P = C(N-i, m-1) / C(N, m).
    """
    n = len(times)
    if not 1 <= m <= n:
        raise ValueError(f"budget {m} must be between 1 and the number of configurations {n}")
    valid = sorted(t for t in times if t is not None)
    total = math.comb(n, m)
    # Big-integer ratios first, so the probabilities are exact to float precision.
    expected = sum(t * (math.comb(n - i, m - 1) / total) for i, t in enumerate(valid, start=1))
    p_none = math.comb(n - len(valid), m) / total
    return expected + p_none * penalty


def standardised(f: float, f_rand: float, f_opt: float) -> float:
    return (f_rand - f) / (f_rand - f_opt) if f_rand != f_opt else 1.0


def standard_error(values: Sequence[float]) -> float:
    """Of the mean of `values` (0 for fewer than two). P is linear in f, so the mean of the
    runs' own P equals the P of their mean f, and this is the spread of that mean."""
    if len(values) < 2:
        return 0.0
    return statistics.stdev(values) / math.sqrt(len(values))


def best_of_first(trace: Sequence[tuple[tuple, float | None]], m: int) -> float | None:
    """Best valid value among the first m distinct configurations of an evaluation trace."""
    seen: set[tuple] = set()
    best = None
    for config, value in trace:
        if config in seen:
            continue
        seen.add(config)
        if len(seen) > m:
            break
        if value is not None and (best is None or value < best):
            best = value
    return best


# ---- one search run ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Task:
    space: str  # the cache file as given
    kt_json: str  # an uncompressed copy Kernel Tuner can read
    strategy: str
    budget: int
    seed: int
    sibling: str = ""  # transfer: the recorded space of the same kernel on another device
    # swarm runs with one worker are deterministic and ignore their budget until it is spent:
    # one run at the largest budget is scored at every smaller one (its first M evaluations)
    prefixes: tuple[int, ...] = ()

    @property
    def cache_key(self) -> str:
        return self.key_at(self.budget)

    def key_at(self, budget: int) -> str:
        """--kt-cache key of this run's result at one budget."""
        return f"{Path(self.space).name}|{os.path.getsize(self.space)}|{self.strategy}|{budget}|{self.seed}"


def run_swarm(task: Task) -> dict[int, float | None]:
    from app.gpu.replay import ReplayEvaluator, load_cache_file
    from app.swarm.agents import AGENT_NAMES
    from app.swarm.coordinator import Coordinator
    from app.swarm.plan import RunPlan

    strategy, _, policy = task.strategy.partition("@")  # swarm@POLICY: another allocation policy
    strategy, _, option = strategy.partition("+")  # +checkX / +nocheck: the model's check
    strategy, _, without = strategy.partition("~")  # swarm~AGENT: the swarm without that agent
    agents = ([a for a in AGENT_NAMES if a != without] if strategy == "swarm"
              else [strategy.split("-", 1)[1]])
    sibling = None
    if task.sibling:
        from search_transfer import sibling_source

        sibling = sibling_source(task.sibling)
    evaluator = ReplayEvaluator(load_cache_file(task.space), simulate_time=False)
    transfer = None
    if sibling is not None:
        from app.swarm.transfer import rank_transfer

        transfer = rank_transfer(evaluator.space, [sibling])
    coordinator = Coordinator(evaluator.space, evaluator, RunPlan(agents=agents, minimize=True,
                              max_evals=task.budget, workers=1, seed=task.seed,
                              transfer=transfer))
    if option and "model" in coordinator.agents:  # before the run: the check scores in order
        coordinator.agents["model"].check_predictive(
            None if option == "nocheck" else _threshold(option[5:]))
    if policy:  # the coordinator reads its allocator at every pick: swap it before the run
        from app.swarm.allocation import make_allocator

        old = coordinator.allocator
        coordinator.allocator = make_allocator(policy, old.agents, spend=old.spend)
    result = coordinator.run()
    trace = [(evaluator.space.as_tuple(e.config), e.value if e.ok else None) for e in result.history]
    out: dict = {m: best_of_first(trace, m) for m in {task.budget, *task.prefixes}}
    if len(agents) > 1:  # how the allocator shared the largest budget out
        out["agents"] = {a: sum(e.agent == a for e in result.history) for a in coordinator.agents}
    return out


def run_kernel_tuner(task: Task) -> dict[int, float | None]:
    trace = kernel_tuner_trace(task)
    return {m: best_of_first(trace, m) for m in {task.budget, *task.prefixes}}


def kernel_tuner_trace(task: Task, shared: bool = True) -> list[tuple[tuple, float | None]]:
    """Every configuration one Kernel Tuner run evaluated, in order, with its time (None: failed).

    shared: reuse this process's parsed cache file and Searchspace (see `_kt_shared`)."""
    import numpy as np
    from kernel_tuner.interface import tune_cache

    # Kernel Tuner's strategies draw from the global generators; seed both.
    random.seed(task.seed)
    np.random.seed(task.seed % 2**32)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), _seeded_lhs(), \
            (_kt_shared(task.kt_json) if shared else contextlib.nullcontext()):
        warnings.simplefilter("ignore")
        results, _ = tune_cache(task.kt_json, strategy=task.strategy, quiet=True, verbose=False,
                                strategy_options={"max_fevals": task.budget})
    keys = _tune_keys(task.space)
    trace = []
    for r in results:
        if not r:
            continue
        t = r.get("time")
        ok = "__error__" not in r and isinstance(t, (int, float)) and math.isfinite(t) and t < 1e30
        trace.append((tuple(r[k] for k in keys), float(t) if ok else None))
    return trace


def _tune_keys(path: str) -> list[str]:
    from app.gpu.replay import load_cache_file

    return list(load_cache_file(path).params)


def _one_thread() -> None:
    """Each worker process computes on one thread: with `--jobs` processes on as many cores,
    BLAS's own threads (bayes_opt's Gaussian process) only fight over them (measured: a
    bayes_opt run at 200 evaluations took 6.5 s with OpenBLAS's default threads on this
    2-core machine, 2.2 s with one)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    threadpool_limits(1)


def run_task(task: Task) -> tuple[Task, dict[int, float | None] | None, float, str]:
    start = time.perf_counter()
    try:
        if task.strategy.startswith("swarm"):
            best = run_swarm(task)
        else:
            best = run_kernel_tuner(task)
        return task, best, time.perf_counter() - start, ""
    except Exception as exc:  # noqa: BLE001 - one broken strategy must not sink the benchmark
        return task, None, time.perf_counter() - start, f"{type(exc).__name__}: {exc}"


# ---- the benchmark -------------------------------------------------------------------------------
@dataclass
class SpaceStats:
    name: str
    n_configs: int
    f_opt: float
    penalty: float
    times: list[float | None]
    kernel: str = ""
    device: str = ""
    params: tuple[str, ...] = ()


def space_stats(path: Path) -> SpaceStats:
    from app.gpu.replay import CacheFileError, load_cache_file
    from app.gpu.replay import is_number as _is_number

    try:
        rec = load_cache_file(path)
    except CacheFileError as exc:
        raise SystemExit(f"error: {exc}") from None
    times = [float(r["time"]) if _is_number(r.get("time")) else None for r in rec.records.values()]
    valid = [t for t in times if t is not None]
    if not valid:
        raise SystemExit(f"error: {path} holds no valid measurement to score against")
    return SpaceStats(name=path.name.split(".json")[0], n_configs=len(times), f_opt=min(valid),
                      penalty=max(valid), times=times, kernel=rec.kernel_name,
                      device=rec.device_name, params=tuple(rec.params))


def find_spaces(directory: Path) -> list[Path]:
    if not directory.is_dir():
        raise SystemExit(f"error: {directory} is not a directory of Kernel Tuner cache files")
    spaces = sorted(p for p in directory.iterdir() if p.name.endswith((".json", ".json.gz")))
    if not spaces:
        raise SystemExit(f"error: no .json or .json.gz cache files in {directory}")
    return spaces


def uncompressed_copy(path: Path, tmp: Path) -> Path:
    """Kernel Tuner reads only plain .json cache files."""
    if path.name.endswith(".json"):
        return path
    out = tmp / path.name.removesuffix(".gz")
    with gzip.open(path, "rb") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def load_kt_cache(path: Path | None) -> dict[str, float | None]:
    if path is None or not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            out[row["key"]] = row["best"]
    return out


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", nargs="?", default=str(DEFAULT_DIR), help="directory of cache files")
    ap.add_argument("--budgets", default="50,100,200", help="evaluation budgets M (comma separated)")
    ap.add_argument("--seeds", type=int, default=20, help="runs per strategy, space and budget")
    ap.add_argument("--first-seed", type=int, default=0,
                    help="seeds run are FIRST..FIRST+SEEDS-1 (choose a change on one range, "
                         "check it on another)")
    ap.add_argument("--strategies", default="swarm," + ",".join(KT_STRATEGIES),
                    help="what runs: swarm, swarm-AGENT, and Kernel Tuner strategy names")
    ap.add_argument("--json", type=Path, help="write every f(M), f_rand(M) and P(M) here")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes")
    ap.add_argument("--kt-cache", type=Path, help="JSON-lines file keeping Kernel Tuner results")
    ap.add_argument("--ablation", action="store_true",
                    help="also run every agent alone and compare the swarm with the virtual best")
    ap.add_argument("--quiet", action="store_true", help="no per-space tables")
    ap.add_argument("--transfer", action="store_true",
                    help="also: the swarm cold vs warm-started from a sibling space's results")
    ap.add_argument("--transfer-budgets", default="20,50,100", help="budgets of --transfer")
    ap.add_argument("--leave-one-out", action="store_true",
                    help="judge the swarm (and every swarm@POLICY change) on each space by the "
                         "other spaces' choice, per space and per GPU vendor (implies --ablation)")
    ap.add_argument("--baseline", default="swarm", help="what --leave-one-out judges changes against")
    ap.add_argument("--previous", type=Path, help="a report (--json) to compare each space with")
    ap.add_argument("--previous-strategy", default="",
                    help="the strategy the baseline is compared with, in --previous or, without "
                         "it, in this run (e.g. swarm@decay: the allocation before)")
    ap.add_argument("--from-json", type=Path, action="append",
                    help="report --leave-one-out from saved reports (--json; repeat to merge "
                         "the strategies of several runs) without running")
    args = ap.parse_args(argv)
    args.previous_report = _read_report(ap, args.previous, "--previous")
    args.saved_report = None
    for path in args.from_json or ():
        args.saved_report = _merge(args.saved_report, _read_report(ap, path, "--from-json"))
    try:
        args.budgets = sorted({int(b) for b in args.budgets.split(",") if b.strip()})
    except ValueError:
        ap.error(f"--budgets must be comma-separated integers, got {args.budgets!r}")
    if not args.budgets or min(args.budgets) < 1:
        ap.error("--budgets needs at least one positive integer")
    try:
        args.transfer_budgets = sorted({int(b) for b in args.transfer_budgets.split(",") if b.strip()})
    except ValueError:
        ap.error("--transfer-budgets must be comma-separated integers")
    if args.seeds < 1:
        ap.error("--seeds must be at least 1")
    if args.first_seed < 0:
        ap.error("--first-seed must be 0 or more")
    args.strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    from app.swarm.agents import AGENT_NAMES
    from app.swarm.allocation import ALLOCATORS

    known = {"swarm", *(f"swarm-{a}" for a in AGENT_NAMES), *KT_STRATEGIES,
             *(f"swarm@{p}" for p in ALLOCATORS), *(f"swarm~{a}" for a in AGENT_NAMES)}
    known |= {f"{s}+{o}" for s in ("swarm", "swarm-model") for o in ("check", "nocheck")}
    checked = [s for s in args.strategies if "+check" in s]  # +checkX: yields below X
    known |= {s for s in checked if _threshold(s.split("+check", 1)[1].split("@")[0]) is not None
              and s.split("+check")[0] in ("swarm", "swarm-model")}
    args.ablation = args.ablation or args.leave_one_out
    if args.ablation:
        args.strategies += [s for s in ("swarm", *(f"swarm-{a}" for a in AGENT_NAMES))
                            if s not in args.strategies]
    unknown = [s for s in args.strategies if s not in known]
    if unknown:
        ap.error(f"unknown strategies {unknown}; choose from {sorted(known)}")
    return args


def _threshold(text: str) -> float | None:
    try:
        return float(text or 0.0)
    except ValueError:
        return None


def _read_report(ap: argparse.ArgumentParser, path: Path | None, flag: str) -> dict | None:
    if path is None:
        return None
    try:
        report = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        ap.error(f"{flag} {path}: not a readable JSON report ({exc})")
    if not isinstance(report, dict) or not isinstance(report.get("spaces"), dict):
        ap.error(f"{flag} {path}: not a report written by --json (no 'spaces')")
    return report


def _merge(into: dict | None, report: dict) -> dict:
    """Strategies of two reports on the same budgets, per space (the later wins a clash)."""
    if into is None:
        return report
    for name, space in report["spaces"].items():
        into["spaces"].setdefault(name, space)["strategies"].update(space["strategies"])
    into.setdefault("agent_evaluations", {}).update(report.get("agent_evaluations", {}))
    return into


def leave_one_out(report: dict, args: argparse.Namespace) -> None:
    from leave_one_out import report_leave_one_out

    previous = args.previous_report
    if previous is None and args.previous_strategy:
        previous = report  # the previous version ran alongside, under another name
    report["leave_one_out"] = report_leave_one_out(report, args.baseline, previous,
                                                   previous_strategy=args.previous_strategy)


def agent_evaluations(stats: dict[str, SpaceStats], shares: dict) -> dict:
    """Per swarm strategy and space, each agent's evaluations (mean and most in one run) at the
    largest budget; prints the largest one-run count of any agent per strategy."""
    out: dict = {}
    for (path, strategy), runs in shares.items():
        agents = {a for r in runs for a in r}
        out.setdefault(strategy, {})[stats[path].name] = {
            a: {"mean": sum(r.get(a, 0) for r in runs) / len(runs),
                "max": max(r.get(a, 0) for r in runs)} for a in sorted(agents)}
    for strategy, spaces in out.items():
        space, agent, most = max(((s, a, v["max"]) for s, row in spaces.items()
                                  for a, v in row.items()), key=lambda x: x[2])
        print(f"{strategy}: most evaluations one agent took in one run (largest budget): "
              f"{agent} {most} on {space}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.saved_report is not None:  # report only: nothing runs
        if args.saved_report.get("agent_evaluations"):
            print_shares(args.saved_report)
        leave_one_out(args.saved_report, args)
        return 0
    started = time.perf_counter()
    spaces = find_spaces(Path(args.dir))
    kt_cache = load_kt_cache(args.kt_cache)
    with tempfile.TemporaryDirectory(prefix="kt-cache-") as tmp:
        stats: dict[str, SpaceStats] = {}
        tasks: list[Task] = []
        for path in spaces:
            st = space_stats(path)
            stats[str(path)] = st
            budgets = [b for b in args.budgets if b <= st.n_configs]
            kt_json = uncompressed_copy(path, Path(tmp)) if any(
                not s.startswith("swarm") for s in args.strategies) else path
            for strategy in args.strategies:
                for seed in range(args.first_seed, args.first_seed + args.seeds):
                    if not budgets:
                        continue
                    if strategy.startswith("swarm") or strategy in KT_PREFIX_SAFE:
                        tasks.append(Task(str(path), str(kt_json), strategy, max(budgets), seed,
                                          prefixes=tuple(budgets)))
                        continue
                    for budget in budgets:
                        tasks.append(Task(str(path), str(kt_json), strategy, budget, seed))
        best: dict[tuple[str, str, int], list[float | None]] = {}
        todo = []
        for t in tasks:
            keys = {m: t.key_at(m) for m in (t.prefixes or (t.budget,))}
            if not t.strategy.startswith("swarm") and all(k in kt_cache for k in keys.values()):
                for m, k in keys.items():
                    best.setdefault((t.space, t.strategy, m), []).append(kt_cache[k])
            else:
                todo.append(t)
        errors: dict[str, str] = {}
        shares: dict[tuple[str, str], list[dict[str, int]]] = {}  # evaluations per agent
        spent: dict[str, float] = {}  # seconds inside runs, per strategy (all processes)
        with contextlib.ExitStack() as stack:
            cache_out = stack.enter_context(open(args.kt_cache, "a")) if args.kt_cache else None
            pool = stack.enter_context(mp.get_context("fork").Pool(max(1, args.jobs),
                                                                   initializer=_one_thread))
            done = 0
            for task, value, seconds, error in pool.imap_unordered(run_task, todo, chunksize=1):
                done += 1
                spent[task.strategy] = spent.get(task.strategy, 0.0) + seconds
                if error:
                    errors.setdefault(task.strategy, f"{Path(task.space).name}: {error}")
                    continue
                if "agents" in value:
                    shares.setdefault((task.space, task.strategy), []).append(value.pop("agents"))
                for m, v in value.items():
                    best.setdefault((task.space, task.strategy, m), []).append(v)
                    if cache_out and not task.strategy.startswith("swarm"):
                        cache_out.write(json.dumps({"key": task.key_at(m), "best": v}) + "\n")
                if cache_out:
                    cache_out.flush()
                if done % 50 == 0 or done == len(todo):
                    print(f"  {done}/{len(todo)} runs, {time.perf_counter() - started:.0f} s",
                          file=sys.stderr, flush=True)
    report = score(stats, best, args) if args.strategies else {}
    if shares:
        report["agent_evaluations"] = agent_evaluations(stats, shares)
    for strategy, error in errors.items():
        print(f"warning: {strategy} failed (left out where it failed): {error}")
    if args.transfer:
        from search_transfer import run_transfer

        report["transfer"] = run_transfer(stats, args, sys.modules[__name__])
    report["elapsed_s"] = round(time.perf_counter() - started, 1)
    report["run_seconds"] = {k: round(v, 1) for k, v in spent.items()}
    if spent:
        print("seconds inside runs (all processes): " + ", ".join(
            f"{k} {v:.0f}" for k, v in sorted(spent.items(), key=lambda kv: -kv[1])))
    print(f"time: {report['elapsed_s']:.0f} s with {args.jobs} processes"
          + (f" (load average {os.getloadavg()[0]:.1f})" if hasattr(os, "getloadavg") else ""))
    if args.strategies:
        print_final(report)
    if args.ablation:
        print_ablation(report)
    if report.get("agent_evaluations"):
        print_shares(report)
    if args.leave_one_out:
        leave_one_out(report, args)
    if args.transfer:
        from search_transfer import print_transfer

        print_transfer(report["transfer"])
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


def score(stats: dict[str, SpaceStats], best: dict, args: argparse.Namespace) -> dict:
    """f, f_rand and P per space, strategy and budget; prints the tables."""
    report: dict = {"budgets": args.budgets, "seeds": args.seeds, "first_seed": args.first_seed,
                    "spaces": {}, "scores": {}}
    per_strategy: dict[str, list[float]] = {s: [] for s in args.strategies}
    for path, st in stats.items():
        rows = {}
        f_rand = {m: expected_random_best(st.times, m, st.penalty)
                  for m in args.budgets if m <= st.n_configs}
        for strategy in args.strategies:
            row = {}
            for m, fr in f_rand.items():
                runs = best.get((path, strategy, m))
                if not runs:
                    continue
                found = [st.penalty if v is None else v for v in runs]
                f = sum(found) / len(found)
                p = standardised(f, fr, st.f_opt)
                per_run = [standardised(v, fr, st.f_opt) for v in found]
                row[m] = {"f": f, "f_rand": fr, "P": p, "runs": len(runs),
                          "se": standard_error(per_run), "P_runs": per_run}
                per_strategy[strategy].append(p)
            rows[strategy] = row
        report["spaces"][st.name] = {"n_configs": st.n_configs, "f_opt": st.f_opt,
                                     "f_rand": {str(m): v for m, v in f_rand.items()},
                                     "strategies": {s: {str(m): v for m, v in r.items()}
                                                    for s, r in rows.items()}}
        if args.quiet:
            means = {s: sum(v["P"] for v in r.values()) / len(r) for s, r in rows.items() if r}
            print(f"{st.name}: " + ", ".join(f"{s} {v:.3f}" for s, v in means.items()))
            continue
        print(f"\n{st.name}: {st.n_configs} configurations, optimum {st.f_opt:.4g}, "
              + ", ".join(f"f_rand({m}) {v:.4g}" for m, v in f_rand.items()))
        print(f"  {'strategy':<22}" + "".join(f"{'P(' + str(m) + ')':>9}" for m in f_rand) + f"{'mean':>9}")
        for strategy, row in rows.items():
            cells = "".join(f"{row[m]['P']:9.3f}" if m in row else f"{'-':>9}" for m in f_rand)
            mean = sum(v["P"] for v in row.values()) / len(row) if row else float("nan")
            print(f"  {strategy:<22}{cells}{mean:9.3f}")
    for strategy, ps in per_strategy.items():
        if ps:
            report["scores"][strategy] = sum(ps) / len(ps)
    print("\nscore (P averaged over budgets and spaces):")
    for strategy, s in sorted(report["scores"].items(), key=lambda kv: -kv[1]):
        print(f"  {strategy:<22}{s:9.3f}")
    return report


def print_final(report: dict) -> None:
    scores = report["scores"]
    kt = {s: v for s, v in scores.items() if s in KT_STRATEGIES}
    swarm = scores.get("swarm")
    if swarm is None or not kt:
        return
    name, value = max(kt.items(), key=lambda kv: kv[1])
    print(f"swarm score {swarm:.3f} vs best kernel_tuner {name} {value:.3f}")


if __name__ == "__main__":
    sys.exit(main())
