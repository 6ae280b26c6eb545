"""What the verification costs per candidate: the verify stage of one honest catalog kernel per
CPU operator, through the real CPU backend (compiled, run in the sandboxed worker), the median
of a few evaluations. Run it on two trees to compare (the same command before and after):

    PYTHONPATH=<tree> .venv/bin/python bench/validation_cost.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
from pathlib import Path

SHAPES = {"gemm": [128, 128, 128], "transpose": [512, 512], "softmax": [256, 1024],
          "rmsnorm": [256, 1024], "layernorm": [256, 1024], "bias_gelu": [256, 1024]}


def honest_config(ev, seed: int = 0) -> dict:
    """One valid configuration of the operator's template, single-threaded."""
    rng = random.Random(seed)
    while True:
        config = ev.space.sample(rng)
        if config is not None and config.get("THREADS", 1) == 1:
            return config


def measure(operator: str, shape: list[int], repeat: int) -> tuple[float, int]:
    from app.core.types import Candidate
    from app.goal import Goal
    from app.gpu.cpu import CpuEvaluator, CpuSettings
    from app.gpu.timing import TimingSettings
    from app.gpu.worker import Deadlines

    settings = CpuSettings(
        timing=TimingSettings(warmup=1, min_samples=3, max_samples=3, max_seconds=0.2),
        baseline_timing=TimingSettings(warmup=1, min_samples=3, max_samples=3, max_seconds=0.2),
        deadlines=Deadlines(compile_s=120.0, run_s=60.0), flush_bytes=0,
        memory_limit_bytes=1 << 30,
        roof_file=Path(tempfile.gettempdir()) / "kernelswarm-test-cpu-roofs.json")
    ev = CpuEvaluator(Goal(name=f"cost {operator}", backend="cpu", operator=operator,
                           shapes=[shape]), settings=settings)
    try:
        config = honest_config(ev)
        seconds, checks = [], 0
        for i in range(repeat + 1):  # the first builds the library: not counted
            result = ev.evaluate(Candidate(config=config, key=f"cost-{operator}-{i}",
                                           agent="explorer"))
            stage = next(s for s in result.stages if s.name == "verify")
            if not result.ok:
                raise SystemExit(f"{operator}: the honest kernel failed: {result.detail}")
            if i:
                seconds.append(stage.seconds)
                checks = int(stage.detail.split()[0]) if stage.detail else 0
        return statistics.median(seconds), checks
    finally:
        ev.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--operators", default=",".join(SHAPES))
    args = parser.parse_args(argv)
    print(f"{'operator':<10} {'shape':<16} {'checks':>6} {'verify s':>9}")
    for name in args.operators.split(","):
        secs, checks = measure(name, SHAPES[name], args.repeat)
        print(f"{name:<10} {SHAPES[name]!s:<16} {checks:>6} {secs:>9.3f}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
