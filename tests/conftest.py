"""Shared test setup: no display (Qt offscreen), no writes outside the test's tmp dir, and a
small recorded space to replay."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Before anything imports Qt: tests run without a display.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from project_paths import GOALS, ROOT, SMALL_SPACE, SPACES  # noqa: F401  (fixtures use them)


@pytest.fixture(scope="session")
def _machine_roofs(tmp_path_factory) -> Path | None:
    """The CPU's memory roofs, measured once per test session (about 5-10 s) instead of once
    per test: every test gets a fresh cache directory, which would otherwise measure again."""
    import shutil

    if shutil.which("cc") is None:
        return None
    from app.gpu import cpu_roof
    from app.gpu.cpu import toolchain

    try:
        tc = toolchain()
        path = tmp_path_factory.mktemp("roofs") / "cpu-roofs.json"
        path.write_bytes(cpu_roof.encode(cpu_roof.measure(tc.compiler), tc.identity))
        return path
    except Exception:  # noqa: BLE001 - tests then measure for themselves, as users do
        return None


@pytest.fixture(scope="session")
def _machine_peak(tmp_path_factory) -> bytes | None:
    """The CPU's FP32 peak (app.gpu.cpu.compute_roof), measured once per test session."""
    import shutil

    if shutil.which("cc") is None:
        return None
    from app.gpu.cpu import compute_roof, toolchain

    try:
        tc = toolchain()
        return compute_roof.encode(compute_roof.measure(tc.compiler), tc.identity)
    except Exception:  # noqa: BLE001 - tests then measure for themselves, as users do
        return None


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path_factory, monkeypatch, _machine_roofs, _machine_peak):
    """Never touch the real user's history database or caches."""
    home = tmp_path_factory.mktemp("user")
    monkeypatch.setenv("KERNELSWARM_DB", str(home / "history.sqlite"))
    monkeypatch.setenv("KERNELSWARM_CACHE", str(home / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))  # user LLM settings
    if _machine_roofs is not None:  # where the roofs are cached: trusted, MAC-checked
        from app.gpu import cpu_roof, trusted_cache

        trusted_cache.store_trusted(cpu_roof.default_file(), _machine_roofs.read_bytes())
    if _machine_peak is not None:
        from app.gpu import trusted_cache
        from app.gpu.cpu import compute_roof

        trusted_cache.store_trusted(compute_roof.default_file(), _machine_peak)


@pytest.fixture
def tmp_db(tmp_path) -> Path:
    """Path of a history database that does not exist yet."""
    return tmp_path / "history.sqlite"


@pytest.fixture
def small_space() -> Path:
    return SMALL_SPACE


@pytest.fixture
def small_goal_file(tmp_path, small_space) -> Path:
    """A replay goal over the small recorded space: 40 evaluations, one worker (deterministic)."""
    path = tmp_path / "goal.toml"
    path.write_text(
        f'name = "pnpoly test"\nspace = "{small_space}"\nbackend = "replay"\n'
        "[stop]\nmax_evals = 40\n[swarm]\nworkers = 1\nseed = 3\n", encoding="utf-8")
    return path


@pytest.fixture
def cpu_hog():
    """A real process spinning on a core while the candidate and the probe run: the load."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    time.sleep(0.2)
    yield hog
    hog.kill()
    hog.wait(5)


@pytest.fixture
def victim():
    """A process of the same user outside every cell (standing in for the engine or the GUI)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    time.sleep(0.2)
    yield proc
    proc.kill()
    proc.wait()
