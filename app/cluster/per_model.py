"""One search per GPU model from one command, for clusters of mixed GPUs.

A cuda goal with devices = "each" on a cluster whose GPUs are of several models is not one
search: a configuration timed on an A100 and on an H100 is two measurements, and one search
fed both would compare numbers that do not compare. `kernelswarm run` therefore makes one run
per model (`models_to_search`, then `goal_for_model`): the goal with devices = "model:NAME",
so each run's actors are pinned to GPUs of that model (app.cluster.devices.plan_actors), its
device in the history is named by the model (ClusterEvaluator.device) and its evaluations say
on which node and GPU model they ran (app.cluster.actor). Each run gets the goal's whole budget.

The runs go one after the other, not concurrently, although the store would allow it (one
locked connection per process; the recorder drops events of other runs):

- evidence: the transfer mechanism (app.swarm.transfer, `[swarm] transfer`) reads the other
  devices' runs once, when a run starts. One after the other, every model after the first
  starts from what the runs before it measured (their configurations ranked by percentile, the
  head evaluated first, then a transfer agent competing for budget); run concurrently they
  would all start at once and share nothing;
- the Ray connection is one per process, and the pool's outage handling (fallback "wait")
  rejoins by shutting it down and connecting again: two pools at once would tear down each
  other's connection and actors. Fallback "local" would time two runs on this machine's GPU at
  once, each disturbing the other's timings.

The price is wall-clock time: a model's GPUs are idle while another model's run goes on.
Nothing here imports Ray but through app.cluster.connect, and only for a cuda goal with a
[cluster] table and devices = "each".
"""

from __future__ import annotations

import copy

from app.cluster.connect import connect
from app.cluster.devices import cluster_nodes, gpu_models
from app.core.cluster_settings import check_cluster_table
from app.goal import Goal


def models_to_search(goal: Goal) -> list[str]:
    """The GPU models to run `goal` on one by one, most GPUs first; [] when the goal is one
    search as before (no cluster, not a cuda goal, devices = "model:NAME", a cluster with GPUs
    of one model or of none: the run's own planning says what it gets or why it cannot)."""
    if not goal.cluster or goal.backend != "cuda":
        return []
    settings = check_cluster_table(goal.cluster)
    if settings.model:
        return []
    ray = connect(settings.address, settings.connect_timeout_s)  # reused by the runs' pools
    models = gpu_models(cluster_nodes(ray))
    return models if len(models) > 1 else []


def goal_for_model(goal: Goal, model: str) -> Goal:
    """The goal of the run on `model`: a copy with its actors pinned to that model (stored with
    the run, so `kernelswarm run --resume` resumes that model's search on that model)."""
    one = copy.deepcopy(goal)
    one.cluster["devices"] = f"model:{model}"
    return one
