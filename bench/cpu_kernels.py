"""CPU kernels side by side: the swarm's best kernel, numpy (OpenBLAS), the plain C loop, the roof.

    python bench/cpu_kernels.py [--evals 16] [--gemm-evals 40] [--time-budget 90]
                                [--operators gemm,softmax,...] [--quick]

For each CPU operator and for 1 thread and all threads, one swarm run (the coordinator and its
agents, one worker process, the real compiler and cascade) tunes the operator at a tuning size
with THREADS fixed. Its best correct configuration is then measured at two or three sizes (one
in a cache, one in DRAM; for GEMM 256^3, 1024^3 and 2048^3) at that thread count, timed
interleaved in this process (each contestant after the other's threads sleep, see
TimingSettings.settle_s) with numpy, the plain C reference loop (skipped where it would take
seconds per call) and, for memory-bound operators, compared with the measured bandwidth roof of
the level the working set lives in (app.gpu.cpu.memory_roof). numpy's BLAS is limited to the same
thread count with threadpoolctl, and which OpenBLAS kernel runs is printed.
OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are removed from this command's environment (it re-executes
itself without them), so OpenBLAS picks its kernel for this CPU as a user's numpy would.

The tuning budget column says how many evaluations (and seconds) the cold-start run needed to
reach 90% of its final speed. The last line is

    geomean speedup over numpy X.XX, GEMM Y.YY of OpenBLAS, memory-bound min Z% of roof

where Y is the smallest GEMM speedup over numpy at 1024^3 and 2048^3 (1 thread and all threads)
and Z the smallest fraction of its roof any memory-bound operator reaches.
"""

from __future__ import annotations

import os
import sys

SCRUBBED = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
if any(v in os.environ for v in SCRUBBED):  # before numpy loads OpenBLAS
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    os.execve(sys.executable, [sys.executable, *sys.argv], env)

import argparse
import contextlib
import ctypes
import math
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from app.catalog import get_operator
from app.catalog.cpu.operator import REFERENCE_SOURCE, kernel_source
from app.goal import Goal
from app.gpu.cpu import (
    CpuEvaluator,
    CpuSettings,
    build_key,
    compile_library,
    kernels_dir,
    toolchain,
)
from app.gpu.cpu import memory_roof as cpu_roof
from app.gpu.timing import TimingSettings, time_interleaved
from app.gpu.verify import CheckCase, make_inputs
from app.paths import cache_dir
from app.session import RunSession
from app.store import Store

MEMORY_SIZES = [[128, 1024], [16384, 4096]]  # 1 MB (L2) and 512 MB (past the L3) working sets
TUNE = {"gemm": [1024, 1024, 1024], "softmax": [4096, 1024], "rmsnorm": [4096, 1024],
        "layernorm": [4096, 1024], "bias_gelu": [4096, 1024], "transpose": [2048, 2048]}
MEASURE = {"gemm": [[256, 256, 256], [1024, 1024, 1024], [2048, 2048, 2048]],
           "transpose": [[256, 512], [16384, 4096]]}
QUICK_MEASURE = {"gemm": [[256, 256, 256], [512, 512, 512]]}
QUICK_MEMORY = [[128, 1024], [2048, 1024]]
GEMM_TARGET_SIZES = ({1024}, {2048})
C_REFERENCE_MAX_FLOP = 2 * 512**3  # the plain triple loop takes seconds beyond this
SETTLE_S = 0.3  # longer than OpenBLAS's idle spin (2^28 cycles) on any current CPU


def measure_sizes(op: str, quick: bool) -> list[list[int]]:
    if quick:
        return QUICK_MEASURE.get(op, QUICK_MEMORY)
    return MEASURE.get(op, MEMORY_SIZES)


