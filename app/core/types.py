"""Plain data passed between agents, coordinator, evaluators and the store."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# Failure reasons every backend uses (free text may follow in `Evaluation.detail`).
COMPILE_FAILED = "compile_failed"
RUNTIME_FAILED = "runtime_failed"
INVALID = "invalid_config"
VERIFY_FAILED = "verification_failed"
TIMEOUT = "timeout"
CRASH = "crash"
RESOURCE_LIMIT = "resource_limit"
STATIC_CHECK = "static_check"
OUT_OF_MEMORY = "out_of_memory"
SUSPECT = "suspect_measurement"  # measured beyond the hardware's roof, twice: never accepted


@dataclass
class Candidate:
    """What an agent proposes: a configuration of the goal's space, and for source-rewriting
    agents (LLM) the device source replacing the template's."""

    config: dict[str, Any]
    key: str
    agent: str = ""
    source: str | None = None
    parent_key: str | None = None
    note: str = ""


@dataclass
class Stage:
    """One step of the evaluation cascade (static check, compile, verify, time, ...)."""

    name: str
    ok: bool
    seconds: float
    detail: str = ""


@dataclass
class Evaluation:
    """The outcome of evaluating one candidate.

    `value` is the goal's objective (ms for time, GFLOP/s or GB/s for throughput, mJ for
    energy) and is None when the candidate failed. `sim_seconds` is what the evaluation costs
    on the run's clock: wall time for real backends, the recorded times for replay.
    """

    key: str
    config: dict[str, Any]
    ok: bool
    value: float | None = None
    reason: str | None = None
    detail: str = ""
    agent: str = ""
    source: str | None = None
    parent_key: str | None = None
    time_ms: float | None = None
    samples_ms: list[float] = field(default_factory=list)
    p10_ms: float | None = None
    p90_ms: float | None = None
    stages: list[Stage] = field(default_factory=list)
    resources: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)  # GFLOP/s, GB/s, % of limit, ...
    log: str = ""
    sim_seconds: float = 0.0
    # The input case that broke verification (shape, distribution, seed, ...): it joins the
    # goal's validation set in the store so later candidates are checked against it too.
    failing_case: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Evaluation:
        data = dict(data)
        data["stages"] = [Stage(**s) for s in data.get("stages", [])]
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass
class Lesson:
    """A structured observation the swarm learned ("this region fails to compile")."""

    kind: str  # e.g. "failure_region", "good_region", "parameter_effect"
    text: str
    evidence: dict[str, Any] = field(default_factory=dict)
    agent: str = ""
