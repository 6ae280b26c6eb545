"""The Goal: what to optimise, how to judge it, when to stop. TOML in and out, with validation
errors that name the field."""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib
import tomli_w

from app.core.cluster_settings import check_cluster_table
from app.core.errors import GoalError
from app.goal.ranges import FIELDS
from app.goal.tables import (
    DEFAULT_AGENTS,
    DIRECTIONS,
    OBJECTIVES,
    TARGET_KINDS,
    ClusterTable,
    Constraints,
    KernelTable,
    LLMTable,
    Objective,
    StopRules,
    SubTable,
    SwarmSettings,
    Target,
    Tolerance,
    in_file,
)

# GoalError is raised here (defined in app.core so every layer may raise it); the sub-tables
# and their names are read from here by the rest of the app
__all__ = ["DEFAULT_AGENTS", "DIRECTIONS", "DTYPES", "OBJECTIVES", "SECTIONS", "TARGET_KINDS",
           "ClusterTable", "Constraints",
           "Goal", "GoalError", "KernelTable", "LLMTable", "Objective", "StopRules", "SwarmSettings",
           "Target", "Tolerance"]

DTYPES = ("float32", "float16", "bfloat16", "float64", "int32")
# Every [table] of a goal file. [llm]'s values are judged by app.llm.settings (through the
# agent registry) against the user's own settings, [cluster]'s by app.core.cluster_settings.
SECTIONS: dict[str, type[SubTable]] = {
    t.TABLE: t for t in (Objective, Target, StopRules, Tolerance, Constraints, SwarmSettings,
                         KernelTable, LLMTable, ClusterTable)}


