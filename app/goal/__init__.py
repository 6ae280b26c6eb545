"""The Goal: what to optimise, how to judge it, when to stop. TOML in and out, with validation
errors that name the field."""

from __future__ import annotations

import sys
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
from app.goal.ranges import FIELDS, default

__all__ = ["GoalError"]  # raised here; defined in app.core so every layer may raise it

OBJECTIVES = ("time", "throughput", "energy")
DIRECTIONS = ("minimize", "maximize")
TARGET_KINDS = ("none", "speedup", "fraction_of_limit", "absolute")
DTYPES = ("float32", "float16", "bfloat16", "float64", "int32")
DEFAULT_AGENTS = ["explorer", "local", "evolution", "model"]


@dataclass
class Objective:
    metric: str = "time"
    direction: str = ""  # empty: derived from the metric (time/energy minimise, throughput maximise)

    @property
    def minimize(self) -> bool:
        if self.direction:
            return self.direction == "minimize"
        return self.metric != "throughput"


@dataclass
class Target:
    kind: str = "none"
    value: float = 0.0


@dataclass
class StopRules:
    max_evals: int = default("stop.max_evals")
    time_budget_s: float = default("stop.time_budget_s")  # 0: no wall-clock budget
    plateau_patience: int = default("stop.plateau_patience")  # evaluations without improvement; 0: off


@dataclass
class Tolerance:
    rtol: float | None = None  # None: the dtype's default
    atol: float | None = None


@dataclass
class Constraints:
    restrictions: list[str] = field(default_factory=list)
    max_registers: int | None = None
    max_shared_memory_bytes: int | None = None
    forbid: list[str] = field(default_factory=list)  # e.g. "precision_lowering", "atomics"


@dataclass
class SwarmSettings:
    agents: list[str] = field(default_factory=lambda: list(DEFAULT_AGENTS))
    workers: int = default("swarm.workers")
    seed: int = default("swarm.seed")
    transfer: bool = True  # start from earlier runs of the same kernel, here and elsewhere (app.swarm.transfer)


@dataclass
class KernelTable:
    """The [kernel] table of a custom-kernel goal (your own C or CUDA kernel), in Kernel Tuner's
    terms. Only the shape of the table is checked here; app.catalog.custom.spec checks the rest
    (expressions, files, arguments) once per run. Paths are relative to the goal file."""

    source: str | list[str] = ""  # kernel source file(s); the first holds the entry
    entry: str = ""  # the C function or CUDA kernel to call
    language: str = ""  # "c" | "cuda"; empty: the backend's language
    compiler_options: list[str] = field(default_factory=list)
    tune_params: dict[str, list] = field(default_factory=dict)  # injected as #defines
    restrictions: list[str] = field(default_factory=list)  # Kernel Tuner syntax
    defines: dict[str, Any] = field(default_factory=dict)  # fixed #defines (expressions of dims)
    dims: list[str] = field(default_factory=list)  # names of a goal shape's entries
    problem_size: list[str] = field(default_factory=list)  # CUDA: expressions of dims
    block_size_names: list[str] = field(default_factory=list)  # CUDA: block_size_x/y/z
    grid_div_x: list[str] = field(default_factory=list)
    grid_div_y: list[str] = field(default_factory=list)
    grid_div_z: list[str] = field(default_factory=list)
    args: list[dict[str, Any]] = field(default_factory=list)  # [[kernel.args]] in call order
    reference: str = ""  # "module.py:function" (numpy in, arrays out)
    expected: str = ""  # .npz of expected outputs (by argument name)
    reference_source: str = ""  # C or CUDA: a reference kernel with the kernel's signature
    reference_entry: str = ""  # its function; empty: the kernel's entry
    deterministic: bool = True
    flops: str = ""  # expression of dims
    bytes: str = ""  # expression of dims
    recorded_space: str = ""  # replayed where the GPU is missing


_KERNEL_LISTS = ("compiler_options", "restrictions", "dims", "problem_size", "block_size_names",
                 "grid_div_x", "grid_div_y", "grid_div_z")


