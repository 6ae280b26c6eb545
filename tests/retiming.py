"""Shared by the re-timing tests (tests/test_lesson_retime*.py)."""

from __future__ import annotations

from app.core.types import Evaluation


class Counting:
    """The evaluator's own retime_pair, with the calls it was given written down."""

    def __init__(self, retime):
        self.retime = retime
        self.calls: list[tuple[str, str]] = []

    def __call__(self, a: Evaluation, b: Evaluation):
        self.calls.append((a.key, b.key))
        return self.retime(a, b)
