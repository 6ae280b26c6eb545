"""A real `python -m app run` process killed with SIGKILL mid-run, then resumed with --resume:
no completed evaluation is lost and none is evaluated twice."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from project_paths import ROOT, SPACES

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")

KILL_AFTER = 60  # committed evaluations before the kill
BUDGET = 5000  # far more than the run can do before we kill it


def _rows(db):
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        return conn.execute("SELECT run_id, idx, key, ok, value FROM evaluations ORDER BY run_id, idx"
                            ).fetchall()
    except sqlite3.OperationalError:  # schema not created yet
        return []
    finally:
        conn.close()


def _cli(*args, **kw):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, "-m", "app", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False, **kw)


def test_sigkill_then_resume_loses_and_repeats_nothing(tmp_path):
    db, trace = tmp_path / "history.sqlite", tmp_path / "trace.jsonl"
    goal = tmp_path / "gemm.toml"
    goal.write_text(f'name = "gemm kill test"\nspace = "{SPACES / "gemm_RTX_3090.json.gz"}"\n'
                    f"[stop]\nmax_evals = {BUDGET}\n[swarm]\nworkers = 2\nseed = 5\n")
    proc = subprocess.Popen([sys.executable, "-m", "app", "run", str(goal), "--db", str(db),
                             "--trace", str(trace), "--quiet"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 90
        while len(_rows(db)) < KILL_AFTER:
            assert proc.poll() is None, f"run ended before the kill: {proc.stderr.read()!r}"
            assert time.monotonic() < deadline, "run made no progress"
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL

    before = _rows(db)
    run_ids = {r[0] for r in before}
    assert len(run_ids) == 1
    run_id = run_ids.pop()
    n = len(before)
    assert KILL_AFTER <= n < BUDGET
    assert [r[1] for r in before] == list(range(1, n + 1))  # committed in order, no gaps
    # Everything the process reported as evaluated (the trace is written after the store
    # commits) is in the database: no completed evaluation was lost.
    traced = [json.loads(line) for line in trace.read_text().splitlines() if line.endswith("}")]
    traced_keys = {e["evaluation"]["key"] for e in traced if e["event"] == "Evaluated"}
    assert traced_keys and traced_keys <= {r[2] for r in before}

    show = _cli("show", str(run_id), "--db", str(db))
    assert show.returncode == 0 and "interrupted" in show.stdout

    target = n + 40
    resumed = _cli("run", "--resume", str(run_id), "--max-evals", str(target), "--db", str(db),
                   "--quiet")
    assert resumed.returncode == 0, resumed.stderr
    assert f"run {run_id} max_evals: {target} evaluations" in resumed.stdout

    after = _rows(db)
    assert after[:n] == before  # what was committed is untouched
    assert [r[1] for r in after] == list(range(1, target + 1))
    keys = [r[2] for r in after]
    assert len(set(keys)) == len(keys) == target  # nothing evaluated twice
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT status, reason FROM runs WHERE id = ?", (run_id,)).fetchone() \
        == ("finished", "max_evals")
    assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1


def test_sigterm_stops_a_run_cleanly(tmp_path):
    db = tmp_path / "history.sqlite"
    goal = tmp_path / "gemm.toml"
    goal.write_text(f'name = "gemm stop test"\nspace = "{SPACES / "gemm_RTX_3090.json.gz"}"\n'
                    f"[stop]\nmax_evals = {BUDGET}\n[swarm]\nworkers = 1\n")
    proc = subprocess.Popen([sys.executable, "-m", "app", "run", str(goal), "--db", str(db),
                             "--quiet"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 90
        while len(_rows(db)) < 20:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    n = len(_rows(db))
    assert 20 <= n < BUDGET and f"run 1 stopped: {n} evaluations" in out
    status = sqlite3.connect(db).execute("SELECT status FROM runs WHERE id = 1").fetchone()[0]
    assert status == "stopped"
