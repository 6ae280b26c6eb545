"""Connecting to a Ray cluster: the only module that imports Ray at the top of a call.

A bad or unreachable address must cost one clear line within seconds, never a traceback or
ray.init's minute-long retry loop: the head's port is tried with a plain socket first, and
ray.init itself runs under the same deadline.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Any

from app.core.evaluator import BackendUnavailable

_joined = ""  # the address this process joined (one cluster at a time, as Ray allows)


class ClusterUnavailable(BackendUnavailable):
    """The Ray cluster cannot be used (not installed, unreachable, refused); the message says
    which and what to do."""


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ClusterUnavailable("Ray is not installed here; install the cluster extra: "
                                 "pip install 'kernelswarm[cluster]'") from None
    return ray


def host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of "host:port" or "ray://host:port"; None for "auto"."""
    if address == "auto":
        return None
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ClusterUnavailable(f"cluster address {address!r} is not \"auto\", \"host:port\" "
                                 "or \"ray://host:port\"")
    return host.strip("[]"), int(port)


def check_reachable(address: str, timeout_s: float) -> None:
    where = host_port(address)
    if where is None:
        return
    try:
        socket.create_connection(where, timeout=timeout_s).close()
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise ClusterUnavailable(f"no Ray cluster at {address} ({why}); start one with "
                                 "`ray start --head` or check the address") from None


def connect(address: str, timeout_s: float = 10.0) -> Any:
    """The ray module, connected to the cluster at `address` (reused when already connected)."""
    global _joined
    ray = import_ray()
    if ray.is_initialized() and _joined == address:
        return ray
    if ray.is_initialized():  # another cluster than the one this goal names
        ray.shutdown()
    if address.startswith("ray://") and not _has_ray_client():
        raise ClusterUnavailable(f"{address} is a Ray client address, and Ray client needs "
                                 "grpcio: pip install 'kernelswarm[cluster]' (or give the "
                                 "head's GCS address, host:6379)")
    check_reachable(address, timeout_s)
    # Ray ends a driver whose cluster head stays gone for a minute; this process is the run
    # itself, so it must outlive the cluster and go on locally or wait (app.cluster.pool)
    os.environ.setdefault("RAY_gcs_rpc_server_reconnect_timeout_s", str(7 * 24 * 3600))
    outcome: dict[str, Any] = {}

    def init() -> None:
        try:
            ray.init(address=address, log_to_driver=False, logging_level=logging.ERROR,
                     configure_logging=True, ignore_reinit_error=True)
            outcome["ok"] = True
        except Exception as exc:  # noqa: BLE001 - reported in one line below
            outcome["error"] = exc

    thread = threading.Thread(target=init, name="ray-connect", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if "ok" in outcome:
        _joined = address
        return ray
    if "error" in outcome:
        first = str(outcome["error"]).strip().splitlines()[0] if str(outcome["error"]).strip() \
            else type(outcome["error"]).__name__
        if "Initialization failure from server" in first:  # Ray client: the head's side failed
            first = ("the head's Ray client server did not start a server for this connection "
                     "(\"Initialization failure from server\"); try again (README \"Cluster "
                     "(Ray)\" says how to start the head)")
        raise ClusterUnavailable(f"cannot join the Ray cluster at {address}: {first}")
    raise ClusterUnavailable(f"the Ray cluster at {address} did not answer within {timeout_s:g} s")


def _has_ray_client() -> bool:
    import importlib.util

    return importlib.util.find_spec("grpc") is not None


def disconnect() -> None:
    """Leave the cluster (only when this process joined one; Ray stays unimported otherwise)."""
    import sys

    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
