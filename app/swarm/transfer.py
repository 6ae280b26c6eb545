"""Transfer: a search starts from what earlier runs of the same kernel found, on other devices
and on this one (a later run of a goal here warm-starts from the earlier ones).

Absolute times do not carry over between devices, ranks mostly do: each source run's correct
evaluations become percentiles (0 = its best), a configuration's score is its mean percentile
over the sources that measured it, and the configurations valid in this space are ranked by
it. The coordinator evaluates the head of that ranking first (seeding the elite pool) and then
lets a transfer agent compete for budget like any other, so a device where the old ranking is
wrong stops being misled after a few evaluations; the other agents keep exploring throughout.

Beyond the head the transfer agent does not follow the ranking blindly: the evidence also
carries each configuration's value relative to its source's best (`prior`, in log units), and
the agent learns from every result here how this device departs from it, region by region
(app.swarm.agents.transfer).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.core.space import SearchSpace
from app.core.types import Evaluation
from app.swarm.agents.moves import distance

Config = dict[str, Any]

MAX_SOURCES = 5  # the newest runs of the kernel elsewhere; older ones add little
TOP_FRACTION = 0.05  # how deep into the transferred ranking the transfer agent goes
MIN_RANKED = 20
HEAD = 5  # the first proposals come from this many distinct regions of the ranking
HEAD_DISTANCE = 1.0  # normalised index distance (one parameter end to end, or several partly)
# The transfer agent's candidates beyond the head: the best quarter of what the sources
# measured (by prior), at least MIN_RANKED, at most MAX_CANDIDATES.
CANDIDATE_FRACTION = 0.25
MAX_CANDIDATES = 2000


@dataclass
class SourceRun:
    """One earlier run (on this device or another): who it was, and what it measured."""

    run_id: int | None
    device: str
    evaluations: list[Evaluation] = field(default_factory=list)
    minimize: bool = True


@dataclass
class TransferEvidence:
    sources: list[dict[str, Any]]  # run_id, device, evaluations used: what the run learned from
    ranked: list[Config]  # configurations valid here, most promising first
    # key (this space's) -> mean percentile elsewhere, for every configuration the sources
    # measured: what the transfer agent checks the new device's results against
    scores: dict[str, float] = field(default_factory=dict)
    # key -> how far from its source's best the configuration was, mean over the sources, in
    # log units (0: the best; log 2: twice as slow, or half the throughput); for the sources'
    # best CANDIDATE_FRACTION, whose configurations are in `candidates`
    prior: dict[str, float] = field(default_factory=dict)
    candidates: dict[str, Config] = field(default_factory=dict)

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


def log_gaps(evaluations: Sequence[Evaluation], minimize: bool) -> dict[str, float]:
    """Key -> log(value / best) among the run's correct evaluations (log(best / value) when
    maximizing): 0 for its best, log 2 for twice as slow. Empty when a value is not positive
    (the ratio means nothing then)."""
    ok = [e for e in evaluations if e.ok and e.value is not None]
    if not ok or any(e.value <= 0 for e in ok):
        return {}
    best = min(e.value for e in ok) if minimize else max(e.value for e in ok)
    out: dict[str, float] = {}
    for e in ok:
        gap = math.log(e.value / best) if minimize else math.log(best / e.value)
        out[e.key] = min(out.get(e.key, gap), gap)
    return out


def rank_transfer(space: SearchSpace, sources: Sequence[SourceRun]) -> TransferEvidence:
    """The configurations of `sources` that are valid in `space` (same parameter names and
    values allowed here), measured on the template, best mean percentile first. Kernels with a
    source of their own come back through the LLM warm start (app.llm.warm), with that source."""
    names = set(space.params)
    scores: dict[str, list[float]] = {}
    gaps: dict[str, list[float]] = {}
    configs: dict[str, Config] = {}
    used = []
    for src in sources:
        # only the template's own measurements: a configuration is replayed here on the
        # template, so one measured with another source (an LLM kernel's) says nothing of it
        fitting = [e for e in src.evaluations if set(e.config) == names and e.source is None]
        if not fitting:
            continue
        used.append({"run_id": src.run_id, "device": src.device, "evaluations": len(fitting)})
        gap = log_gaps(fitting, src.minimize)
        for source_key, (p, config) in percentiles(fitting, src.minimize).items():
            if not space.is_valid(config):
                continue
            key = space.key(config)  # this space's key: sources may key configs differently
            scores.setdefault(key, []).append(p)
            if source_key in gap:
                gaps.setdefault(key, []).append(gap[source_key])
            configs.setdefault(key, dict(config))
    mean = {k: sum(v) / len(v) for k, v in scores.items()}
    order = sorted(mean, key=lambda k: (mean[k], k))
    depth = max(MIN_RANKED, int(TOP_FRACTION * len(order)))
    ranked = diverse_head(space, [configs[k] for k in order[:depth]], HEAD)
    prior = {k: sum(v) / len(v) for k, v in gaps.items()}
    wide = sorted(prior, key=lambda k: (prior[k], k))
    wide = wide[:min(MAX_CANDIDATES, max(MIN_RANKED, int(CANDIDATE_FRACTION * len(wide))))]
    return TransferEvidence(sources=used, ranked=ranked, scores=mean,
                            prior={k: prior[k] for k in wide},
                            candidates={k: configs[k] for k in wide})


def diverse_head(space: SearchSpace, ranked: list[Config], k: int) -> list[Config]:
    """The ranking with its first `k` entries drawn from distinct regions: the best, then
    each time the best-ranked configuration at least HEAD_DISTANCE from those already chosen.
    The best stays first; if the ranking is wrong on this device, the seeds still cover
    several good regions of the old one instead of one."""
    head: list[Config] = []
    for config in ranked:
        if len(head) >= k:
            break
        if all(distance(space, config, h) >= HEAD_DISTANCE for h in head):
            head.append(config)
    return head + [c for c in ranked if c not in head]


def rank_correlation(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Spearman's rank correlation (ties broken by position; 0 for fewer than 3 pairs)."""
    n = len(xs)
    if n < 3 or n != len(ys):
        return 0.0
    rx = np.empty(n)
    ry = np.empty(n)
    rx[np.argsort(np.asarray(xs), kind="stable")] = np.arange(n)
    ry[np.argsort(np.asarray(ys), kind="stable")] = np.arange(n)
    rx -= rx.mean()
    ry -= ry.mean()
    denom = float(np.sqrt((rx * rx).sum() * (ry * ry).sum()))
    return float((rx * ry).sum() / denom) if denom else 0.0


def evidence_from_store(store: Any, *, goal: Any, kernel: str, device_name: str,
                        space: SearchSpace, minimize: bool) -> TransferEvidence | None:
    """What the history holds about this kernel, here and on other devices (None: nothing
    usable). Earlier runs on this device count too: their ranking is re-measured here like any
    other (never their figures), so a repeated goal warm-starts from what it found before.
    `store` is an app.store.Store; the swarm only calls its query methods."""
    runs = [r for r in store.runs_elsewhere(goal, kernel, device_name, limit=MAX_SOURCES,
                                            include_device=True)
            if r["minimize"] == minimize]
    sources = [SourceRun(run_id=r["id"], device=str(r["device"].get("name", "")),
                         evaluations=[e for _, e, _ in store.load_evaluations(r["id"], own_only=True)],
                         minimize=minimize) for r in runs]
    evidence = rank_transfer(space, sources)
    return evidence if evidence else None
