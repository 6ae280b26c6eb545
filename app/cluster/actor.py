"""The worker actor: one per device on the cluster, holding the same local evaluator a
workstation uses (which runs the sandboxed cascade in its own worker process).

This class is plain Python; app.cluster.pool turns it into a Ray actor. The goal travels to
the actor (sources and inputs are built from it there) and each Evaluation travels back
with the node and device it ran on in `resources` (host name, Ray node id, GPU model as Ray
names it, device), so measurements are never mixed.
"""

from __future__ import annotations

import copy
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from app.core.types import Candidate, Evaluation
from app.goal import ClusterTable, Goal


class EvaluationActor:
    def __init__(self, goal: Goal, cases: list[dict], wire: Callable[[], None],
                 pace: float = 0.0) -> None:
        # The actor's process starts with empty registries: `wire` is the session's own
        # wiring (a module-level function, pickled by reference), so they are filled here
        # exactly as on the workstation, from the one place that knows what to register.
        wire()
        from app.gpu.registry import backend_spec

        local = copy.deepcopy(goal)
        local.cluster = ClusterTable()  # the actor evaluates here; it never reaches for a cluster itself
        local.device = None  # Ray gave this actor its GPU (CUDA_VISIBLE_DEVICES): index 0
        self.evaluator = backend_spec(local.backend).make_evaluator(local, list(cases))
        self.pace = pace  # > 0: sleep the recorded time x pace (the benchmark's simulated clock)
        self.node = socket.gethostname()
        self.device_info = self.evaluator.device()
        self.accelerator = _accelerator_ids()
        self.node_id, self.gpu_model = _node_identity(gpu=bool(self.accelerator))
        where = f"gpu {','.join(self.accelerator)}" if self.accelerator else "cpu"
        self.device_id = f"{self.node}/{where}/{self.device_info.name}"

    def info(self) -> dict[str, Any]:
        d = self.device_info
        return {"node": self.node, "pid": os.getpid(), "device": d.name, "device_id": self.device_id,
                "kind": d.kind, "details": dict(d.details), "accelerator_ids": self.accelerator,
                "node_id": self.node_id, "gpu_model": self.gpu_model}

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
        return self.evaluator.final_comparison(best)

    def close(self) -> None:
        self.evaluator.close()

    def _mark(self, evaluation: Evaluation) -> Evaluation:
        evaluation.resources.update(node=self.node, device=self.device_info.name,
                                    device_id=self.device_id, node_id=self.node_id)
        if self.gpu_model:
            evaluation.resources["gpu_model"] = self.gpu_model
        return evaluation


def _accelerator_ids() -> list[str]:
    try:
        import ray

        return [str(i) for i in ray.get_runtime_context().get_accelerator_ids().get("GPU", [])]
    except Exception:  # noqa: BLE001 - outside Ray (tests, local use): no accelerator ids
        return []


def _node_identity(gpu: bool) -> tuple[str, str]:
    """This actor's Ray node id and, for a GPU actor, its node's GPU model(s) as Ray names them
    (the node's accelerator_type resources): what the actor really ran on, read here rather
    than taken from what the pool asked for."""
    try:
        import ray

        if not ray.is_initialized():
            return "", ""
        node_id = ray.get_runtime_context().get_node_id()
        if not gpu:
            return node_id, ""
        from app.cluster.devices import cluster_nodes

        models = next((n.gpu_models for n in cluster_nodes(ray) if n.node_id == node_id), [])
        return node_id, ",".join(models)
    except Exception:  # noqa: BLE001 - outside Ray (tests, local use): nothing to say
        return "", ""
