"""What the sandbox and honest timing cost an honest CPU kernel: time and evaluation wall clock.

    python bench/sandbox_cost.py [--repeats 5] [--operators transpose,softmax,...]

For every CPU catalog operator, the operator's template at its first configuration is evaluated
`--repeats` times through the real CpuEvaluator (worker cell, compiler, cascade) at one small and
one larger shape. Prints, per operator and shape, the median measured kernel time (ms, with
p10-p90 of the repeats) and the median wall clock of one evaluation (s). Run it on two checkouts
(e.g. `PYTHONPATH=<old checkout> python bench/sandbox_cost.py`) to compare; the last line is

    geomean kernel time X.XXX ms, geomean evaluation Y.YY s over N operator-shapes
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

from app.catalog import known_operators
from app.core.types import Candidate
from app.goal import Goal
from app.gpu.cpu import CpuEvaluator, CpuSettings

SHAPES = {"transpose": [[256, 384], [2048, 2048]], "softmax": [[64, 1024], [1024, 4096]],
          "rmsnorm": [[64, 1024], [1024, 4096]], "layernorm": [[64, 1024], [1024, 4096]],
          "gemm": [[64, 64, 64], [512, 512, 512]], "bias_gelu": [[64, 1024], [1024, 4096]],
          "reduction": [[1 << 16], [1 << 24]]}


def measure(operator: str, shape: list[int], repeats: int) -> tuple[list[float], list[float]]:
    goal = Goal(name=f"cost {operator}", backend="cpu", operator=operator, shapes=[shape])
    times, walls = [], []
    with CpuEvaluator(goal, settings=CpuSettings(measure_roofs=False)) as ev:
        config = {k: v[0] for k, v in ev.space.params.items()}
        if not ev.space.is_valid(config):
            config = ev.space.sample(__import__("random").Random(0))
        for i in range(repeats):
            t0 = time.perf_counter()
            r = ev.evaluate(Candidate(config=config, key=f"cost-{i}"))
            walls.append(time.perf_counter() - t0)
            if not r.ok:
                raise SystemExit(f"{operator} {shape}: {r.reason}: {r.detail}")
            times.append(r.time_ms)
    return times, walls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--operators", default="")
    args = parser.parse_args()
    names = [n for n in (args.operators.split(",") if args.operators else known_operators("cpu"))
             if n in SHAPES]
    log_t, log_w = [], []
    for name in names:
        for shape in SHAPES[name]:
            times, walls = measure(name, shape, args.repeats)
            q = statistics.quantiles(times, n=10) if len(times) > 1 else [times[0]] * 9
            t, w = statistics.median(times), statistics.median(walls)
            print(f"{name:10s} {'x'.join(map(str, shape)):>14s}  kernel {t:9.4f} ms "
                  f"(p10 {q[0]:.4f}, p90 {q[-1]:.4f})  evaluation {w:6.2f} s", flush=True)
            log_t.append(math.log(t))
            log_w.append(math.log(w))
    n = len(log_t)
    print(f"geomean kernel time {math.exp(sum(log_t) / n):.4f} ms, geomean evaluation "
          f"{math.exp(sum(log_w) / n):.2f} s over {n} operator-shapes")


if __name__ == "__main__":
    main()
