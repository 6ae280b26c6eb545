"""The goal's sub-tables, all in one style: each a dataclass with `from_table(data, where)`,
which reads a TOML table (it must be a table; an unknown key is refused in one line that names
the file and the key) and `check()`, which judges its values (types, then the one range per
field in app.goal.ranges) and raises GoalError naming `table.field`.

`from_table` checks only the table's structure, so a goal file with a value out of range still
opens (in the form, which shows the problem beside the field) and a goal stored with an old
run still loads; `Goal.validate()` calls every table's `check()` once per run.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from app.core.errors import GoalError
from app.goal.ranges import FIELDS, default

OBJECTIVES = ("time", "throughput", "energy")
DIRECTIONS = ("minimize", "maximize")
TARGET_KINDS = ("none", "speedup", "fraction_of_limit", "absolute")
DEFAULT_AGENTS = ["explorer", "local", "evolution", "model"]
API_KEY_ENV = "KERNELSWARM_LLM_API_KEY"  # where the key is read from (app.llm.settings), never a file

T = TypeVar("T", bound="SubTable")


def in_file(where: str) -> str:
    """" in 'goal.toml'" for an error about a file, "" for a goal built in code."""
    return f" in {Path(where).name!r}" if where else ""


class SubTable:
    """A [table] of a goal file."""

    TABLE: ClassVar[str] = ""

    @classmethod
    def from_table(cls: type[T], value: Any, where: str = "") -> T:  # noqa: PYI019 - py3.10
        if not isinstance(value, dict):
            raise GoalError(cls.TABLE, f"must be a table, e.g. [{cls.TABLE}]{in_file(where)}")
        known = cls._known()
        for k in value:
            if k not in known:
                raise GoalError(f"{cls.TABLE}.{k}",
                                f"unknown field{in_file(where)}; known: {', '.join(known)}")
        return cls(**cls._normalise(dict(value)))

    @classmethod
    def _known(cls) -> list[str]:
        """The keys the table takes, as an unknown key's message lists them."""
        return sorted(f.name for f in fields(cls))  # type: ignore[arg-type]

    @classmethod
    def _normalise(cls, data: dict[str, Any]) -> dict[str, Any]:
        return data

    def check(self) -> None:
        """GoalError naming `table.field` for the first value that is wrong."""

    def _range(self, name: str) -> None:
        value = getattr(self, name)
        if value is not None or FIELDS[f"{self.TABLE}.{name}"].default is not None:
            FIELDS[f"{self.TABLE}.{name}"].check(value)


@dataclass
class Objective(SubTable):
    TABLE: ClassVar[str] = "objective"
    metric: str = "time"
    direction: str = ""  # empty: derived from the metric (time/energy minimise, throughput maximise)

    @property
    def minimize(self) -> bool:
        if self.direction:
            return self.direction == "minimize"
        return self.metric != "throughput"

    def check(self) -> None:
        if self.metric not in OBJECTIVES:
            raise GoalError("objective.metric", f"unknown metric {self.metric!r}; "
                            f"choose one of {', '.join(OBJECTIVES)}")
        if self.direction not in ("",) + DIRECTIONS:
            raise GoalError("objective.direction", "must be 'minimize' or 'maximize'")


@dataclass
class Target(SubTable):
    TABLE: ClassVar[str] = "target"
    kind: str = "none"
    value: float = default("target.value")

    def check(self) -> None:
        if self.kind not in TARGET_KINDS:
            raise GoalError("target.kind", f"unknown target {self.kind!r}; "
                            f"choose one of {', '.join(TARGET_KINDS)}")
        if self.kind == "none":
            return
        self._range("value")
        if not self.value > 0:
            raise GoalError("target.value", "must be a positive number")
        if self.kind == "fraction_of_limit" and self.value > 1.0:
            raise GoalError("target.value",
                            "a fraction of the hardware limit is at most 1.0 (e.g. 0.9)")


@dataclass
class StopRules(SubTable):
    TABLE: ClassVar[str] = "stop"
    max_evals: int = default("stop.max_evals")
    time_budget_s: float = default("stop.time_budget_s")  # 0: no wall-clock budget
    plateau_patience: int = default("stop.plateau_patience")  # without improvement; 0: off

    def check(self) -> None:
        for name in ("max_evals", "time_budget_s", "plateau_patience"):
            self._range(name)


@dataclass
class Tolerance(SubTable):
    TABLE: ClassVar[str] = "tolerance"
    rtol: float | None = None  # None: the dtype's default
    atol: float | None = None

    def check(self) -> None:
        self._range("rtol")
        self._range("atol")


@dataclass
class Constraints(SubTable):
    TABLE: ClassVar[str] = "constraints"
    restrictions: list[str] = field(default_factory=list)
    max_registers: int | None = None
    max_shared_memory_bytes: int | None = None
    forbid: list[str] = field(default_factory=list)  # e.g. "precision_lowering", "atomics"

    def check(self) -> None:
        self._range("max_registers")
        self._range("max_shared_memory_bytes")
        if not isinstance(self.restrictions, list) or not all(
                isinstance(r, str) for r in self.restrictions):
            raise GoalError("constraints.restrictions", "must be a list of expressions (strings)")