# ---- tuning ---------------------------------------------------------------------------------
def tune(operator: str, evals: int, budget_s: float, seed: int, shape: list[int],
         threads: int, db: Path | None = None) -> dict:
    """One swarm run; with `db`, recorded there, so a second run of the same goal warm-starts
    from it (app.swarm.transfer)."""
    goal = Goal(name=f"bench {operator}", backend="cpu", operator=operator, shapes=[shape])
    goal.constraints.restrictions = [f"THREADS == {threads}"]  # a kernel tuned for its thread count
    goal.stop.max_evals = evals
    goal.stop.time_budget_s = budget_s
    goal.swarm.workers = 1
    goal.swarm.seed = seed
    settings = CpuSettings(timing=TimingSettings(warmup=1, min_samples=5, max_samples=25,
                                                 max_seconds=1.0, target_spread=0.05))
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        store = stack.enter_context(Store(db)) if db is not None else None
        evaluator = stack.enter_context(CpuEvaluator(goal, settings=settings))
        session = RunSession(goal, evaluator=evaluator, store=store)
        result = session.run()
    return {"best": result.best, "evals": result.evaluations, "seconds": time.perf_counter() - t0,
            "ok": sum(1 for e in result.history if e.ok),
            "to_90": budget_to_fraction(result.history, 0.9), "times": timeline(result.history),
            "learned_from": [s["run_id"] for s in session.coordinator.learned_from]}


def budget_to_fraction(history: list, fraction: float) -> tuple[int, float] | None:
    """(evaluations, seconds) until the best time so far is within 1/fraction of the final
    best time; None when nothing was correct."""
    times = timeline(history)
    best = min((t for t, _ in times), default=math.inf)
    return budget_to(times, best / fraction) if math.isfinite(best) else None


def timeline(history: list) -> list[tuple[float, float]]:
    """(time in ms, or inf when not correct; seconds the evaluation took) per evaluation."""
    return [(e.time_ms if e.ok and e.time_ms else math.inf, e.sim_seconds or 0.0) for e in history]


def budget_to(times: list[tuple[float, float]], target_ms: float) -> tuple[int, float] | None:
    """(evaluations, seconds) until an evaluation is at least as fast as `target_ms`."""
    seconds = 0.0
    for i, (t, s) in enumerate(times):
        seconds += s
        if t <= target_ms:
            return i + 1, seconds
    return None


def fmt_budget(budget: tuple[int, float] | None) -> str:
    return f"{budget[0]} evals / {budget[1]:.0f} s" if budget else "not reached"


# ---- side-by-side measurement -----------------------------------------------------------------
def load(path: Path, symbol: str, n_pointers: int, n_dims: int):
    fn = getattr(ctypes.CDLL(str(path)), symbol)
    fn.argtypes = [ctypes.c_void_p] * n_pointers + [ctypes.c_long] * n_dims
    fn.restype = None
    return fn


def build(op, config: dict, source: str):
    tc = toolchain()
    lib = kernels_dir() / f"{op.name}-{build_key(op, config, source, tc)}.so"
    if not lib.exists():
        ok, log = compile_library(source, config, lib, tc, 120)
        if not ok:
            raise RuntimeError(f"{op.name} does not compile: {log[:400]}")
    return lib


def reference_library(op):
    source = kernel_source(REFERENCE_SOURCE)
    return build(op, {}, source)


def side_by_side(op, config: dict, source: str, shape: list[int], threads: int, roofs) -> dict:
    shape_t = tuple(shape)
    names = list(op.input_shapes(shape_t))
    n_ptr, n_dims = 1 + len(names), len(op.call_dims(shape_t))
    kernel = load(build(op, {**config, "THREADS": threads}, source), "ks_kernel", n_ptr, n_dims)
    inputs = make_inputs(np, op, CheckCase(list(shape), "normal", 7), "float32")
    out_k = np.empty(op.output_shape(shape_t), np.float32)
    out_n = np.empty_like(out_k)
    args = (out_k.ctypes.data, *(inputs[n].ctypes.data for n in names), *op.call_dims(shape_t))
    calls = {"best": lambda: kernel(*args), "numpy": lambda: op.numpy_baseline(inputs, out_n)}
    if op.flops(shape_t) <= C_REFERENCE_MAX_FLOP or op.memory_bound:
        ref = load(reference_library(op), op.reference_symbol, n_ptr, n_dims)
        out_r = np.empty_like(out_k)
        ref_args = (out_r.ctypes.data, *(inputs[n].ctypes.data for n in names),
                    *op.call_dims(shape_t))
        calls["c_reference"] = lambda: ref(*ref_args)
    # each contestant timed as it runs alone (see TimingSettings.settle_s): back to back, the
    # spinning threads of whichever ran last made the next look up to 2x slower on 2 cores
    settings = TimingSettings(warmup=1, min_samples=5, max_samples=15, max_seconds=4.0,
                              target_spread=0.05, settle_s=SETTLE_S)
    with threadpool_limits(limits=threads, user_api="blas"):
        stats = time_interleaved(calls, settings)
    # the kernel was verified by the cascade; a cheap sanity check against numpy here
    scale = float(np.max(np.abs(out_n))) or 1.0
    agree = float(np.max(np.abs(out_k - out_n))) / scale < 1e-3
    row = {"operator": op.name, "shape": shape, "threads": threads, "agree": agree,
           **{f"{k}_ms": s.median_ms for k, s in stats.items()},
           **{f"{k}_spread": s.spread for k, s in stats.items()}}
    if op.memory_bound:
        level, gbs = roofs.roof_for(op.bytes_moved(shape_t), threads)
        row["level"] = level
        if gbs:
            row["roof_ms"] = op.bytes_moved(shape_t) / (gbs * 1e9) * 1000.0
    amount = op.bytes_moved(shape_t) if op.memory_bound else op.flops(shape_t)
    unit = "GB/s" if op.memory_bound else "GFLOP/s"
    row["rate"] = f"{amount / (row['best_ms'] / 1000) / 1e9:.1f} {unit}"
    return row


