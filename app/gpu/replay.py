"""Replay backend: recorded tuning spaces (Kernel Tuner cache files) measured on real GPUs.

A configuration's recorded time is its measurement. Kernel Tuner's failure markers become
failed evaluations; configurations absent from the file were excluded by the space's
restrictions and are never evaluations. Optionally the recorded compile, verification and
benchmark times are charged to a simulated clock so the time axis looks like a real run.
"""

from __future__ import annotations

import gzip
import json
import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.core.evaluator import DeviceInfo, Evaluator
from app.core.space import SearchSpace
from app.core.types import (
    COMPILE_FAILED,
    INVALID,
    RUNTIME_FAILED,
    Candidate,
    Evaluation,
    Stage,
)

FAILURE_MARKERS = {
    "CompilationFailedConfig": COMPILE_FAILED,
    "RuntimeFailedConfig": RUNTIME_FAILED,
    "InvalidConfig": INVALID,
}


class CacheFileError(ValueError):
    """A Kernel Tuner cache file is missing, unreadable or not in the expected format."""


@dataclass
class RecordedSpace:
    path: Path
    kernel_name: str
    device_name: str
    problem_size: Any
    objective: str
    params: dict[str, list[Any]]
    records: dict[tuple, dict[str, Any]]  # value tuple -> cache record

    @property
    def n_configs(self) -> int:
        return len(self.records)

    def valid_times(self) -> list[float]:
        return [r["time"] for r in self.records.values() if _is_number(r.get("time"))]

    def space(self, restrictions: list[str] | None = None) -> SearchSpace:
        return SearchSpace(dict(self.params), restrictions=list(restrictions or []),
                           allowed=frozenset(self.records))


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v) and v < 1e30


_CACHE: dict[tuple[str, float], RecordedSpace] = {}


def load_cache_file(path: str | Path) -> RecordedSpace:
    """Load a .json or .json.gz Kernel Tuner cache file (also the unterminated form Kernel Tuner
    writes while a run is in progress)."""
    path = Path(path)
    try:
        stamp = path.stat().st_mtime
    except FileNotFoundError:
        raise CacheFileError(f"cache file {str(path)!r} does not exist") from None
    cached = _CACHE.get((str(path), stamp))
    if cached is not None:
        return cached
    try:
        raw = path.read_bytes()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        text = raw.decode("utf-8")
    except (OSError, EOFError, zlib.error, gzip.BadGzipFile, UnicodeDecodeError) as exc:
        raise CacheFileError(f"cache file {str(path)!r} is corrupt or unreadable: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        try:  # Kernel Tuner leaves the file open-ended while tuning
            data = json.loads(text.rstrip().rstrip(",") + "}}")
        except json.JSONDecodeError as exc:
            raise CacheFileError(f"cache file {str(path)!r} is not valid JSON: {exc}") from None
    if not isinstance(data, dict) or "cache" not in data or "tune_params" not in data:
        raise CacheFileError(f"cache file {str(path)!r} is not a Kernel Tuner cache "
                             "(needs 'tune_params' and 'cache')")
    tune_params = data["tune_params"]
    keys = data.get("tune_params_keys") or list(tune_params)
    if not isinstance(tune_params, dict) or not keys or any(k not in tune_params for k in keys):
        raise CacheFileError(f"cache file {str(path)!r}: 'tune_params_keys' and 'tune_params' disagree")
    params = {k: list(tune_params[k]) for k in keys}
    records: dict[tuple, dict[str, Any]] = {}
    for ckey, rec in data["cache"].items():
        if not isinstance(rec, dict) or "time" not in rec:
            raise CacheFileError(f"cache file {str(path)!r}: entry {ckey!r} has no 'time'")
        try:
            values = tuple(rec[k] for k in keys)
        except KeyError as exc:
            raise CacheFileError(f"cache file {str(path)!r}: entry {ckey!r} lacks parameter {exc}") from None
        records[values] = rec
    if not records:
        raise CacheFileError(f"cache file {str(path)!r} holds no configurations")
    space = RecordedSpace(
        path=path, kernel_name=str(data.get("kernel_name", path.stem)),
        device_name=str(data.get("device_name", "unknown GPU")),
        problem_size=data.get("problem_size"), objective=str(data.get("objective") or "time"),
        params=params, records=records,
    )
    _CACHE.clear()  # keep one file in memory at a time per process; they are large
    _CACHE[(str(path), stamp)] = space
    return space


class ReplayEvaluator(Evaluator):
    """Evaluates configurations by looking up their recorded measurements."""

    def __init__(self, recorded: RecordedSpace, restrictions: list[str] | None = None,
                 simulate_time: bool = True, max_parallel: int = 64) -> None:
        self.recorded = recorded
        self.space = recorded.space(restrictions)
        self.simulate_time = simulate_time
        self.max_parallel = max_parallel

    def evaluate(self, candidate: Candidate) -> Evaluation:
        values = self.space.as_tuple(candidate.config)
        rec = self.recorded.records.get(values)
        base = {"key": candidate.key, "config": dict(candidate.config), "agent": candidate.agent,
                "parent_key": candidate.parent_key}
        if rec is None:
            # Restricted configurations are filtered by the space before they get here; one that
            # slips through (a foreign config) is refused, not measured.
            return Evaluation(ok=False, reason=INVALID, detail="not in the recorded space", **base)
        compile_s = _ms(rec.get("compile_time")) / 1000.0
        verify_s = _ms(rec.get("verification_time")) / 1000.0
        bench_s = _ms(rec.get("benchmark_time")) / 1000.0
        sim = (compile_s + verify_s + bench_s) if self.simulate_time else 0.0
        t = rec.get("time")
        if isinstance(t, str) or not _is_number(t):
            reason = FAILURE_MARKERS.get(t, RUNTIME_FAILED) if isinstance(t, str) else RUNTIME_FAILED
            stage = {COMPILE_FAILED: "compile", INVALID: "static_check"}.get(reason, "run")
            return Evaluation(ok=False, reason=reason, detail=f"recorded as {t}",
                              stages=[Stage(stage, False, compile_s)], sim_seconds=sim, **base)
        samples = [float(x) for x in rec.get("times", []) if _is_number(x)]
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
            if k not in self.space.params and k not in ("time", "times", "timestamp") and _is_number(v):
                evaluation.metrics[k] = float(v)
        return evaluation

    def device(self) -> DeviceInfo:
        return DeviceInfo(kind="replay", name=f"replay: {self.recorded.device_name}",
                          details={"kernel": self.recorded.kernel_name,
                                   "configs": self.recorded.n_configs})


def _ms(v: Any) -> float:
    return float(v) if _is_number(v) else 0.0


def make_replay_evaluator(goal: Any) -> ReplayEvaluator:
    """The replay evaluator for a goal: its recorded space, restrictions and clock."""
    recorded = load_cache_file(goal.resolve_space_path())
    return ReplayEvaluator(recorded, restrictions=goal.constraints.restrictions,
                           simulate_time=goal.simulate_time)


def probe_recorded_spaces() -> tuple[bool, str]:
    """Whether any recorded space can be found here, and which (for `kernelswarm devices`)."""
    from app.paths import space_search_dirs

    spaces = sorted({p.name for d in space_search_dirs() if d.is_dir()
                     for p in d.iterdir() if p.name.endswith((".json", ".json.gz"))})
    if not spaces:
        return False, "no recorded spaces found (set KERNELSWARM_SPACES)"
    return True, f"{len(spaces)} recorded spaces: {', '.join(spaces)}"
