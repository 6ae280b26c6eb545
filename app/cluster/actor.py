"""The worker actor: one per device on the cluster, holding the same local evaluator a
workstation uses (which runs the sandboxed cascade in its own worker process).

This class is plain Python; app.cluster.pool turns it into a Ray actor. The goal travels to
the actor (sources and inputs are built from it there) and each Evaluation travels back
with the node and device it ran on in `resources`, so measurements are never mixed.
"""

from __future__ import annotations

import copy
import os
import socket
import time
from typing import Any

from app.core.types import Candidate, Evaluation
from app.goal import Goal


class EvaluationActor:
    def __init__(self, goal: Goal, cases: list[dict], pace: float = 0.0) -> None:
        import app.gpu  # noqa: F401 - registers the built-in backends
        from app.gpu.registry import backend_spec

        local = copy.deepcopy(goal)
        local.cluster = {}  # the actor evaluates here; it never reaches for a cluster itself
        local.device = None  # Ray gave this actor its GPU (CUDA_VISIBLE_DEVICES): index 0
        self.evaluator = backend_spec(local.backend).make_evaluator(local, list(cases))
        self.pace = pace  # > 0: sleep the recorded time x pace (the benchmark's simulated clock)
        self.node = socket.gethostname()
        self.device_info = self.evaluator.device()
        self.accelerator = _accelerator_ids()
        where = f"gpu {','.join(self.accelerator)}" if self.accelerator else "cpu"
        self.device_id = f"{self.node}/{where}/{self.device_info.name}"

    def info(self) -> dict[str, Any]:
        d = self.device_info
        return {"node": self.node, "pid": os.getpid(), "device": d.name, "device_id": self.device_id,
                "kind": d.kind, "details": dict(d.details), "accelerator_ids": self.accelerator}

    def space(self) -> Any:
        return self.evaluator.space

    def evaluate(self, candidate: Candidate) -> Evaluation:
        evaluation = self.evaluator.evaluate(candidate)
        if self.pace > 0 and evaluation.sim_seconds:
            time.sleep(evaluation.sim_seconds * self.pace)
        return self._mark(evaluation)

    def recheck(self, candidate: Candidate) -> Evaluation | None:
        evaluation = self.evaluator.recheck(candidate)
        return self._mark(evaluation) if evaluation is not None else None

    def baseline(self) -> float | None:
        return self.evaluator.baseline()

    def limit(self) -> float | None:
        return self.evaluator.limit()

    def final_comparison(self, best: Evaluation) -> dict[str, float] | None:
        compare = getattr(self.evaluator, "final_comparison", None)
        return compare(best) if compare is not None else None

    def close(self) -> None:
        self.evaluator.close()

    def _mark(self, evaluation: Evaluation) -> Evaluation:
        evaluation.resources.update(node=self.node, device=self.device_info.name,
                                    device_id=self.device_id)
        return evaluation


def _accelerator_ids() -> list[str]:
    try:
        import ray

        return [str(i) for i in ray.get_runtime_context().get_accelerator_ids().get("GPU", [])]
    except Exception:  # noqa: BLE001 - outside Ray (tests, local use): no accelerator ids
        return []
