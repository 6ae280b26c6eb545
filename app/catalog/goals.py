"""What the catalog says about a goal before anything runs: whether it names an operator the
backend has (or your own kernel, whose [kernel] table is read and checked), and whether that
operator is judged by bytes moved or by FLOPs (Operator.memory_bound)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from app.catalog import known_operators
from app.core.errors import GoalError

if TYPE_CHECKING:
    from app.goal import Goal


def check_operator_goal(backend: str, goal: Goal) -> None:
    """A known operator of `backend` and at least one shape, or a valid [kernel] table."""
    if goal.kernel is not None:  # your own kernel: its [kernel] table, files and expressions
        _check_custom_goal(backend, goal)
        return
    if not goal.operator:
        raise GoalError("operator", f"a {backend} goal needs an operator from the catalog")
    ops = known_operators(backend)
    if goal.operator not in ops:
        raise GoalError("operator", f"unknown operator {goal.operator!r} for backend "
                        f"{backend}; known: {', '.join(sorted(ops)) or 'none'}")
    if not goal.shapes:
        raise GoalError("shapes", "give at least one shape")


def _check_custom_goal(backend: str, goal: Goal) -> None:
    from app.catalog.custom import load_spec

    spec = load_spec(goal, backend)
    goal.operator = ""  # the [kernel] table wins over an operator a form kept (stored runs say so)
    if spec.recorded_space:
        try:
            goal.resolve_space_path() if goal.space else recorded_space(goal, spec.recorded_space)
        except FileNotFoundError as exc:
            raise GoalError("kernel.recorded_space", str(exc)) from None


def recorded_space(goal: Goal, name: str) -> Path:
    """Your own kernel's recorded space, looked for beside the goal's file first."""
    from app.paths import find_space

    return find_space(name, Path(goal.source_path).parent if goal.source_path else None)


def goal_is_memory_bound(backend: str, goal: Goal) -> bool:
    """Whether the goal's operator is judged by bytes moved (GB/s) rather than FLOPs."""
    if goal.kernel is not None:  # your own kernel: bytes unless it gives a FLOP count
        return not goal.kernel.flops
    op = known_operators(backend).get(goal.operator)
    return op is not None and bool(op.memory_bound)
