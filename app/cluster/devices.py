"""What a Ray cluster offers: its alive nodes and their devices, and how many worker actors a
goal gets on it, with what resources each.

GPU models come from Ray's `accelerator_type:NAME` resources (set by Ray on GPU nodes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.cluster.connect import ClusterUnavailable
from app.core.cluster_settings import ClusterSettings

ACCEL = "accelerator_type:"


@dataclass
class NodeDevices:
    node: str  # host name
    ip: str
    cpus: float
    gpus: float
    gpu_models: list[str] = field(default_factory=list)
    node_id: str = ""

    def line(self) -> str:
        gpus = f"{int(self.gpus)} GPU ({', '.join(self.gpu_models) or 'model unknown'})" \
            if self.gpus else "no GPU"
        return f"{self.node} ({self.ip}): {self.cpus:g} CPU, {gpus}"


def cluster_nodes(ray: Any) -> list[NodeDevices]:
    out = []
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        res = n.get("Resources", {})
        out.append(NodeDevices(
            node=str(n.get("NodeManagerHostname", "?")), ip=str(n.get("NodeManagerAddress", "?")),
            cpus=float(res.get("CPU", 0)), gpus=float(res.get("GPU", 0)),
            gpu_models=sorted(k[len(ACCEL):] for k in res if k.startswith(ACCEL)),
            node_id=str(n.get("NodeID", ""))))
    return out


@dataclass(frozen=True)
class ActorPlan:
    count: int
    options: dict[str, Any]  # ray actor options (num_cpus, num_gpus, resources)
    why: str
    model: str = ""  # devices = "model:NAME": the GPU model every actor is pinned to, as Ray names it


def gpu_models(nodes: list[NodeDevices]) -> list[str]:
    """The distinct GPU models of the cluster's nodes, the model with the most GPUs first (then
    by name): the order app.cluster.per_model searches them in."""
    count: dict[str, float] = {}
    for n in nodes:
        for m in n.gpu_models if n.gpus else []:
            count[m] = count.get(m, 0.0) + n.gpus
    return sorted(count, key=lambda m: (-count[m], m))


def plan_actors(nodes: list[NodeDevices], backend: str, settings: ClusterSettings) -> ActorPlan:
    """How many actors and what each asks of Ray, for a goal on `backend`."""
    model = settings.model
    if backend == "cuda":
        key = _model_key(nodes, model) if model else ""
        chosen = [n for n in nodes if n.gpus and (not model or key in n.gpu_models)]
        gpus = int(sum(n.gpus for n in chosen))
        if not gpus:
            what = f"no GPU of model {model!r}" if model else "no GPU"
            raise ClusterUnavailable(f"the cluster has {what}: "
                                     + "; ".join(n.line() for n in nodes))
        models = {m for n in chosen for m in n.gpu_models}
        if not model and len(models) > 1:  # one search per model: measurements never mixed
            raise ClusterUnavailable(f"the cluster has GPUs of {len(models)} models "
                                     f"({', '.join(sorted(models))}); pick one with devices = "
                                     "\"model:NAME\" and run the goal once per model (`kernelswarm "
                                     "run` does that by itself: one search per model)")
        options: dict[str, Any] = {"num_gpus": 1, "num_cpus": 1}
        if key:  # every actor on a GPU of that model
            options["resources"] = {f"{ACCEL}{key}": 0.001}
        count = settings.actors or gpus
        return ActorPlan(count, options, f"{count} GPU actors" + (f" ({key})" if key else ""),
                         model=key)
    if model:
        raise ClusterUnavailable(f"devices = \"model:{model}\" picks GPUs; a {backend} goal runs "
                                 "on CPUs (use devices = \"each\")")
    if backend == "replay":  # lookups and sleeps: they need no core of their own
        count = settings.actors or max(1, int(sum(n.cpus for n in nodes)))
        return ActorPlan(count, {"num_cpus": 0}, f"{count} replay actors")
    # compiled CPU kernels: one per node by default, so timings do not share cores
    count = settings.actors or max(1, len(nodes))
    return ActorPlan(count, {"num_cpus": 1}, f"{count} CPU actors")


def _model_key(nodes: list[NodeDevices], model: str) -> str:
    """The cluster's name for `model`: the one equal to it (any case), else the one containing
    it; "" when none does. A name contained in several models is refused: their GPUs would be
    counted together while the actors land on one of them."""
    names = {m for n in nodes if n.gpus for m in n.gpu_models}
    exact = [m for m in names if m.lower() == model.lower()]
    if exact:
        return exact[0]
    near = sorted(m for m in names if model.lower() in m.lower())
    if len(near) > 1:
        raise ClusterUnavailable(f"devices = \"model:{model}\" matches {len(near)} GPU models "
                                 f"({', '.join(near)}); name one of them exactly")
    return near[0] if near else ""
