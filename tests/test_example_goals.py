"""Every example goal runs from a fresh clone: the recorded spaces they name are shipped."""

from __future__ import annotations

import pytest
from project_paths import GOALS, SPACES

from app.goal import Goal


@pytest.mark.parametrize("path", sorted(GOALS.glob("*.toml")), ids=lambda p: p.name)
def test_recorded_space_is_shipped(path):
    goal = Goal.load(path)
    if goal.backend == "replay":
        assert (SPACES / goal.space).is_file(), f"{goal.space} is not in resources/spaces"
