"""How evaluations scale over Ray actors on this machine (issue 16, item 6).

A replay goal (pnpoly on the RTX 3090) on the simulated clock: every evaluation sleeps its
recorded compile + verify + benchmark time (at least about 100 ms, median 240 ms), so an
actor is busy the way a real GPU worker is, without needing a core. The same candidates go
through the local pool (the replay evaluator in N threads, sleeping the same) and through a
ClusterEvaluator with N actors on a local Ray head, for N = 1, 2, 4, 8; both are driven like
the coordinator drives them (N threads, each calling `evaluate`).

Efficiency at N = cluster evaluations/s / local pool evaluations/s. Overhead per evaluation
= what Ray adds to one call: the wall time of a cluster call minus the time the evaluation
slept, less the same figure for a local call (thread wake-ups, sleep granularity on a busy
two-core machine). Each N line also shows the raw per-call figure over Ray.

    .venv/bin/python bench/cluster_scaling.py [--evals-per-actor 12]

The last line: `scaling efficiency X% at 8 actors, overhead Y ms per evaluation`.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from app.cluster.pool import ClusterEvaluator
from app.core.cluster_settings import check_cluster_table
from app.core.types import Candidate
from app.goal import Goal
from app.gpu.replay import make_replay_evaluator
from app.session.registries import wire

SPACE = ROOT / "resources" / "spaces" / "pnpoly_RTX_3090.json.gz"
ACTORS = (1, 2, 4, 8)


class PacedLocal:
    """The local pool's evaluator: the replay evaluator, sleeping each recorded time."""

    def __init__(self, goal: Goal) -> None:
        self.inner = make_replay_evaluator(goal)

    def evaluate(self, candidate: Candidate):
        evaluation = self.inner.evaluate(candidate)
        time.sleep(evaluation.sim_seconds)
        return evaluation


def candidates(goal: Goal, n: int, seed: int = 0) -> list[Candidate]:
    space = make_replay_evaluator(goal).space
    rng = random.Random(seed)
    out, seen = [], set()
    while len(out) < n:
        config = space.sample(rng)
        key = space.key(config)
        if key not in seen:
            seen.add(key)
            out.append(Candidate(config=config, key=key, agent="bench"))
    return out


def drive(evaluator, cands: list[Candidate], threads: int) -> tuple[float, list[float]]:
    """(wall seconds, per-call overhead seconds) for `cands` over `threads` threads."""
    overheads: list[float] = []

    def one(c: Candidate) -> None:
        t0 = time.perf_counter()
        evaluation = evaluator.evaluate(c)
        overheads.append(time.perf_counter() - t0 - evaluation.sim_seconds)

    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(threads) as pool:
        list(pool.map(one, cands))
    return time.perf_counter() - t0, overheads


def start_head(tmp: str) -> tuple[str, dict]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "RAY_TMPDIR": tmp}
    ray = str(Path(sys.executable).parent / "ray")
    subprocess.run([ray, "start", "--head", f"--port={port}", "--num-cpus=2",
                    "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={tmp}"],
                   env=env, check=True, capture_output=True, timeout=120)
    return f"127.0.0.1:{port}", env


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--evals-per-actor", type=int, default=12)
    args = parser.parse_args()
    goal = Goal(name="pnpoly scaling", space=str(SPACE), backend="replay")
    tmp = tempfile.mkdtemp(prefix="ksbench", dir="/tmp")
    address, env = start_head(tmp)
    results = []
    try:
        local = PacedLocal(goal)
        for n in ACTORS:
            cands = candidates(goal, n * args.evals_per_actor, seed=n)
            local_wall, local_overheads = drive(local, cands, n)
            pool = ClusterEvaluator(goal, [], check_cluster_table(
                {"address": address, "actors": n}), wire=wire, pace=1.0)
            try:
                drive(pool, cands[:n], n)  # warm: first calls pay for connections
                wall, overheads = drive(pool, cands, n)
            finally:
                pool.close()
            rate, local_rate = len(cands) / wall, len(cands) / local_wall
            raw_ms = 1000 * sum(overheads) / len(overheads)
            overhead_ms = raw_ms - 1000 * sum(local_overheads) / len(local_overheads)
            results.append((n, rate, local_rate, overhead_ms))
            print(f"{n} actor{'s' * (n > 1)}: {rate:6.2f} evaluations/s on Ray, {local_rate:6.2f} "
                  f"in the local pool ({n} threads), efficiency {rate / local_rate:6.1%}, "
                  f"overhead {overhead_ms:.2f} ms per evaluation ({raw_ms:.2f} ms per Ray call "
                  "beyond its sleep)", flush=True)
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        subprocess.run([str(Path(sys.executable).parent / "ray"), "stop", "--force"], env=env,
                       capture_output=True, timeout=120, check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    n, rate, local_rate, overhead_ms = results[-1]
    print(f"scaling efficiency {100 * rate / local_rate:.0f}% at {n} actors, "
          f"overhead {overhead_ms:.1f} ms per evaluation")
    return 0


if __name__ == "__main__":
    sys.exit(main())