# ---- report -----------------------------------------------------------------------------------
def openblas_line() -> str:
    blas = [i for i in threadpool_info() if i.get("internal_api") == "openblas"]
    # numpy's own OpenBLAS first (scipy may load a second copy)
    blas.sort(key=lambda i: "numpy" not in str(i.get("filepath", "")))
    if not blas:
        return "numpy BLAS: not OpenBLAS (" + ", ".join(i.get("internal_api", "?") for i in threadpool_info()) + ")"
    i = blas[0]
    scrubbed = ", ".join(f"{v}={os.environ.get(v, 'unset')}" for v in SCRUBBED)
    return (f"numpy BLAS: OpenBLAS {i.get('version')} kernel {i.get('architecture')} "
            f"threads {i.get('num_threads')} ({scrubbed})")


def pct(spread: float) -> str:
    """(p90 - p10) / median of the samples, in percent."""
    return f"{100 * spread:>3.0f}%" if spread < 9.995 else ">999%"


def fmt(v: float | None, width: int = 9, digits: int = 3) -> str:
    return f"{v:>{width}.{digits}f}" if v is not None and math.isfinite(v) else f"{'-':>{width}}"


def print_table(rows: list[dict]) -> None:
    header = (f"{'operator':<10} {'shape':<16} {'thr':>3} {'level':>5} {'best ms':>9} {'±':>4} "
              f"{'numpy ms':>9} {'±':>4} {'C ref ms':>9} {'roof ms':>9} {'rate':>15} {'% roof':>7} "
              f"{'vs numpy':>9} {'vs C ref':>9}")
    print(header)
    print("-" * len(header))
    for r in rows:
        shape = "x".join(map(str, r["shape"]))
        roof = r.get("roof_ms")
        frac = roof / r["best_ms"] if roof else None
        ref = r.get("c_reference_ms")
        print(f"{r['operator']:<10} {shape:<16} {r['threads']:>3} {r.get('level', '-'):>5} "
              f"{fmt(r['best_ms'])} {pct(r['best_spread'])} {fmt(r['numpy_ms'])} "
              f"{pct(r['numpy_spread'])} {fmt(ref)} {fmt(roof)} {r['rate']:>15} "
              f"{fmt(100 * frac if frac else None, 6, 1)}% {fmt(r['numpy_ms'] / r['best_ms'], 8, 2)}x "
              f"{fmt(ref / r['best_ms'] if ref else None, 8, 2)}x"
              + ("" if r["agree"] else "  (disagrees with numpy!)"))


def summary(rows: list[dict]) -> str:
    speedups = [r["numpy_ms"] / r["best_ms"] for r in rows]
    gemm = [r["numpy_ms"] / r["best_ms"] for r in rows
            if r["operator"] == "gemm" and {r["shape"][0]} in GEMM_TARGET_SIZES]
    roofs = [r["roof_ms"] / r["best_ms"] for r in rows if r.get("roof_ms")]
    return (f"geomean speedup over numpy {geomean(speedups):.2f}, "
            f"GEMM {min(gemm) if gemm else float('nan'):.2f} of OpenBLAS, "
            f"memory-bound min {100 * min(roofs) if roofs else float('nan'):.0f}% of roof")


