"""Human labels with units for an evaluation's metrics and resources in the Summary tab
(never a raw key such as `load_after`, `noisy 1` or `gbs`)."""

from __future__ import annotations


def _yes(v) -> str:
    return "yes" if v else "no"


def _num(unit: str = "", digits: str = ".4g"):
    return lambda v: f"{v:{digits}}{' ' + unit if unit else ''}" if isinstance(v, (int, float)) else str(v)


def _spread(v) -> str:
    return f"{100 * v:.3g} % of median" if isinstance(v, (int, float)) else str(v)


METRICS = {
    "gbs": ("memory throughput", _num("GB/s")),
    "gflops": ("compute throughput", _num("GFLOP/s")),
    "tflops": ("compute throughput", _num("TFLOP/s")),
    "throughput": ("throughput", _num()),
    "spread": ("p10–p90 spread", _spread),
    "samples": ("timing samples", lambda v: f"{int(v)}"),
    "noisy": ("machine busy while timed", _yes),
    "load_before": ("load average before timing", _num(digits=".2f")),
    "load_after": ("load average after timing", _num(digits=".2f")),
    "cpu_count": ("CPU cores", lambda v: f"{int(v)}"),
    "cores_busy": ("cores busy with other work", _num(digits=".2g")),
    "threads": ("threads used", lambda v: f"{int(v)}"),
    "speedup": ("speedup", lambda v: f"{v:.2f}×"),
    "baseline_ms": ("baseline time", _num("ms")),
    "anchor_ms": ("anchor time", _num("ms")),
    "timed_by_cell_clock": ("timed by the sandbox's clock", _yes),
    "throttled_discarded": ("samples discarded (clock throttled)", lambda v: f"{int(v)}"),
    "copy_gbs": ("measured copy bandwidth", _num("GB/s")),
    "bandwidth_gbs": ("bandwidth", _num("GB/s")),
    "gpu_util_pct": ("GPU utilisation", _num("%", ".3g")),
    "mem_util_pct": ("memory utilisation", _num("%", ".3g")),
}
RESOURCES = {
    "registers": "registers per thread",
    "shared_memory": "shared memory per block",
    "threads": "threads",
}


def metric_row(key: str, value) -> tuple[str, str]:
    """(label, value with its unit) for one metric; an unknown key reads as words."""
    if key in METRICS:
        label, fmt = METRICS[key]
        try:
            return label, fmt(value)
        except (TypeError, ValueError):
            return label, str(value)
    words = key.replace("_", " ")
    if key.endswith("_ms"):
        return f"{words[:-3]} time", _num("ms")(value)
    if key.endswith("_pct"):
        return words[:-4], _num("%", ".3g")(value)
    return words, f"{value:.4g}" if isinstance(value, float) else str(value)


def resource_row(key: str, value) -> tuple[str, str]:
    return RESOURCES.get(key, key.replace("_", " ")), str(value)
