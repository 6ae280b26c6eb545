"""What the CLI's commands share: the one-line error, exit codes, figure formatting, the store,
and the lines a run's summary (app.run_summary) is printed as, by `run` and `show` alike."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from app.core.units import format_value

EXIT_ERROR = 1
# A run that finished without one correct candidate: scripts must not read it as a success.
EXIT_NOTHING_SUCCEEDED = 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a command ended by Ctrl-C


class CliError(Exception):
    """A problem to report in one line."""


def _fmt(v: float | None, unit: str = "") -> str:
    if v is None:
        return "-"
    return format_value(v, unit)


def _open_store(path: str | None):
    from app.paths import default_db_path
    from app.store import Store

    return Store(Path(path) if path else default_db_path())


def _learned_from(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The earlier runs a stored run started from (its device record says; app.swarm.transfer)."""
    device = run.get("device")
    return list(device.get("learned_from") or []) if isinstance(device, dict) else []


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "-"


def summary_lines(summary: Any, failures_heading: bool = True) -> list[str]:
    """A run's summary (app.run_summary.RunSummary) as `run` ends with it and `show` prints it:
    the speedup with its basis, the best's share of the hardware, failures by kind."""
    lines = []
    if summary.speedup:
        c_loop = summary.comparison.get("speedup_vs_c_reference")
        lines.append(f"  speedup {summary.speedup_text()}"
                     + (f"; {c_loop:.2f}× over the plain C loop" if c_loop else ""))
    lines += [f"  note: {note}" for note in summary.notes]
    if summary.hardware_text():
        lines.append(f"  hardware: {summary.hardware_text()}")
    if summary.failures:
        if failures_heading:
            lines.append(f"failures ({summary.failed} of {summary.evaluations}):")
        lines += [f"  {line}" for line in summary.failure_lines()]
    return lines
