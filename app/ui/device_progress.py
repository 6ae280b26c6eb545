"""Which device each evaluation ran on, and how far each device has got.

Plain Python, no Qt: the candidate table's model feeds it and a view draws it. Evaluations
run by the Ray evaluator pool carry `resources["node"]`, `["device"]` and `["device_id"]`;
local runs carry none of them, and then there is nothing to show."""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.core.types import Evaluation

NO_DEVICE = "no device recorded"  # e.g. a cluster run resumed from a local one
WORKERS_DIED = "none: killed its workers"  # the pool's verdict on a kernel that kills nodes


def device_label(ev: Evaluation) -> str:
    """Where `ev` ran, short: the pool's device id ("host/gpu 0/NVIDIA A100") without the
    model name, which is the same on every device of a CUDA search and made the column three
    times wider ("host/gpu 0"; "local" for the fallback). '' when not recorded."""
    r = ev.resources
    ident, device = str(r.get("device_id") or ""), str(r.get("device") or "")
    if ident:
        return ident.removesuffix(f"/{device}") if device and ident != device else ident
    return "/".join(p for p in (str(r.get("node") or ""), device) if p)


def _natural(label: str) -> list:
    """Sort key that puts "gpu 2" before "gpu 10"."""
    return [int(p) if p.isdigit() else p.lower() for p in re.split(r"(\d+)", label)]


@dataclass
class DeviceTally:
    """One device's share of a run: evaluations done (correct or not), failed, its best."""

    label: str
    ident: str = ""  # the pool's full device id (with the model name), for a tooltip
    done: int = 0
    failed: int = 0
    best: float | None = None


class DeviceProgress:
    """Evaluations counted per device, in the order devices first appear."""

    def __init__(self, minimize: bool = True) -> None:
        self.minimize = minimize
        self._tallies: dict[str, DeviceTally] = {}

    def reset(self, minimize: bool = True) -> None:
        self.minimize = minimize
        self._tallies = {}

    def rebuild(self, evaluations) -> None:
        """Count again from scratch (an evaluation's outcome changed: a revoked best)."""
        self._tallies = {}
        for ev in evaluations:
            self.add(ev)

    def add(self, ev: Evaluation) -> None:
        label = device_label(ev) or (WORKERS_DIED if ev.resources.get("killed_workers")
                                     else NO_DEVICE)
        tally = self._tallies.get(label)
        if tally is None:
            tally = self._tallies[label] = DeviceTally(label, str(ev.resources.get("device_id")
                                                                  or label))
        tally.done += 1
        if not ev.ok or ev.value is None:
            tally.failed += 1
        elif tally.best is None or (ev.value < tally.best if self.minimize
                                    else ev.value > tally.best):
            tally.best = ev.value

    @property
    def devices(self) -> list[str]:
        """The devices evaluations ran on (empty for a local run)."""
        return [t for t in self._tallies if t not in (NO_DEVICE, WORKERS_DIED)]

    @property
    def several(self) -> bool:
        """Evaluations came from more than one device: worth a per-device summary."""
        return len(self.devices) > 1

    def tallies(self) -> list[DeviceTally]:
        """Devices first (by name), then evaluations without one."""
        named = sorted((t for t in self._tallies.values() if t.label in self.devices),
                       key=lambda t: _natural(t.label))
        return named + [t for t in self._tallies.values() if t.label not in self.devices]
