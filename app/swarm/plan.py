"""The run plan: everything the coordinator needs for one run, as one typed, frozen object.

The session builds it once from the goal (app.session.run_plan); tests and benchmarks build
it directly with defaults, e.g. `RunPlan(agents=["local"], max_evals=20, seed=3)`. The
coordinator never sees the goal itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.core.types import Evaluation
from app.goal.ranges import default

if TYPE_CHECKING:  # types only: the coordinator imports both at run time
    from app.swarm.agents.base import Agent
    from app.swarm.transfer import TransferEvidence

DEFAULT_MAX_EVALS = default("stop.max_evals")  # the goal's own default, one figure


@dataclass(frozen=True)
class RunPlan:
    # who searches, and in which direction
    agents: Sequence[str | Agent] = ()
    minimize: bool = True
    seed: int = 0
    workers: int = 1  # at most the evaluator's max_parallel
    # the stop rules: evaluations, wall-clock seconds (0: none), evaluations without
    # improvement (0: off); a target value stops the run too
    max_evals: int = DEFAULT_MAX_EVALS
    time_budget_s: float = 0.0
    plateau_patience: int = 0
    target_value: float | None = None
    # figures the run is compared with, in the objective's unit
    baseline_value: float | None = None
    baseline_name: str = ""
    limit_value: float | None = None
    # the run's identity, as RunStarted and every event carry it
    goal_name: str = ""
    backend: str = ""
    unit: str = ""
    run_id: int | None = None
    # evidence: an interrupted run's evaluations, and earlier runs of this kernel elsewhere
    prior: Sequence[Evaluation] = ()
    prior_elapsed_s: float = 0.0
    transfer: TransferEvidence | None = None
    # the adversary's share of the run's time (None: its default)
    adversary_share: float | None = None
    # replay: the clock advances by recorded seconds, not the wall clock
    simulated_clock: bool = False

    def __post_init__(self) -> None:
        # lists given by callers become tuples: the plan cannot change under a running swarm
        object.__setattr__(self, "agents", tuple(self.agents))
        object.__setattr__(self, "prior", tuple(self.prior))
