"""The units figures are shown in, decided in one place.

A run's objective unit follows from its metric and, for throughput, from whether the operator
is bound by memory traffic (GB/s) or by arithmetic (GFLOP/s). The session decides it once per
run, publishes it in RunStarted and stores it with the run; everything that shows a figure
(CLI, plot, table, exports, report) reads it from there rather than guessing from the metric.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

TIME = "ms"
ENERGY = "mJ"
COMPUTE_THROUGHPUT = "GFLOP/s"
MEMORY_THROUGHPUT = "GB/s"
GAIN = "×"

_BY_METRIC = {"time": TIME, "energy": ENERGY, "throughput": COMPUTE_THROUGHPUT}


def objective_unit(metric: str, memory_bound: bool = False) -> str:
    """The unit of a run's objective: ms, mJ, or GFLOP/s / GB/s for throughput."""
    if metric == "throughput" and memory_bound:
        return MEMORY_THROUGHPUT
    return _BY_METRIC.get(metric, "")


def run_unit(run: Mapping[str, Any] | None, metric: str) -> str:
    """The unit stored with a run (in its device record), or the metric's default for runs
    recorded before the unit was stored."""
    device = (run or {}).get("device")
    if isinstance(device, Mapping) and device.get("unit"):
        return str(device["unit"])
    return objective_unit(metric)


def format_value(value: float | None, unit: str = "") -> str:
    """A figure with 3-4 significant digits and its unit: 12.3456 GB/s -> '12.35 GB/s';
    large figures keep every integer digit (12,346 GB/s) rather than switching to exponents."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    text = f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return f"{text} {unit}".rstrip()


def gain(value: float | None, reference: float | None, minimize: bool) -> float | None:
    """How many times better `value` is than `reference` (a speedup for time): > 1 is better."""
    if not value or not reference:
        return None
    return reference / value if minimize else value / reference


def format_gain(factor: float | None) -> str:
    return "—" if factor is None else f"{factor:.2f}{GAIN}"


def fraction_of_limit(value: float | None, limit: float | None, minimize: bool) -> float | None:
    """How close `value` is to the hardware limit, as a fraction (1.0 = at the limit): for
    time the limit is a floor (limit / value), for throughput a roof (value / limit)."""
    if not value or not limit:
        return None
    return limit / value if minimize else value / limit


def format_percent(fraction: float | None) -> str:
    return "—" if fraction is None else f"{100 * fraction:.3g} %"


def occupancy_text(resources: dict[str, Any]) -> str:
    """'occupancy 50% (limited by registers), 32 active warps/SM': the CUDA backend's theoretical
    occupancy (app.gpu.cuda.occupancy) and what limits it, or '' when not recorded."""
    occ = resources.get("occupancy")
    if not isinstance(occ, (int, float)) or isinstance(occ, bool):
        return ""
    limit = resources.get("occupancy_limit")
    warps = resources.get("active_warps_per_sm")
    return (f"occupancy {100 * occ:.0f}%" + (f" (limited by {limit})" if limit else "")
            + (f", {warps} active warps/SM" if isinstance(warps, int) and not isinstance(warps, bool) else ""))