@dataclass
class SwarmSettings(SubTable):
    TABLE: ClassVar[str] = "swarm"
    agents: list[str] = field(default_factory=lambda: list(DEFAULT_AGENTS))
    workers: int = default("swarm.workers")
    seed: int = default("swarm.seed")
    transfer: bool = True  # start from earlier runs of the same kernel (app.swarm.transfer)

    def check(self) -> None:
        if not self.agents:
            raise GoalError("swarm.agents", "choose at least one agent")
        if not isinstance(self.agents, list) or not all(
                isinstance(a, str) and a for a in self.agents):
            raise GoalError("swarm.agents", "must be a list of agent names")
        self._range("workers")
        self._range("seed")
        if not isinstance(self.transfer, bool):
            raise GoalError("swarm.transfer", "must be true or false")


_KERNEL_LISTS = ("compiler_options", "restrictions", "dims", "problem_size", "block_size_names",
                 "grid_div_x", "grid_div_y", "grid_div_z")


@dataclass
class KernelTable(SubTable):
    """The [kernel] table of a custom-kernel goal (your own C or CUDA kernel), in Kernel Tuner's
    terms. Only the shape of the table is checked here, on load; app.catalog.custom.spec
    checks the rest (expressions, files, arguments) once per run. Paths are relative to the
    goal file."""

    TABLE: ClassVar[str] = "kernel"
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

    @classmethod
    def _normalise(cls, data: dict[str, Any]) -> dict[str, Any]:
        """Kernel Tuner's spellings made lists; every value of the right type (the table's
        structure, checked on load: app.catalog.custom.spec reads it as typed)."""
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
        return data


class PartialTable(SubTable, MutableMapping):
    """A table of settings judged elsewhere, which a goal overrides one by one: None is a
    setting the goal leaves alone, so the table reads as the mapping of what the goal sets, in
    the file's order (a goal saved again writes it unchanged), and equals that dict."""

    KEYS: ClassVar[tuple[str, ...]] = ()  # the fields, in order (set by @_partial)

    @classmethod
    def from_table(cls: type[T], value: Any, where: str = "") -> T:  # noqa: PYI019 - py3.10
        table = super().from_table(value, where)  # type: ignore[misc]
        table._order = list(value)
        return table

    def __post_init__(self) -> None:
        self._order: list[str] = []

    def __getitem__(self, key: str) -> Any:
        value = getattr(self, key) if key in self.KEYS else None
        if value is None:
            raise KeyError(key)
        return value

    def __setitem__(self, key: str, value: Any) -> None:
        if key not in self.KEYS:  # the same refusal as on load
            type(self).from_table({key: value})
        setattr(self, key, value)
        if key not in self._order:
            self._order.append(key)

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        setattr(self, key, None)

    def __iter__(self) -> Iterator[str]:
        keys = [*self._order, *(k for k in self.KEYS if k not in self._order)]
        return (k for k in keys if getattr(self, k) is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)


P = TypeVar("P", bound=PartialTable)


def _partial(cls: type[P]) -> type[P]:
    """A dataclass whose equality is the mapping's, with its field names in KEYS."""
    cls = dataclass(eq=False)(cls)
    cls.KEYS = tuple(f.name for f in fields(cls))  # type: ignore[arg-type]
    return cls


@_partial
class LLMTable(PartialTable):
    """The [llm] table: the endpoint settings a goal overrides. app.llm.settings.LLMSettings
    has the same fields and judges the values, against the user's own settings and spending
    limits, once per run. Never the API key."""

    TABLE: ClassVar[str] = "llm"
    base_url: str | None = None
    model: str | None = None
    timeout_s: float | None = None
    max_concurrent: int | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    max_retries: int | None = None
    backoff_s: float | None = None
    max_backoff_s: float | None = None
    run_token_budget: int | None = None
    run_cost_budget: float | None = None
    price_prompt_per_mtok: float | None = None
    price_completion_per_mtok: float | None = None
    roles: list[str] | None = None
    stream: bool | None = None
    reasoning_effort: str | None = None

    @classmethod
    def from_table(cls, value: Any, where: str = "") -> LLMTable:
        for k in ("api_key", "key"):  # a goal file is shared: the key would travel with it
            if isinstance(value, dict) and k in value:
                raise GoalError(f"llm.{k}", "the API key is never kept in settings files; set "
                                f"{API_KEY_ENV} or store it in the OS keyring")
        return super().from_table(value, where)


@_partial
class ClusterTable(PartialTable):
    """The [cluster] table: where the Ray cluster is and which of its devices to use; empty:
    this machine, no Ray at all. app.core.cluster_settings judges it (Goal.validate, and
    app.cluster when it connects) into ClusterSettings, which has the same fields."""

    TABLE: ClassVar[str] = "cluster"
    address: str | None = None
    devices: str | None = None
    actors: int | None = None
    fallback: str | None = None
    connect_timeout_s: float | None = None

    @classmethod
    def _known(cls) -> list[str]:
        return list(cls.KEYS)  # as app.core.cluster_settings lists them
