"""Shared test setup: no display (Qt offscreen), no writes outside the test's tmp dir, and a
small recorded space to replay."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

# Before anything imports Qt: tests run without a display.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from project_paths import GOALS, ROOT, SMALL_SPACE, SPACES  # noqa: F401  (fixtures use them)

# The CPU's memory roofs and FP32 peak take 5-10 s to measure. They are measured once per test
# session, and only when a test needs them: a test that compiles C gets them up front (its
# module mentions the CPU backend: below), any other code that asks measures through the
# memoised probe. Every test still gets a fresh cache directory, into which what was measured
# is stored (trusted, MAC-checked) as a user's first run would have stored it.
_MEASURED: dict[str, bytes] = {}
_NEEDS_C = re.compile(r'CpuEvaluator|backend\s*=\s*\\?["\']cpu|cpu_[a-z]+\.toml|host_program_for|'
                      r'find_compiler|import-kt|WorkerPool')


def _measure(kind: str) -> bytes | None:
    """The machine's roofs ("memory") or peak ("compute"), measured once per session."""
    import shutil

    if kind not in _MEASURED:
        if shutil.which("cc") is None:
            return None
        from app.gpu.cpu import compute_roof, toolchain
        from app.gpu.cpu import memory_roof as cpu_roof

        # the session fixture runs before the autouse one that records the real probes: record
        # them here too, or the first measurement fails and every later test measures its own
        _REAL.setdefault("memory", cpu_roof.measure)
        _REAL.setdefault("compute", compute_roof.measure)
        try:
            tc = toolchain()
            if kind == "memory":
                _MEASURED[kind] = cpu_roof.encode(_REAL["memory"](tc.compiler), tc.identity)
            else:
                _MEASURED[kind] = compute_roof.encode(_REAL["compute"](tc.compiler), tc.identity)
        except Exception:  # noqa: BLE001 - tests then measure for themselves, as users do
            return None
    return _MEASURED[kind]


_REAL: dict[str, object] = {}


def pytest_collection_modifyitems(items):
    """Tests whose module compiles C measure the roofs before their first test (once)."""
    compiles: dict[str, bool] = {}  # per module, not per test: a module has up to 100 tests
    for item in items:
        path = str(item.fspath)
        if path not in compiles:
            # a module that names the CPU backend only to check goals says so (COMPILES = False)
            declared = getattr(getattr(item, "module", None), "COMPILES", None)
            try:
                compiles[path] = bool(declared) if declared is not None else bool(
                    _NEEDS_C.search(Path(path).read_text(encoding="utf-8")))
            except OSError:
                compiles[path] = False
        if compiles[path]:
            item.fixturenames.insert(0, "_machine_roofs")  # before the autouse one that seeds


@pytest.fixture(scope="session")
def _machine_roofs(tmp_path_factory) -> Path | None:
    """Measures both once; gives the memory roofs as a file (None where nothing was measured)
    for fixtures that seed a cache of their own: Ray's head node, a window's run."""
    memory = _measure("memory")
    _measure("compute")
    if memory is None:
        return None
    path = tmp_path_factory.mktemp("roofs") / "memory_roofs.json"
    path.write_bytes(memory)
    return path


@pytest.fixture(autouse=True, scope="session")
def _wired_registries():
    """Every entry point (CLI, window, engine process) calls wire() before it reads a
    registry; a test that builds a form or an evaluator directly stands in for one."""
    from app.session.registries import wire

    wire()


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path_factory, monkeypatch):
    """Never touch the real user's history database or caches."""
    home = tmp_path_factory.mktemp("user")
    monkeypatch.setenv("KERNELSWARM_DB", str(home / "history.sqlite"))
    monkeypatch.setenv("KERNELSWARM_CACHE", str(home / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))  # user LLM settings
    if "app.gpu.cpu.memory_roof" not in sys.modules and not _MEASURED:
        return  # nothing has touched the CPU backend yet: nothing to store or memoise
    from app.gpu import trusted_cache
    from app.gpu.cpu import compute_roof
    from app.gpu.cpu import memory_roof as cpu_roof

    _REAL.setdefault("memory", cpu_roof.measure)
    _REAL.setdefault("compute", compute_roof.measure)
    # code under test that measures gets the session's figures (measured on first use)
    monkeypatch.setattr(cpu_roof, "measure", _memoised(cpu_roof, "memory"))
    monkeypatch.setattr(compute_roof, "measure", _memoised(compute_roof, "compute"))
    if "memory" in _MEASURED:
        trusted_cache.store_trusted(cpu_roof.default_file(), _MEASURED["memory"])
    if "compute" in _MEASURED:
        trusted_cache.store_trusted(compute_roof.default_file(), _MEASURED["compute"])


def _memoised(module, kind: str):
    import json

    real = _REAL[kind]

    def measure(compiler: str, *args, **kwargs):
        if args or kwargs:  # a test asking for its own probe settings measures for real
            return real(compiler, *args, **kwargs)
        raw = _measure(kind)
        if raw is None:
            return real(compiler)
        return module.decode(json.loads(raw))

    return measure


@pytest.fixture(autouse=True)
def _qt_garbage_on_the_main_thread(request):
    """A Qt test's garbage is freed on the main thread, as the application does it
    (app.ui.gui_gc says why): not automatically while the test runs, when its engine threads
    allocate, but after it. Without this a test's engine thread once hung the suite
    collecting widgets an earlier test left behind."""
    if not {"qtbot", "qapp"} & set(request.fixturenames):
        yield
        return
    import gc

    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect()


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
