"""Ctrl-C on `kernelswarm run`, as a terminal sends it (SIGINT to the whole process group, the
worker processes included): the run stops cleanly, exits 130 with one line saying how to
resume, no traceback, and `--resume` continues without evaluating anything twice."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from project_paths import ROOT, SMALL_SPACE

from app.gpu.cpu import find_compiler

STOPPED = re.compile(r"stopped by Ctrl-C after (\d+) evaluations; "
                     r"resume with kernelswarm run --resume (\d+)")
REPLAY_GOAL = (f'name = "replay ctrl-c"\nspace = "{SMALL_SPACE}"\nsimulate_time = true\n'
               "[stop]\nmax_evals = 4000\n[swarm]\nagents = [\"explorer\", \"local\"]\n"
               "workers = 2\nseed = 4\n")
CPU_GOAL = ('name = "cpu ctrl-c"\nbackend = "cpu"\noperator = "softmax"\nshapes = [[16, 80]]\n'
            "[stop]\nmax_evals = 400\ntime_budget_s = 0.0\n"
            '[swarm]\nagents = ["explorer"]\nworkers = 1\nseed = 2\n')


def _rows(db) -> list[tuple]:
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute("SELECT run_id, idx, key FROM evaluations ORDER BY run_id, idx"
                            ).fetchall()
    except sqlite3.OperationalError:  # schema not created yet
        return []
    finally:
        conn.close()


def _ctrl_c_run(tmp_path, goal_text: str, after: int) -> tuple[int, int, str, str]:
    """Start a run, press Ctrl-C once `after` evaluations are committed; (returncode, run id,
    stdout, stderr)."""
    db, goal = tmp_path / "history.sqlite", tmp_path / "goal.toml"
    goal.write_text(goal_text)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "app", "run", str(goal), "--db", str(db)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)  # its own group, as in a terminal
    try:
        deadline = time.monotonic() + 120
        while len(_rows(db)) < after:
            assert proc.poll() is None, f"run ended before Ctrl-C: {proc.communicate()}"
            assert time.monotonic() < deadline, "run made no progress"
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGINT)  # the whole group, workers included
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, db, out, err


def _check_stopped_then_resume(rc, db, out, err) -> None:
    assert rc == 130, (out, err)
    assert "Traceback" not in err and "Error" not in err, err
    lines = [line for line in err.splitlines() if STOPPED.search(line)]
    assert len(lines) == 1, err
    n, run_id = map(int, STOPPED.search(lines[0]).groups())
    before = _rows(db)
    conn = sqlite3.connect(db)
    crashed = conn.execute("SELECT COUNT(*) FROM evaluations WHERE reason = 'crash'").fetchone()
    conn.close()
    assert crashed == (0,), "Ctrl-C reached a worker process"
    assert len(before) == n and [r[1] for r in before] == list(range(1, n + 1))
    conn = sqlite3.connect(db)
    status, reason = conn.execute("SELECT status, reason FROM runs WHERE id = ?",
                                  (run_id,)).fetchone()
    conn.close()
    assert (status, reason) == ("stopped", "stopped")

    target = n + 3
    resumed = subprocess.run([sys.executable, "-m", "app", "run", "--resume", str(run_id),
                              "--max-evals", str(target), "--db", str(db), "--quiet"],
                             cwd=ROOT, capture_output=True, text=True, timeout=180, check=False)
    assert resumed.returncode == 0, resumed.stderr
    after = _rows(db)
    assert after[:n] == before and [r[1] for r in after] == list(range(1, target + 1))
    keys = [r[2] for r in after]
    assert len(set(keys)) == len(keys) == target  # nothing evaluated twice


def test_ctrl_c_stops_a_replay_run_cleanly(tmp_path):
    _check_stopped_then_resume(*_ctrl_c_run(tmp_path, REPLAY_GOAL, after=30))


@pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")
@pytest.mark.slow
def test_ctrl_c_stops_a_cpu_run_cleanly(tmp_path):
    _check_stopped_then_resume(*_ctrl_c_run(tmp_path, CPU_GOAL, after=3))


@pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")
@pytest.mark.slow
def test_a_second_ctrl_c_quits_at_once(tmp_path):
    """While the first Ctrl-C waits for a slow evaluation in flight, a second one quits at
    once: exit 130, no traceback, what was committed is kept and the run resumes."""
    db, goal = tmp_path / "history.sqlite", tmp_path / "goal.toml"
    goal.write_text(CPU_GOAL.replace("[[16, 80]]", "[[512, 8192]]"))  # seconds per evaluation
    proc = subprocess.Popen([sys.executable, "-m", "app", "run", str(goal), "--db", str(db)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while len(_rows(db)) < 1:
            assert proc.poll() is None, f"run ended before Ctrl-C: {proc.communicate()}"
            assert time.monotonic() < deadline, "run made no progress"
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGINT)
        time.sleep(0.3)  # two presses, not one merged signal
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err and "quit by a second Ctrl-C" in err, err
    n = len(_rows(db))
    assert n >= 1
    resumed = subprocess.run([sys.executable, "-m", "app", "run", "--resume", "1",
                              "--max-evals", str(n + 1), "--db", str(db), "--quiet"],
                             cwd=ROOT, capture_output=True, text=True, timeout=180, check=False)
    assert resumed.returncode == 0, resumed.stderr
    keys = [r[2] for r in _rows(db)]
    assert len(set(keys)) == len(keys) == n + 1
