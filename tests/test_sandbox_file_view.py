"""The last part: `stat` gives the size and mtime of files Landlock hides.
Landlock governs opening a file, not looking it up, and Python itself needs stat, so a goal's
Python reference (a colleague's code, run in the worker cell) could still measure any file on
the machine. The cell's own file view (app/gpu/sandbox/mounts.py) holds only what its rules
name: the ground truth is checked from outside, with canary files the cell must not see."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_load_time import PYTHON_REFERENCE_GOAL  # a goal with a Python reference

from app.core.types import Candidate
from app.goal import Goal
from app.gpu import sandbox
from app.gpu.cpu import CpuEvaluator, find_compiler

pytestmark = [pytest.mark.skipif(not sandbox.enabled(), reason="sandbox switched off"),
              pytest.mark.skipif(not sandbox.status()["file view"].startswith("on"),
                                 reason="no mount namespace on this platform")]
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def canary(tmp_path_factory) -> Path:
    """A secret file outside every cell: its size is what an attacker would read."""
    secret = tmp_path_factory.mktemp("outside") / "id_ed25519"
    secret.write_text("k" * 1234)
    return secret


@pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")
def test_a_colleagues_python_reference_cannot_stat_hidden_files(tmp_path, canary):
    """The attack: import-time code of a goal's Python reference stats files it may not read
    (a key beside the goal, the checkout's own files, the machine's /etc) and prints sizes."""
    targets = [str(canary), str(canary.parent), str(REPO / "README.md"), "/etc/hostname",
               "/etc/shadow"]
    (tmp_path / "reference.py").write_text(textwrap.dedent(f"""\
        import os
        for target in {targets!r}:
            try:
                st = os.stat(target)
                print("SEEN", target, st.st_size, st.st_mtime)
            except OSError as exc:
                print("UNSEEN", target, type(exc).__name__)
        try:
            print("LISTED /tmp", sorted(os.listdir("/tmp")))
        except OSError as exc:
            print("UNLISTED /tmp", type(exc).__name__)

        def scale(x, n):
            return 2.0 * x
        """))
    (tmp_path / "k.c").write_text("void scale(float *out, const float *x, long n) {\n"
                                  "  for (long i = 0; i < n; i++) out[i] = 2.0f * x[i]; }\n")
    (tmp_path / "goal.toml").write_text(PYTHON_REFERENCE_GOAL)
    with CpuEvaluator(Goal.load(tmp_path / "goal.toml")) as ev:
        result = ev.evaluate(Candidate(config={"U": 1}, key="stat-attack", agent="user"))
    assert result.ok, (result.reason, result.detail)  # the honest kernel still passes
    for target in targets:  # the log names paths by their last part (<path>/name)
        assert f"UNSEEN <path>/{os.path.basename(target)} FileNotFoundError" in result.log, \
            result.log[-3000:]
    assert "SEEN" not in result.log.replace("UNSEEN", "")
    listed = [line for line in result.log.splitlines() if line.startswith("LISTED /tmp")]
    if listed:  # /tmp holds the cell's own scratch and nothing of anyone else's
        assert canary.parent.name not in listed[0] and tmp_path.name not in listed[0], listed


CELL = """
import json, os, sys
sys.path[:0] = json.loads(sys.argv[1])
from app.gpu import sandbox
scratch, kind, hidden = sys.argv[2], sys.argv[3], sys.argv[4]
plan = sandbox.plan_cell(kind, scratch)
applied = sandbox.enter_cell(plan)
report = {"view": applied["file view"], "pid": os.getpid()}
def look(name, fn):
    try:
        report[name] = fn()
    except OSError as exc:
        report[name] = type(exc).__name__
look("hidden", lambda: os.stat(hidden).st_size)
look("home", lambda: os.path.exists(os.path.expanduser("~root/.bash_history")))
look("proc", lambda: sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
look("shm", lambda: sorted(os.listdir("/dev/shm")))
look("shm_write", lambda: open("/dev/shm/from-the-cell", "w").close())
import numpy  # the cell's own Python and packages are all there
report["numpy"] = numpy.arange(3).tolist()
print(json.dumps(report))
"""


def _cell(kind: str, hidden: Path, tmp_path: Path) -> dict:
    scratch = tmp_path / f"scratch-{kind}"
    scratch.mkdir()
    out = subprocess.run([sys.executable, "-I", "-c", CELL, json.dumps(sys.path), str(scratch),
                          kind, str(hidden)], capture_output=True, text=True, timeout=120,
                         env=sandbox.cell_environment(str(scratch)), cwd=scratch, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", ["cpu", "gpu"])
def test_a_cell_sees_only_its_own_files_processes_and_shared_memory(kind, tmp_path, canary):
    host_shm = Path("/dev/shm")
    planted = host_shm / f"kernelswarm-test-{os.getpid()}" if host_shm.is_dir() else None
    if planted is not None:
        planted.write_text("the host's")
    try:
        seen = _cell(kind, canary, tmp_path)
    finally:
        if planted is not None:
            planted.unlink()
    assert seen["view"].startswith("on"), seen["view"]
    assert seen["hidden"] == "FileNotFoundError", seen
    assert seen["home"] is False
    assert seen["numpy"] == [0, 1, 2]
    if isinstance(seen["proc"], list) and "own /proc" in seen["view"]:
        assert seen["proc"] == sorted(seen["proc"]) and max(seen["proc"]) < 100, seen["proc"]
    if kind == "gpu":  # a GPU cell writes /dev/shm (the driver's files): its own, not the host's
        assert seen["shm"] == [], seen["shm"]
        assert seen["shm_write"] is None
        assert not (host_shm / "from-the-cell").exists()


def test_status_names_the_file_view():
    line = sandbox.status()["file view"]
    assert line.startswith("on") and "stat" in line, line
