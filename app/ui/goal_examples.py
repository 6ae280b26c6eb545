"""The goal form's lists: recorded spaces the resolver finds, the shipped example goals (the
your-own-kernel ones too) and whether this machine can run each, in a user's words."""

from __future__ import annotations

import functools
from pathlib import Path

from app.goal import Goal, GoalError
from app.gpu.registry import backend_spec
from app.paths import resources_dir, space_search_dirs

SPACE_SUFFIXES = (".json", ".json.gz")


def recorded_spaces() -> list[tuple[str, Path]]:
    """(file name, path) of every recorded space the goal resolver can find, first one wins."""
    seen: dict[str, Path] = {}
    for d in space_search_dirs():
        if not d.is_dir():
            continue
        for p in sorted(d.iterdir()):
            if p.name.endswith(SPACE_SUFFIXES) and p.name not in seen:
                seen[p.name] = p
    return sorted(seen.items())


def example_goals() -> list[Path]:
    """The shipped goals, then the 'your own kernel' examples (custom/NAME/goal.toml)."""
    d = resources_dir() / "goals"
    return sorted(d.glob("*.toml")) + sorted(d.glob("custom/*/goal.toml")) if d.is_dir() else []


def example_name(path: Path) -> str:
    """'cpu softmax', or 'conv2d c (your own kernel)' for a custom example's goal.toml."""
    if path.name == "goal.toml" and path.parent.parent.name == "custom":
        return f"{path.parent.name.replace('_', ' ')} (your own kernel)"
    return path.stem.replace("_", " ")


# Why a backend's probe failing stops a goal, in a user's words.
NEEDS = {"cuda": "needs an NVIDIA GPU", "cpu": "needs a C compiler",
         "replay": "needs the recorded spaces"}


@functools.cache
def backend_usable(backend: str) -> tuple[bool, str]:
    """The backend's own probe (registry), run once per process: the example list asks it
    for every goal, and a probe may import CuPy or call NVML."""
    try:
        return backend_spec(backend).probe()
    except Exception as exc:  # noqa: BLE001 - an unknown backend or a broken probe: cannot run
        return False, str(exc)


@functools.cache
def example_status(path: str) -> tuple[bool, str]:
    """(runnable here, why not) for an example goal file: the backend's probe, then the
    checks a run makes (its recorded space is shipped, its operator exists, ...)."""
    try:
        goal = Goal.load(path)
    except GoalError as exc:
        return False, f"the goal file is invalid ({exc})"
    ok, detail = backend_usable(goal.backend)
    if not ok:
        return False, f"{NEEDS.get(goal.backend, f'needs the {goal.backend} backend')} ({detail})"
    try:
        from app.session import check_goal

        check_goal(goal)
        if goal.space:
            goal.resolve_space_path()
    except FileNotFoundError:
        return False, f"its recorded space {goal.space} is not on this machine"
    except GoalError as exc:
        return False, str(exc)
    except Exception as exc:  # noqa: BLE001 - whatever stops the run, say it here
        return False, f"{type(exc).__name__}: {exc}"
    return True, ""
