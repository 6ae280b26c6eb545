"""The goal's [cluster] table: where the cluster is and which of its devices to use.

Checked without Ray (by app.goal, and by app.cluster when it connects), so a goal file with a
bad table is refused the same everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.core.errors import GoalError

FALLBACKS = ("wait", "local")  # the cluster disappears: wait for it, or go on here
KNOWN = ("address", "devices", "actors", "fallback", "connect_timeout_s")


@dataclass(frozen=True)
class ClusterSettings:
    address: str  # "auto", "host:port" (the head's GCS port) or "ray://host:10001" (Ray client)
    # "each": every device (a cuda goal on GPUs of several models: one run per model, by
    # app.cluster.per_model); "model:NAME": only GPUs of that model (equal, else containing NAME)
    devices: str = "each"
    actors: int = 0  # 0: one per device (GPU goals), per node (CPU goals), per CPU (replay)
    fallback: str = "wait"
    connect_timeout_s: float = 10.0

    @property
    def model(self) -> str:
        return self.devices.split(":", 1)[1].strip() if self.devices.startswith("model:") else ""


def check_cluster_table(table: Any) -> ClusterSettings:
    """The table (the goal's ClusterTable, or a dict) as settings; GoalError naming the field
    that is wrong."""
    if not isinstance(table, Mapping):
        raise GoalError("cluster", "must be a table, e.g. [cluster] address = \"auto\"")
    for k in table:
        if k not in KNOWN:
            raise GoalError(f"cluster.{k}", f"unknown field; known: {', '.join(KNOWN)}")
    address = table.get("address", "")
    if not isinstance(address, str) or not address.strip():
        raise GoalError("cluster.address", "give the Ray cluster's address: \"auto\", "
                        "\"host:port\" or \"ray://host:10001\"")
    devices = table.get("devices", "each")
    if not isinstance(devices, str) or not (
            devices == "each" or (devices.startswith("model:") and devices[6:].strip())):
        raise GoalError("cluster.devices", "must be \"each\" or \"model:NAME\" (e.g. \"model:A100\")")
    actors = table.get("actors", 0)
    if isinstance(actors, bool) or not isinstance(actors, int) or not 0 <= actors <= 1024:
        raise GoalError("cluster.actors", "must be an integer between 0 (automatic) and 1024")
    fallback = table.get("fallback", "wait")
    if fallback not in FALLBACKS:
        raise GoalError("cluster.fallback", f"must be one of {', '.join(FALLBACKS)}")
    timeout = table.get("connect_timeout_s", 10.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise GoalError("cluster.connect_timeout_s", "must be a number of seconds > 0")
    return ClusterSettings(address=address.strip(), devices=devices, actors=actors,
                           fallback=fallback, connect_timeout_s=float(timeout))
