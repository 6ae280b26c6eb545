"""`kernelswarm devices --cluster ADDRESS`: the cluster's nodes and their devices."""

from __future__ import annotations

from app.cluster.connect import connect, disconnect
from app.cluster.devices import cluster_nodes


def print_cluster_devices(address: str, timeout_s: float = 10.0) -> int:
    ray = connect(address, timeout_s)
    try:
        nodes = cluster_nodes(ray)
    finally:
        disconnect()
    cpus = sum(n.cpus for n in nodes)
    gpus = sum(n.gpus for n in nodes)
    print(f"cluster {address}: {len(nodes)} node{'s' * (len(nodes) != 1)}, {cpus:g} CPU, "
          f"{gpus:g} GPU")
    for n in nodes:
        print(f"  {n.line()}")
    return 0
