"""Where KernelSwarm keeps things: database, caches, logs (platformdirs), bundled resources."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import platformdirs

APP_NAME = "kernelswarm"
DB_ENV = "KERNELSWARM_DB"
SPACES_ENV = "KERNELSWARM_SPACES"


def resources_dir() -> Path:
    """resources/ of the checkout, or of the frozen bundle."""
    frozen_root = getattr(sys, "_MEIPASS", None)
    if frozen_root:
        return Path(frozen_root) / "resources"
    return Path(__file__).resolve().parent.parent / "resources"


def data_dir() -> Path:
    return Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))


def cache_dir() -> Path:
    override = os.environ.get("KERNELSWARM_CACHE")
    return Path(override) if override else Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False))


def baseline_cache_dir() -> Path:
    """The caches of the trusted baseline cell (Triton's launchers, Inductor's modules, CuPy's
    kernels): beside the cache, not inside it, because every sealed cell may write the cache and
    the baseline cell loads and runs what it finds here."""
    cache = cache_dir()
    return cache.with_name(cache.name + "-baselines")


def log_dir() -> Path:
    return Path(platformdirs.user_log_dir(APP_NAME, appauthor=False))


def default_db_path() -> Path:
    override = os.environ.get(DB_ENV)
    return Path(override) if override else data_dir() / "history.sqlite"


def space_search_dirs(extra: Path | None = None) -> list[Path]:
    dirs: list[Path] = []
    if extra is not None:
        dirs.append(extra)
    for entry in os.environ.get(SPACES_ENV, "").split(os.pathsep):
        if entry:
            dirs.append(Path(entry))
    dirs.append(resources_dir() / "spaces")
    # A checkout beside the shared data sets (development and CI machines).
    dirs.append(Path(__file__).resolve().parent.parent.parent / "shared" / "datasets" / "tuning-spaces")
    return dirs


def find_space(name: str, goal_dir: Path | None = None) -> Path:
    """Resolve a recorded space's file name; FileNotFoundError names every place looked in."""
    p = Path(name).expanduser()
    if p.is_absolute():
        if p.exists():
            return p
        raise FileNotFoundError(f"recorded space {name!r} does not exist")
    looked = []
    for d in space_search_dirs(goal_dir):
        cand = d / p
        looked.append(str(d))
        if cand.exists():
            return cand
    raise FileNotFoundError(f"recorded space {name!r} not found in: {', '.join(looked)}")