def _kernel_table(value: Any) -> KernelTable:
    if not isinstance(value, dict):
        raise GoalError("kernel", "must be a table, e.g. [kernel]")
    allowed = {f.name for f in fields(KernelTable)}
    for k in value:
        if k not in allowed:
            raise GoalError(f"kernel.{k}", f"unknown field; known: {', '.join(sorted(allowed))}")
    data = dict(value)
    for k in ("grid_div_x", "grid_div_y", "grid_div_z", "problem_size"):
        if isinstance(data.get(k), (str, int)):  # Kernel Tuner allows one expression
            data[k] = [str(data[k])]
    for k in _KERNEL_LISTS:
        v = data.get(k, [])
        if not isinstance(v, list) or not all(isinstance(x, (str, int)) for x in v):
            raise GoalError(f"kernel.{k}", "must be a list of strings")
        data[k] = [str(x) for x in v]
    for k in ("entry", "language", "reference", "expected", "reference_source", "reference_entry",
              "flops", "bytes", "recorded_space"):
        if not isinstance(data.get(k, ""), str):
            raise GoalError(f"kernel.{k}", "must be a string")
    src = data.get("source", "")
    if not (isinstance(src, str) or (isinstance(src, list) and all(isinstance(x, str) for x in src))):
        raise GoalError("kernel.source", "must be a file name or a list of file names")
    for k in ("tune_params", "defines"):
        if not isinstance(data.get(k, {}), dict):
            raise GoalError(f"kernel.{k}", "must be a table")
    if not isinstance(data.get("args", []), list) or not all(
            isinstance(a, dict) for a in data.get("args", [])):
        raise GoalError("kernel.args", "must be an array of tables, [[kernel.args]]")
    if not isinstance(data.get("deterministic", True), bool):
        raise GoalError("kernel.deterministic", "must be true or false")
    return KernelTable(**data)


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
    # LLM endpoint settings (app.llm.settings.LLMSettings fields; never the API key)
    llm: dict[str, Any] = field(default_factory=dict)
    kernel: KernelTable | None = None  # your own kernel (app.catalog.custom) instead of `operator`
    # [cluster]: run the evaluations on a Ray cluster (app.cluster); empty: here, no Ray at all
    cluster: dict[str, Any] = field(default_factory=dict)
    source_path: str = ""  # where the goal was loaded from (not saved)

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
        if self.objective.metric not in OBJECTIVES:
            raise GoalError("objective.metric", f"unknown metric {self.objective.metric!r}; "
                            f"choose one of {', '.join(OBJECTIVES)}")
        if self.objective.direction not in ("",) + DIRECTIONS:
            raise GoalError("objective.direction", "must be 'minimize' or 'maximize'")
        if self.target.kind not in TARGET_KINDS:
            raise GoalError("target.kind", f"unknown target {self.target.kind!r}; "
                            f"choose one of {', '.join(TARGET_KINDS)}")
        if self.target.kind != "none":
            FIELDS["target.value"].check(self.target.value)
            if not _positive(self.target.value):
                raise GoalError("target.value", "must be a positive number")
        if self.target.kind == "fraction_of_limit" and self.target.value > 1.0:
            raise GoalError("target.value", "a fraction of the hardware limit is at most 1.0 (e.g. 0.9)")
        for name in ("max_evals", "time_budget_s", "plateau_patience"):
            FIELDS[f"stop.{name}"].check(getattr(self.stop, name))
        for name in ("rtol", "atol"):
            v = getattr(self.tolerance, name)
            if v is not None:
                FIELDS[f"tolerance.{name}"].check(v)
        for name in ("max_registers", "max_shared_memory_bytes"):
            v = getattr(self.constraints, name)
            if v is not None:
                FIELDS[f"constraints.{name}"].check(v)
        if not isinstance(self.constraints.restrictions, list) or not all(
                isinstance(r, str) for r in self.constraints.restrictions):
            raise GoalError("constraints.restrictions", "must be a list of expressions (strings)")
        if not self.swarm.agents:
            raise GoalError("swarm.agents", "choose at least one agent")
        if not isinstance(self.swarm.agents, list) or not all(
                isinstance(a, str) and a for a in self.swarm.agents):
            raise GoalError("swarm.agents", "must be a list of agent names")
        FIELDS["swarm.workers"].check(self.swarm.workers)
        FIELDS["swarm.seed"].check(self.swarm.seed)
        if not isinstance(self.swarm.transfer, bool):
            raise GoalError("swarm.transfer", "must be true or false")
        if not isinstance(self.llm, dict):
            raise GoalError("llm", "must be a table of LLM endpoint settings")
        if self.cluster:
            check_cluster_table(self.cluster)  # the table's shape only; Ray is not imported
        return self

    # ---- TOML --------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("source_path", None)
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
    def from_dict(cls, data: dict[str, Any]) -> Goal:
        if not isinstance(data, dict):
            raise GoalError("goal", "must be a table")
        sections = {"objective": Objective, "target": Target, "stop": StopRules,
                    "tolerance": Tolerance, "constraints": Constraints, "swarm": SwarmSettings}
        top = {f.name for f in fields(cls)} - {"source_path"}
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            if key not in top:
                raise GoalError(key, f"unknown field; known fields: {', '.join(sorted(top))}")
            if key == "kernel":
                kwargs[key] = _kernel_table(value)
            elif key in sections:
                if not isinstance(value, dict):
                    raise GoalError(key, "must be a table, e.g. [" + key + "]")
                sub = sections[key]
                allowed = {f.name for f in fields(sub)}
                for k in value:
                    if k not in allowed:
                        raise GoalError(f"{key}.{k}", f"unknown field; known: {', '.join(sorted(allowed))}")
                kwargs[key] = sub(**value)
            else:
                kwargs[key] = value
        return cls(**kwargs)

    @classmethod
    def from_toml(cls, text: str, source_path: str = "") -> Goal:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            where = f" in {Path(source_path).name!r}" if source_path else ""
            raise GoalError("toml", f"malformed TOML{where}: {exc}") from None
        goal = cls.from_dict(data)
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


def _positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0


def _drop_none(d: Any) -> Any:
    if isinstance(d, dict):
        return {k: _drop_none(v) for k, v in d.items() if v is not None}
    return d