def geomean(values: list[float]) -> float:
    good = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in good) / len(good)) if good else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evals", type=int, default=16, help="evaluations per memory-bound operator")
    parser.add_argument("--gemm-evals", type=int, default=40, help="evaluations for GEMM")
    parser.add_argument("--time-budget", type=float, default=120.0, help="seconds per operator")
    parser.add_argument("--gemm-time-budget", type=float, default=300.0, help="seconds for GEMM")
    parser.add_argument("--refresh-roofs", action="store_true",
                        help="measure the memory roofs again instead of using the cached ones")
    parser.add_argument("--operators", default=",".join(TUNE))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="small measurement sizes (development)")
    parser.add_argument("--warm-start", action="store_true",
                        help="tune GEMM a second time, warm-started from the first run (same "
                             "history database), and print both tuning budgets")
    args = parser.parse_args(argv)
    operators = [o.strip() for o in args.operators.split(",") if o.strip()]
    unknown = [o for o in operators if o not in TUNE]
    if unknown:
        parser.error(f"unknown operator(s) {', '.join(unknown)}; choose from {', '.join(TUNE)}")

    tc = toolchain()
    roofs, _ = cpu_roof.cached(tc.compiler, tc.identity, cache_dir() / "cpu-roofs.json",
                               refresh=args.refresh_roofs)
    all_threads = os.cpu_count() or 1
    thread_counts = sorted({1, all_threads})
    tuned, warm, rows = {}, {}, []
    history = Path(tempfile.mkdtemp(prefix="ks-bench-"))
    for name in operators:
        shape = TUNE[name] if not args.quick or name != "gemm" else [512, 512, 512]
        evals = args.gemm_evals if name == "gemm" else args.evals
        budget = args.gemm_time_budget if name == "gemm" else args.time_budget
        op = get_operator("cpu", name)
        for threads in thread_counts:
            print(f"tuning {name} {shape} at {threads} thread(s) ({evals} evaluations) ...",
                  file=sys.stderr, flush=True)
            db = history / f"{name}-{threads}.sqlite" if args.warm_start and name == "gemm" else None
            tuned[(name, threads)] = tune(name, evals, budget, args.seed, shape, threads, db)
            if db is not None:  # the same goal again, from what the first run found
                print(f"tuning {name} again, warm-started", file=sys.stderr, flush=True)
                warm[(name, threads)] = tune(name, evals, budget, args.seed + 1, shape, threads, db)
            best = tuned[(name, threads)]["best"]
            again = warm.get((name, threads), {}).get("best")
            if again is not None and (best is None or again.time_ms < best.time_ms):
                best = again  # the swarm's best over both runs
            if best is None:
                print(f"{name}: no correct candidate at {threads} thread(s)", file=sys.stderr)
                continue
            source = best.source if best.source is not None else op.template()
            for size in measure_sizes(name, args.quick):
                print(f"  measuring {name} {size} threads={threads}", file=sys.stderr, flush=True)
                rows.append(side_by_side(op, dict(best.config), source, size, threads, roofs))
    rows.sort(key=lambda r: (operators.index(r["operator"]), r["shape"], r["threads"]))

    load1, load5, _ = os.getloadavg()
    print(openblas_line())
    print(f"machine: {os.cpu_count()} cores, load average {load1:.2f} (1 min) {load5:.2f} (5 min); "
          f"roofs GB/s 1 thread {fmt_roofs(roofs.one_thread)}; all threads {fmt_roofs(roofs.all_threads)}")
    print()
    for (name, threads), t in tuned.items():
        b = t["best"]
        to90 = t["to_90"]
        budget = f"{to90[0]} evals / {to90[1]:.0f} s" if to90 else "-"
        config = " ".join(f"{k}={v}" for k, v in b.config.items()) if b else "none"
        print(f"tuned {name:<10} {threads} thr {t['ok']:>3}/{t['evals']:<3} evals in {t['seconds']:.0f} s; "
              f"90% of final speed after {budget}; best {config}")
    for (name, threads), t in warm.items():
        cold = tuned[(name, threads)]
        print(f"warm start {name} {threads} thr: 90% of the cold run's final speed after "
              f"{fmt_budget(budget_to(t['times'], cold['best'].time_ms / 0.9))} (cold: "
              f"{fmt_budget(cold['to_90'])}); learned from run(s) {t['learned_from']}")
    print()
    print_table(rows)
    print()
    print(summary(rows))
    return 0


def fmt_roofs(rates: dict[str, float]) -> str:
    return " ".join(f"{k} {v:.0f}" for k, v in rates.items())


if __name__ == "__main__":
    sys.exit(main())
