"""The candidate table's tooltips: how a figure was measured, and where a cluster
evaluation ran."""

from __future__ import annotations

from app.core.types import Evaluation


def device_note(ev: Evaluation) -> str:
    """Node, device and the pool's notes on a cluster evaluation (a requeue, dead workers)."""
    r = ev.resources
    lines = [f"{k}: {r[k]}" for k in ("node", "device", "device_id") if r.get(k)]
    if r.get("requeued_after"):
        lines.append(f"ran again after its first worker died: {r['requeued_after']}")
    if r.get("killed_workers"):
        lines.append("killed its workers: " + "; ".join(map(str, r["killed_workers"])))
    return "\n".join(lines)


def measurement_note(ev: Evaluation) -> str:
    """How a figure was measured: samples, spread, the machine's load, the roof it was held to."""
    m = ev.metrics
    lines = []
    if ev.time_ms is not None and ev.p10_ms is not None and ev.p90_ms is not None:
        lines.append(f"median {ev.time_ms:.4g} ms of {int(m.get('samples', 0))} samples, "
                     f"p10–p90 {ev.p10_ms:.4g}–{ev.p90_ms:.4g} ms")
    if "load_before" in m:
        lines.append(f"machine load {m['load_before']:.2g} → {m.get('load_after', 0):.2g} on "
                     f"{int(m.get('cpu_count', 0))} cores")
    if m.get("noisy"):
        lines.append("measured while the machine was busy or the spread was wide: "
                     "treat the figure with care")
    if "roof_gbs" in m:
        level = ev.resources.get("roof_level", "")
        lines.append(f"held to the {level} roof, {m['roof_gbs']:.4g} GB/s".replace("the  roof", "the roof"))
    return "\n".join(lines)
