"""Transfer across devices: a search on a new device starts from what runs of the same kernel
found on other devices.

Absolute times do not carry over between devices, ranks mostly do: each source run's correct
evaluations become percentiles (0 = its best), a configuration's score is its mean percentile
over the sources that measured it, and the configurations valid in this space are ranked by
it. The coordinator evaluates the head of that ranking first (seeding the elite pool) and then
lets a transfer agent compete for budget like any other, so a device where the old ranking is
wrong stops being misled after a few evaluations; the other agents keep exploring throughout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from app.core.space import SearchSpace
from app.core.types import Evaluation

Config = dict[str, Any]

MAX_SOURCES = 5  # the newest runs of the kernel elsewhere; older ones add little
TOP_FRACTION = 0.05  # how deep into the transferred ranking the transfer agent goes
MIN_RANKED = 20


@dataclass
class SourceRun:
    """One earlier run on another device: who it was, and what it measured."""

    run_id: int | None
    device: str
    evaluations: list[Evaluation] = field(default_factory=list)
    minimize: bool = True


@dataclass
class TransferEvidence:
    sources: list[dict[str, Any]]  # run_id, device, evaluations used: what the run learned from
    ranked: list[Config]  # configurations valid here, most promising first

    def __bool__(self) -> bool:
        return bool(self.ranked)


def percentiles(evaluations: Sequence[Evaluation], minimize: bool) -> dict[str, tuple[float, Config]]:
    """Key -> (percentile of its value among the run's correct evaluations, config)."""
    ok = [e for e in evaluations if e.ok and e.value is not None]
    ok.sort(key=lambda e: e.value if minimize else -e.value)
    n = len(ok)
    out: dict[str, tuple[float, Config]] = {}
    for i, e in enumerate(ok):
        out.setdefault(e.key, (i / max(1, n - 1), e.config))
    return out


def rank_transfer(space: SearchSpace, sources: Sequence[SourceRun]) -> TransferEvidence:
    """The configurations of `sources` that are valid in `space` (same parameter names and
    values allowed here), best mean percentile first."""
    names = set(space.params)
    scores: dict[str, list[float]] = {}
    configs: dict[str, Config] = {}
    used = []
    for src in sources:
        fitting = [e for e in src.evaluations if set(e.config) == names]
        if not fitting:
            continue
        used.append({"run_id": src.run_id, "device": src.device, "evaluations": len(fitting)})
        for p, config in percentiles(fitting, src.minimize).values():
            if not space.is_valid(config):
                continue
            key = space.key(config)  # this space's key: sources may key configs differently
            scores.setdefault(key, []).append(p)
            configs.setdefault(key, dict(config))
    order = sorted(scores, key=lambda k: (sum(scores[k]) / len(scores[k]), k))
    depth = max(MIN_RANKED, int(TOP_FRACTION * len(order)))
    return TransferEvidence(sources=used, ranked=[configs[k] for k in order[:depth]])


def evidence_from_store(store: Any, *, goal: Any, kernel: str, device_name: str,
                        space: SearchSpace, minimize: bool) -> TransferEvidence | None:
    """What the history holds about this kernel on other devices (None: nothing usable).
    `store` is an app.store.Store; the swarm only calls its query methods."""
    runs = [r for r in store.runs_elsewhere(goal, kernel, device_name, limit=MAX_SOURCES)
            if r["minimize"] == minimize]
    sources = [SourceRun(run_id=r["id"], device=str(r["device"].get("name", "")),
                         evaluations=[e for _, e, _ in store.load_evaluations(r["id"], own_only=True)],
                         minimize=minimize) for r in runs]
    evidence = rank_transfer(space, sources)
    return evidence if evidence else None