@dataclass
class Goal:
    name: str = "untitled goal"
    operator: str = ""  # catalog operator (cpu/cuda) ...
    space: str = ""  # ... or a recorded space: a Kernel Tuner cache file (replay)
    backend: str = "replay"  # a registered backend (app.gpu.registry)
    dtype: str = "float32"
    shapes: list[list[int]] = field(default_factory=list)
    device: int | None = None
    objective: Objective = field(default_factory=Objective)
    target: Target = field(default_factory=Target)
    stop: StopRules = field(default_factory=StopRules)
    tolerance: Tolerance = field(default_factory=Tolerance)
    constraints: Constraints = field(default_factory=Constraints)
    swarm: SwarmSettings = field(default_factory=SwarmSettings)
    simulate_time: bool = True  # replay: charge recorded compile/verify/benchmark times
    # LLM endpoint settings the goal overrides (app.llm.settings judges them; never the API key)
    llm: LLMTable = field(default_factory=LLMTable)
    kernel: KernelTable | None = None  # your own kernel (app.catalog.custom) instead of `operator`
    # [cluster]: run the evaluations on a Ray cluster (app.cluster); empty: here, no Ray at all
    cluster: ClusterTable = field(default_factory=ClusterTable)
    source_path: str = ""  # where the goal was loaded from (not saved)

    def __post_init__(self) -> None:
        if isinstance(self.llm, dict):  # a goal built in code may give these tables as dicts
            self.llm = LLMTable.from_table(self.llm)
        if isinstance(self.cluster, dict):
            self.cluster = ClusterTable.from_table(self.cluster)

    # ---- validation -------------------------------------------------------------------
    def validate(self) -> Goal:
        """Raise GoalError naming the first field that is wrong; return self when valid.

        Only the goal's own fields: whether its backend, operator, agents and LLM settings
        exist is judged where those registries live, once per run (app.session.check_goal)."""
        if not isinstance(self.name, str) or not self.name.strip():
            raise GoalError("name", "must be a non-empty string")
        if not isinstance(self.backend, str) or not self.backend:
            raise GoalError("backend", "must name a backend, e.g. \"replay\", \"cpu\" or \"cuda\"")
        for name in ("operator", "space"):
            if not isinstance(getattr(self, name), str):
                raise GoalError(name, "must be a string")
        if self.dtype not in DTYPES:
            raise GoalError("dtype", f"unknown dtype {self.dtype!r}; choose one of {', '.join(DTYPES)}")
        if not isinstance(self.shapes, list):
            raise GoalError("shapes", "must be a list of shapes, e.g. [[4096, 4096]]")
        for i, shape in enumerate(self.shapes):
            if not isinstance(shape, list) or not shape:
                raise GoalError(f"shapes[{i}]", "must be a non-empty list of positive integers")
            for d in shape:
                if isinstance(d, bool) or not isinstance(d, int) or d <= 0:
                    raise GoalError(f"shapes[{i}]", f"dimension {d!r} is not a positive integer")
                if d > 1 << 31:
                    raise GoalError(f"shapes[{i}]", f"dimension {d} is larger than 2^31")
        if self.device is not None:
            FIELDS["device"].check(self.device)
        for table in (self.objective, self.target, self.stop, self.tolerance,
                      self.constraints, self.swarm):
            table.check()
        if not isinstance(self.llm, Mapping):  # an LLMTable, or a dict set in code
            raise GoalError("llm", "must be a table of LLM endpoint settings")
        if self.cluster:  # a ClusterTable, or a dict set in code
            check_cluster_table(self.cluster)  # the table's values only; Ray is not imported
        return self

    # ---- TOML --------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("source_path", None)
        # what the goal sets, in the file's order
        data["llm"] = copy.deepcopy(dict(self.llm))
        data["cluster"] = copy.deepcopy(dict(self.cluster))
        if not data.get("cluster"):
            data.pop("cluster", None)  # a local goal's TOML stays as it was
        if data.get("kernel"):  # only what the user set: the table stays short
            data["kernel"] = {k: v for k, v in data["kernel"].items()
                              if v not in ("", [], {}) and not (k == "deterministic" and v)}
        return _drop_none(data)

    def to_toml(self) -> str:
        return tomli_w.dumps(self.to_dict())

    def save(self, path: str | Path) -> None:
        path = Path(path)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(self.to_toml(), encoding="utf-8")
        tmp.replace(path)  # atomic: a crash never leaves half a goal file

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "") -> Goal:
        """A goal from its TOML tables; `where` (the file) is named in structural errors."""
        if not isinstance(data, dict):
            raise GoalError("goal", "must be a table")
        top = {f.name for f in fields(cls)} - {"source_path"}
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            if key not in top:
                raise GoalError(key, f"unknown field{in_file(where)}; known fields: "
                                f"{', '.join(sorted(top))}")
            if key in SECTIONS:
                value = SECTIONS[key].from_table(value, where)
            kwargs[key] = value
        return cls(**kwargs)

    @classmethod
    def from_toml(cls, text: str, source_path: str = "") -> Goal:
        goal = cls.from_dict(_parse(text, source_path), source_path)
        goal.source_path = source_path
        return goal

    @classmethod
    def from_stored_toml(cls, text: str, source_path: str = "") -> Goal:
        """The goal a run stored. [llm] keys this version refuses in a goal file (a misspelt
        setting, an API key) are dropped, not refused: earlier versions judged [llm] only when
        the LLM agent ran, so such a run ran without it and the keys changed nothing it did,
        and the run must still open. A key found there is never loaded."""
        data = _parse(text, source_path)
        if isinstance(data.get("llm"), dict):
            data["llm"] = {k: v for k, v in data["llm"].items() if k in LLMTable.KEYS}
        goal = cls.from_dict(data, source_path)
        goal.source_path = source_path
        return goal

    @classmethod
    def load(cls, path: str | Path) -> Goal:
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise GoalError("file", f"goal file {str(path)!r} does not exist") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise GoalError("file", f"cannot read goal file {str(path)!r}: {exc}") from None
        return cls.from_toml(text, source_path=str(path.resolve()))

    def resolve_space_path(self) -> Path:
        """Find the goal's recorded space: absolute, beside the goal file, in the bundled
        resources/spaces, or in the directories named by KERNELSWARM_SPACES."""
        from app.paths import find_space

        return find_space(self.space, Path(self.source_path).parent if self.source_path else None)


def _parse(text: str, source_path: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        where = f" in {Path(source_path).name!r}" if source_path else ""
        raise GoalError("toml", f"malformed TOML{where}: {exc}") from None


def _drop_none(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _drop_none(v) for k, v in d.items() if v is not None}
    return d
