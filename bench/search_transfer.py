"""Transfer across devices for bench/search_efficiency.py (`--transfer`): the swarm cold and
warm-started from a sibling space's recorded results (the same kernel on another device)."""

from __future__ import annotations

import argparse
import multiprocessing as mp
from pathlib import Path

_SIBLINGS: dict[str, object] = {}


def sibling_source(path: str):
    """A recorded space as the history of one run on its device (kept per process: the replay
    loader holds one file at a time)."""
    from app.core.types import Evaluation
    from app.gpu.replay import is_number as _is_number
    from app.gpu.replay import load_cache_file
    from app.swarm.transfer import SourceRun

    if path not in _SIBLINGS:
        rec = load_cache_file(path)
        names = list(rec.params)
        evaluations = []
        for values, r in rec.records.items():
            ok = _is_number(r.get("time"))
            evaluations.append(Evaluation(key=",".join(map(str, values)),
                                          config=dict(zip(names, values)), ok=ok,
                                          value=float(r["time"]) if ok else None))
        _SIBLINGS.clear()
        _SIBLINGS[path] = SourceRun(run_id=None, device=rec.device_name, evaluations=evaluations)
    return _SIBLINGS[path]


def sibling_pairs(stats: dict) -> list[tuple[str, str]]:
    """(space, sibling): the same kernel (kernel name and parameter names) on another device."""
    return [(a, b) for a, sa in stats.items() for b, sb in stats.items()
            if a != b and sa.kernel == sb.kernel and sa.params == sb.params
            and sa.device != sb.device]


def run_transfer(stats: dict, args: argparse.Namespace, bench) -> dict:
    """The swarm cold and warm-started from one sibling's recorded results, per pair."""
    pairs = sibling_pairs(stats)
    if not pairs:
        print("transfer: no space has a sibling (same kernel on another device) here")
        return {}
    budgets = args.transfer_budgets
    tasks = []
    for space in sorted({a for a, _ in pairs}):
        for sibling in ["", *sorted(b for a, b in pairs if a == space)]:
            fitting = tuple(m for m in budgets if m <= stats[space].n_configs)
            for seed in range(args.first_seed, args.first_seed + (args.seeds if fitting else 0)):
                tasks.append(bench.Task(space, space, "swarm", max(fitting), seed, sibling=sibling,
                                  prefixes=fitting))
    found: dict[tuple[str, str, int], list[float | None]] = {}
    with mp.get_context("fork").Pool(max(1, args.jobs), initializer=bench._one_thread) as pool:
        for task, value, _, error in pool.imap(bench.run_task, tasks, chunksize=4):
            if error:
                raise SystemExit(f"transfer run failed on {Path(task.space).name}: {error}")
            for m, v in value.items():
                found.setdefault((task.space, task.sibling, m), []).append(v)
    rows = []
    for space, sibling in pairs:
        st = stats[space]
        for m in budgets:
            if (space, sibling, m) not in found:
                continue
            fr = bench.expected_random_best(st.times, m, st.penalty)
            cell = {"space": st.name, "sibling": stats[sibling].name, "budget": m}
            for kind, key in (("cold", ""), ("warm", sibling)):
                runs = [st.penalty if v is None else v for v in found[(space, key, m)]]
                cell[kind] = bench.standardised(sum(runs) / len(runs), fr, st.f_opt)
                # how close to the optimum a run gets, on average (1: the optimum itself)
                cell[kind + "_of_opt"] = sum(st.f_opt / v for v in runs) / len(runs)
            rows.append(cell)
    if not args.quiet:
        print("\ntransfer (P cold -> warm, fraction of the optimum reached):")
        for c in rows:
            print(f"  {c['space']:<22} from {c['sibling']:<22} M={c['budget']:<4} "
                  f"P {c['cold']:6.3f} -> {c['warm']:6.3f}   "
                  f"of optimum {c['cold_of_opt']:.3f} -> {c['warm_of_opt']:.3f}")
    summary = {}
    for m in budgets:
        cells = [c for c in rows if c["budget"] == m]
        if cells:
            summary[str(m)] = {k: sum(c[k] for c in cells) / len(cells)
                               for k in ("cold", "warm", "cold_of_opt", "warm_of_opt")}
    return {"pairs": rows, "by_budget": summary}


def print_transfer(result: dict) -> None:
    summary = result.get("by_budget") if result else None
    if not summary:
        return
    print("\ntransfer (mean over space/sibling pairs):")
    for m, r in summary.items():
        print(f"  M={m:<5} P cold {r['cold']:6.3f} warm {r['warm']:6.3f}   fraction of optimum "
              f"cold {r['cold_of_opt']:.3f} warm {r['warm_of_opt']:.3f}")
    first = summary[min(summary, key=int)]
    print(f"transfer: P at {min(summary, key=int)} evals cold {first['cold']:.3f} "
          f"warm {first['warm']:.3f}")
