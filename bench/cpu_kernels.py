"""CPU kernels: what a short swarm run finds against the plain C reference loop and numpy.

    python bench/cpu_kernels.py [--evals 16] [--time-budget 90] [--operators gemm,softmax,...]

For each CPU operator at a realistic size, one short swarm run (the coordinator and its agents,
one worker process, the real compiler) searches the operator's design space. The best correct
candidate is then timed once more, interleaved with numpy and with the plain C reference loop in
the same worker (harness-timed medians); the table shows those three side by side. The last
line is

    geomean speedup over C reference X.XX, over numpy Y.YY
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.goal import Goal
from app.gpu.cpu import CpuEvaluator, CpuSettings
from app.gpu.timing import TimingSettings
from app.session import RunSession

SIZES = {"gemm": [512, 512, 512], "softmax": [4096, 1024], "rmsnorm": [4096, 1024],
         "transpose": [2048, 2048]}


def run_operator(operator: str, evals: int, budget_s: float, seed: int) -> dict:
    goal = Goal(name=f"bench {operator}", backend="cpu", operator=operator, shapes=[SIZES[operator]])
    goal.stop.max_evals = evals
    goal.stop.time_budget_s = budget_s
    goal.swarm.workers = 1
    goal.swarm.seed = seed
    settings = CpuSettings(timing=TimingSettings(warmup=1, min_samples=5, max_samples=25,
                                                 max_seconds=1.0, target_spread=0.05))
    evaluator = CpuEvaluator(goal, settings=settings)
    t0 = time.perf_counter()
    try:
        session = RunSession(goal, evaluator=evaluator)
        result = session.run()
        baselines = evaluator.baselines() or {}
    finally:
        evaluator.close()
    final = None
    if result.best is not None:
        # the best candidate, numpy and the C reference timed interleaved, side by side (a
        # fresh worker: the session has closed its own; the build is cached)
        with CpuEvaluator(goal, settings=settings) as again:
            final = again.compare(result.best)
    best = result.best
    row = {"operator": operator, "shape": SIZES[operator], "evals": result.evaluations,
           "ok": sum(1 for e in result.history if e.ok), "seconds": time.perf_counter() - t0,
           "best": best, "final": final, "unit": evaluator.op.throughput_unit,
           "copy_gbs": baselines.get("copy_gbs")}
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evals", type=int, default=16, help="evaluations per operator")
    parser.add_argument("--time-budget", type=float, default=90.0, help="seconds per operator")
    parser.add_argument("--operators", default=",".join(SIZES))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    operators = [o.strip() for o in args.operators.split(",") if o.strip()]
    unknown = [o for o in operators if o not in SIZES]
    if unknown:
        parser.error(f"unknown operator(s) {', '.join(unknown)}; choose from {', '.join(SIZES)}")

    rows = []
    for op in operators:
        print(f"searching {op} {SIZES[op]} ...", file=sys.stderr, flush=True)
        rows.append(run_operator(op, args.evals, args.time_budget, args.seed))

    header = (f"{'operator':<10} {'shape':<16} {'evals':>7} {'best ms':>9} {'rate':>14} "
              f"{'numpy ms':>9} {'C ref ms':>9} {'vs C ref':>9} {'vs numpy':>9}  best config")
    print(header)
    print("-" * len(header))
    vs_ref, vs_np = [], []
    for r in rows:
        b = r["best"]
        shape = "x".join(map(str, r["shape"]))
        if b is None:
            print(f"{r['operator']:<10} {shape:<16} {r['ok']:>3}/{r['evals']:<3} {'no correct candidate':>30}")
            continue
        f = r["final"]
        if f is None:
            print(f"{r['operator']:<10} {shape:<16} {r['ok']:>3}/{r['evals']:<3} {'final comparison failed':>30}")
            continue
        vs_ref.append(f["speedup_vs_c_reference"])
        vs_np.append(f["speedup_vs_numpy"])
        op = CpuEvaluator.operator_of(r["operator"])
        amount = op.flops(tuple(r["shape"])) if r["unit"] == "GFLOP/s" else op.bytes_moved(tuple(r["shape"]))
        rate = f"{amount / (f['candidate_ms'] / 1000) / 1e9:.1f} {r['unit']}"
        config = " ".join(f"{k}={v}" for k, v in b.config.items())
        print(f"{r['operator']:<10} {shape:<16} {r['ok']:>3}/{r['evals']:<3} {f['candidate_ms']:>9.3f} "
              f"{rate:>14} {f['numpy_ms']:>9.3f} {f['c_reference_ms']:>9.3f} "
              f"{f['speedup_vs_c_reference']:>8.2f}x {f['speedup_vs_numpy']:>8.2f}x  {config}")
    print()
    print(f"geomean speedup over C reference {geomean(vs_ref):.2f}, over numpy {geomean(vs_np):.2f}")
    return 0


def geomean(values: list[float]) -> float:
    good = [v for v in values if v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in good) / len(good)) if good else float("nan")


if __name__ == "__main__":
    sys.exit(main())
