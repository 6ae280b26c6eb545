"""The installed app starts its own programs (sandbox cells, their compile helper, the sandbox
probe, a Kernel Tuner script's cell, the compile preview) the way a source install does, with
the same walls. The bundle's executable runs no `python -c`; before this it spawned its cells
through multiprocessing with the user's whole environment (scrubbed only in place), ran the
compiler inside an unsealed cell (no compile helper), reported every wall as "partial", and
`kernelswarm import-kt` and the compile preview only got the CLI's usage error.

Here a real executable stands in for the bundle: a launcher script that marks itself frozen
(sys.frozen, sys.executable = itself) and runs packaging/kernelswarm_entry.py, as PyInstaller's
bootloader does. PyInstaller itself is exercised by .ci/run's packaging smoke test."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from project_paths import ROOT

from app.core import entry_points
from app.gpu import sandbox
from app.gpu.sandbox import seccomp
from app.gpu.worker import Deadlines, WorkerPool

FAST = Deadlines(compile_s=30.0, run_s=30.0)
LAUNCHER = """#!{python}
import runpy, sys
sys.path[:0] = [{root!r}, {tests!r}]
sys.frozen = True
sys.executable = {me!r}
sys.argv[0] = {me!r}
runpy.run_path({entry!r}, run_name="__main__")
"""


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """A directory holding `kernelswarm`, an executable that behaves as the frozen one."""
    d = tmp_path_factory.mktemp("bundle")
    exe, entry = d / "kernelswarm", d / "kernelswarm_entry.py"
    # in the bundle, as in the real one (a cell's file view holds the bundle, not packaging/)
    shutil.copy(ROOT / "packaging" / "kernelswarm_entry.py", entry)
    exe.write_text(LAUNCHER.format(python=sys.executable, root=str(ROOT),
                                   tests=str(ROOT / "tests"), me=str(exe), entry=str(entry)))
    exe.chmod(0o755)
    return exe


@pytest.fixture
def frozen(bundle, monkeypatch) -> Path:
    """This process as the bundle's: its children are the bundle's executable."""
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", str(bundle))
    return bundle


def test_a_bundle_cell_gets_every_wall_a_source_install_cell_gets(frozen, monkeypatch):
    monkeypatch.setenv("KS_CANARY_SECRET", "leak")
    pool = WorkerPool("test_sandbox:CellProbe", [()], name="frozen-cell-")
    try:
        got = pool.call(("env", None), FAST)
        assert got.fault is None, got.fault
        assert "KS_CANARY_SECRET" not in got.result["env"]
        worker = pool.workers[0]
        with open(f"/proc/{worker.pid}/cmdline", "rb") as f:  # the bundle, not multiprocessing
            argv = f.read().split(b"\0")
        assert str(frozen).encode() in argv and entry_points.ENTRY_FLAG.encode() in argv
        protections = worker.protections
        # the environment is the allow-list it was started with, not scrubbed in place
        assert protections["environment"].startswith("on"), protections["environment"]
        if seccomp.available() == "":
            assert protections["processes"].startswith("on"), protections["processes"]
            assert protections["compiler"].startswith("on: helper"), protections["compiler"]
            assert protections["process-acting calls"].startswith("on")
        threads = pool.call(("threads", None), FAST)
        assert threads.fault is None and threads.result == [0, 1, 2, 3]
    finally:
        pool.close()


def test_the_bundle_probes_its_walls_like_a_source_install(frozen, monkeypatch):
    frozen_status = sandbox.status.__wrapped__()
    monkeypatch.undo()  # a source install again
    assert frozen_status == sandbox.status.__wrapped__()
    assert not any("frozen" in line for line in frozen_status.values())


@pytest.mark.parametrize("install", ["bundle", "source"])
def test_the_compile_preview_runs_from_either_install(install, bundle, monkeypatch, tmp_path):
    if install == "bundle":
        monkeypatch.setattr(sys, "frozen", True, raising=False)
        monkeypatch.setattr(sys, "executable", str(bundle))
    goal = ROOT / "resources" / "goals" / "custom" / "pnpoly_c" / "goal.toml"
    argv = entry_points.command("app.gpu.custom_reference.preview:main", str(goal),
                                isolated=False)
    assert (argv[:2] == [str(bundle), entry_points.ENTRY_FLAG]) == (install == "bundle")
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("configuration: ") and "usage:" not in out.stderr


def test_only_the_apps_own_entry_points_run(bundle, tmp_path):
    out = subprocess.run([str(bundle), entry_points.ENTRY_FLAG, "os:system", "true"],
                         capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.strip() == "kernelswarm: 'os:system' is not one of the app's entry points"
    assert entry_points.run("app.core.entry_points", []) == 2  # no function named
