"""The replay backend's engine side: ReplayEvaluator turns a configuration's recorded
measurement (app.gpu.replay.worker) into an Evaluation. Optionally the recorded compile,
verification and benchmark times are charged to a simulated clock so the time axis looks like a
real run.
"""

from __future__ import annotations

from typing import Any

from app.core.errors import GoalError
from app.core.evaluator import DeviceInfo, Evaluator
from app.core.types import (
    COMPILE_FAILED,
    INVALID,
    RUNTIME_FAILED,
    Candidate,
    Evaluation,
    Stage,
)
from app.gpu.replay.worker import FAILURE_MARKERS, RecordedSpace, is_number, load_cache_file


class ReplayEvaluator(Evaluator):
    """Evaluates configurations by looking up their recorded measurements."""

    answers_at_once = True

    def __init__(self, recorded: RecordedSpace, restrictions: list[str] | None = None,
                 simulate_time: bool = True, max_parallel: int = 64) -> None:
        self.recorded, self.space = recorded, recorded.space(restrictions)
        self.simulate_time, self.max_parallel = simulate_time, max_parallel

    def evaluate(self, candidate: Candidate) -> Evaluation:
        values = self.space.as_tuple(candidate.config)
        rec = self.recorded.records.get(values)
        base = {"key": candidate.key, "config": dict(candidate.config), "agent": candidate.agent,
                "parent_key": candidate.parent_key}
        if rec is None:
            # Restricted configurations are filtered by the space before they get here; one that
            # slips through (a foreign config) is refused, not measured.
            return Evaluation(ok=False, reason=INVALID, detail="not in the recorded space", **base)
        compile_s, verify_s, bench_s = (_ms(rec.get(k)) / 1000.0 for k in (
            "compile_time", "verification_time", "benchmark_time"))
        sim = (compile_s + verify_s + bench_s) if self.simulate_time else 0.0
        t = rec.get("time")
        if isinstance(t, str) or not is_number(t):
            reason = FAILURE_MARKERS.get(t, RUNTIME_FAILED) if isinstance(t, str) else RUNTIME_FAILED
            stage = {COMPILE_FAILED: "compile", INVALID: "static_check"}.get(reason, "run")
            return Evaluation(ok=False, reason=reason, detail=f"recorded as {t}",
                              stages=[Stage(stage, False, compile_s)], sim_seconds=sim, **base)
        samples = [float(x) for x in rec.get("times", []) if is_number(x)]
        evaluation = Evaluation(
            ok=True, value=float(t), time_ms=float(t), samples_ms=samples,
            stages=[Stage("compile", True, compile_s), Stage("verify", True, verify_s),
                    Stage("time", True, bench_s)],
            sim_seconds=sim, **base,
        )
        if samples:
            s = sorted(samples)
            evaluation.p10_ms = s[int(0.1 * (len(s) - 1))]
            evaluation.p90_ms = s[int(0.9 * (len(s) - 1))]
        for k, v in rec.items():
            if k not in self.space.params and k not in ("time", "times", "timestamp") and is_number(v):
                evaluation.metrics[k] = float(v)
        return evaluation

    def device(self) -> DeviceInfo:
        return DeviceInfo(kind="replay", name=f"replay: {self.recorded.device_name}",
                          details={"kernel": self.recorded.kernel_name,
                                   "configs": self.recorded.n_configs})


def _ms(v: Any) -> float:
    return float(v) if is_number(v) else 0.0


def make_replay_evaluator(goal: Any) -> ReplayEvaluator:
    """The replay evaluator for a goal: its recorded space, restrictions and clock."""
    recorded = load_cache_file(goal.resolve_space_path())
    return ReplayEvaluator(recorded, restrictions=goal.constraints.restrictions,
                           simulate_time=goal.simulate_time)


def check_replay_goal(goal: Any) -> None:
    if not goal.space:
        raise GoalError("space", "a replay goal needs a recorded space (Kernel Tuner cache file)")


def probe_recorded_spaces() -> tuple[bool, str]:
    """Whether any recorded space can be found here, and which (for `kernelswarm devices`)."""
    from app.paths import space_search_dirs

    spaces = sorted({p.name for d in space_search_dirs() if d.is_dir()
                     for p in d.iterdir() if p.name.endswith((".json", ".json.gz"))})
    if not spaces:
        return False, "no recorded spaces found (set KERNELSWARM_SPACES)"
    return True, f"{len(spaces)} recorded spaces: {', '.join(spaces)}"
