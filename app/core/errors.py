"""Errors every layer may raise about what the user gave it."""

from __future__ import annotations


class GoalError(ValueError):
    """A goal is invalid. `field` names the offending field (dotted), `problem` says why."""

    def __init__(self, field_name: str, problem: str) -> None:
        super().__init__(f"{field_name}: {problem}")
        self.field = field_name
        self.problem = problem
