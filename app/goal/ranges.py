"""Each numeric goal field's one range and one default, read by the goal's checks, the goal
form's spin boxes, the custom-kernel page and import-kt, so no two places disagree on what a
goal may hold."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.core.errors import GoalError

INT32 = 2**31 - 1


@dataclass(frozen=True)
class FieldRange:
    name: str  # dotted, as the goal file and its errors name it
    low: float
    high: float
    default: float | int | None
    integer: bool = True
    zero: str = ""  # what 0 means, where it means something ("no budget", "off")

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a number"
        span = f"{_num(self.low)} and {_num(self.high)}" if self.high != float("inf") \
            else None
        text = f"must be {kind} between {span}" if span else f"must be {kind} >= {_num(self.low)}"
        return text + (f" (0 means {self.zero})" if self.zero else "")

    def check(self, value: object) -> None:
        """GoalError naming the field unless `value` is a number of the right kind in range."""
        ok_type = isinstance(value, int) if self.integer else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok_type or not self.low <= value <= self.high:  # type: ignore[operator]
            raise GoalError(self.name, f"{self.describe()}; got {value!r}")


def _num(v: float) -> str:
    return f"{int(v):,}" if float(v).is_integer() else f"{v:g}"


FIELDS: dict[str, FieldRange] = {r.name: r for r in (
    FieldRange("stop.max_evals", 1, 10_000_000, 200),
    FieldRange("stop.time_budget_s", 0, 1e7, 0.0, integer=False, zero="no budget"),
    FieldRange("stop.plateau_patience", 0, 1_000_000, 0, zero="off"),
    FieldRange("swarm.workers", 1, 256, 4),
    FieldRange("swarm.seed", -INT32 - 1, INT32, 0),
    FieldRange("target.value", 0, 1e12, 0.0, integer=False),
    FieldRange("device", 0, 63, None),
    FieldRange("tolerance.rtol", 0, float("inf"), None, integer=False),
    FieldRange("tolerance.atol", 0, float("inf"), None, integer=False),
    FieldRange("constraints.max_registers", 1, 65_536, None),
    FieldRange("constraints.max_shared_memory_bytes", 1, INT32, None),
)}


def default(name: str) -> Any:
    """The field's default: int, float or None, as the field is."""
    return FIELDS[name].default
