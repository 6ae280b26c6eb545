"""A shared history database with forged figures, through the real CLI.

A colleague's `their.sqlite` holds a run of a real CPU goal whose stored rows say: a wrong
kernel (tests/kernels/off_by_one_transpose.c, right only when both sizes are multiples of its
tile) ran in 0.1 us, ok; a correct configuration ran in 0.2 us (forged: the roof allows
neither); an honest row. A new run warm-started from that history, and `run --resume` of the
planted run, must each re-verify and re-time what they take from it: the wrong kernel fails
verification (its row revoked), the correct one keeps only the figure measured now. The ground
truth is read from outside the tool: the database file with sqlite3 and what `show` prints.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from llm_server import ChatServer, Reply
from test_llm_run import KEY, NO_CODE

from app.core.types import VERIFY_FAILED, Evaluation
from app.goal import Goal, StopRules
from app.llm.normal import normalise
from app.store import Store

needs_cc = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                              reason="needs a C compiler")

ROOT = Path(__file__).resolve().parents[1]
# stored as an LLM run stores it (normalised source, keyed by what runs): a resumed run's warm
# start then knows the key and does not evaluate it again by chance
WRONG = normalise((Path(__file__).parent / "kernels" / "off_by_one_transpose.c").read_text())
FORGED_WRONG_MS, FORGED_RIGHT_MS, HONEST_MS = 1e-4, 2e-4, 5.0
CONFIG = {"TILE": 16, "WRITE_MAJOR": 0, "VEC": 8, "THREADS": 1}
OTHER = {"TILE": 32, "WRITE_MAJOR": 1, "VEC": 8, "THREADS": 1}
UNITS_MS = {"ns": 1e-6, "us": 1e-3, "µs": 1e-3, "ms": 1.0, "s": 1e3}


def _goal() -> Goal:
    goal = Goal(name="history attack transpose", operator="transpose", backend="cpu",
                shapes=[[256, 256]], stop=StopRules(max_evals=4))
    goal.swarm.agents = ["llm"]  # the LLM's warm start takes the stored kernels first
    return goal


def _plant(db: Path, goal: Goal) -> dict[str, str]:
    """The colleague's history, written through the real Store: keys by what they name."""
    from app.gpu.cpu import CpuEvaluator

    ev = CpuEvaluator(goal)  # its keys, as a run keys them (no worker is started)
    keys = {"wrong": ev.candidate_key(CONFIG, WRONG), "right": ev.space.key(CONFIG),
            "honest": ev.space.key(OTHER)}
    rows = [("honest", Evaluation(key=keys["honest"], config=OTHER, ok=True, value=HONEST_MS,
                                  time_ms=HONEST_MS, agent="explorer")),
            ("wrong", Evaluation(key=keys["wrong"], config=CONFIG, ok=True, value=FORGED_WRONG_MS,
                                 time_ms=FORGED_WRONG_MS, agent="llm-memory", source=WRONG)),
            ("right", Evaluation(key=keys["right"], config=CONFIG, ok=True, value=FORGED_RIGHT_MS,
                                 time_ms=FORGED_RIGHT_MS, agent="explorer"))]
    with Store(db) as store:
        run_id = store.create_run(goal, {"kind": "cpu", "name": "their machine", "unit": "ms"})
        best = None
        for i, (_, ev) in enumerate(rows, 1):
            best = min(best or ev.value, ev.value)
            store.record_evaluation(run_id, i, ev, float(i), best)
        store.finish_run(run_id, "interrupted")
    assert run_id == 1
    return keys


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    goal = tmp_path / "goal.toml"
    goal.write_text(_goal().to_toml())
    with ChatServer(default=Reply(NO_CODE), lifetime_s=300) as srv:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "KERNELSWARM_LLM_BASE_URL": srv.base_url,
               "KERNELSWARM_LLM_TIMEOUT_S": "30", "KERNELSWARM_LLM_ROLES": "memory",
               "KERNELSWARM_LLM_API_KEY": KEY}
        argv = [a if a != "GOAL" else str(goal) for a in args]
        proc = subprocess.run([sys.executable, "-m", "app", *argv], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=280, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def _rows(db: Path, run_id: int) -> dict[str, tuple]:
    """key -> (ok, value, reason, detail, source) of the run's own rows."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT e.key, e.ok, e.value, e.reason, e.detail, c.source "
                            "FROM evaluations e JOIN candidates c ON c.id = e.candidate_id "
                            "WHERE e.run_id = ? ORDER BY e.idx", (run_id,)).fetchall()
    return {r[0]: r[1:] for r in rows}


def _shown_best(db: Path, run_id: int, tmp_path: Path) -> tuple[float, str]:
    """(value in ms, key) of the best as `kernelswarm show` prints it."""
    out = _cli(tmp_path, "show", str(run_id), "--db", str(db)).stdout
    value = re.search(r"evaluations \d+ \(\d+ ok\), best ([\d.]+) (\S+)", out)
    assert value, out
    top = re.search(r"top \d+ configurations:\n\s+#(\d+)", out)
    assert top, out
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        (key,) = conn.execute("SELECT key FROM evaluations WHERE run_id = ? AND idx = ?",
                              (run_id, int(top.group(1)))).fetchone()
    return float(value.group(1)) * UNITS_MS[value.group(2)], key


def _stored_best(db: Path, run_id: int) -> tuple[float, str]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute("SELECT value, key FROM evaluations WHERE run_id = ? AND ok = 1 "
                            "ORDER BY value LIMIT 1", (run_id,)).fetchone()


def _assert_measured_here(value: float, key: str, keys: dict[str, str]) -> None:
    # a 256x256 fp32 transpose moves 512 KiB: 0.2 us would be 2.6 TB/s, no CPU's roof
    assert key != keys["wrong"], "the wrong kernel is the run's best"
    assert value > 100 * FORGED_RIGHT_MS, f"the best is a forged figure: {value} ms ({key})"


@pytest.mark.slow
@needs_cc
def test_a_new_run_warm_started_from_a_forged_history_measures_again(tmp_path):
    db = tmp_path / "their.sqlite"
    keys = _plant(db, _goal())
    _cli(tmp_path, "run", "GOAL", "--db", str(db), "--max-evals", "3", "--quiet")
    rows = _rows(db, 2)
    # the warm start proposed the stored kernel; it ran the cascade again and failed it
    wrong = [r for r in rows.values() if r[4] and "r0 + TILE <= rows" in r[4]]
    assert len(wrong) == 1, rows
    ok, value, reason, _, _ = wrong[0]
    assert not ok and value is None and reason == VERIFY_FAILED, wrong
    stored = _stored_best(db, 2)
    _assert_measured_here(*stored, keys)
    shown = _shown_best(db, 2, tmp_path)
    assert shown[1] == stored[1] and shown[0] == pytest.approx(stored[0], rel=0.01)


@pytest.mark.slow
@needs_cc
def test_resuming_a_forged_history_rechecks_its_best_before_it_wins(tmp_path):
    db = tmp_path / "their.sqlite"
    keys = _plant(db, _goal())
    proc = _cli(tmp_path, "run", "--resume", "1", "--db", str(db), "--max-evals", "4",
                "--quiet")
    rows = _rows(db, 1)
    # the wrong kernel: verified again, failed, revoked where everyone reads it (and said so)
    ok, value, reason, detail, _ = rows[keys["wrong"]]
    assert not ok and value is None and reason == VERIFY_FAILED, rows[keys["wrong"]]
    assert "revoked" in detail and "revoked" in proc.stderr
    # the correct configuration fell back into first place: timed again, its figure is now's
    ok, value, _, detail, _ = rows[keys["right"]]
    assert ok and value > 100 * FORGED_RIGHT_MS and "re-checked" in detail, rows[keys["right"]]
    assert len(rows) == 4  # one new evaluation; the stored rows were not added again
    stored = _stored_best(db, 1)
    _assert_measured_here(*stored, keys)
    shown = _shown_best(db, 1, tmp_path)
    assert shown[1] == stored[1] and shown[0] == pytest.approx(stored[0], rel=0.01)


def test_an_honest_resume_rechecks_only_what_would_be_the_best(tmp_path, small_goal_file,
                                                                monkeypatch):
    """Replay backend (recorded figures are the truth): a stored run, two of its rows forged
    in the file, resumed through the real session. Only rows that would be the best are
    evaluated again, once each; nothing else stored is; the summary gives measured figures."""
    from app.core.events import EventBus
    from app.gpu.replay import ReplayEvaluator
    from app.run_summary import summarize_store
    from app.session import RunSession

    goal = Goal.from_toml(small_goal_file.read_text(), source_path=str(small_goal_file))
    goal.stop.max_evals = 30
    db = tmp_path / "h.sqlite"
    with Store(db) as store:
        RunSession(goal, store=store, bus=EventBus()).run()
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT idx, key, ok, value FROM evaluations ORDER BY idx").fetchall()
        ok = sorted((r for r in rows if r[2]), key=lambda r: r[3])
        failed = [r for r in rows if not r[2]]
        assert len(ok) >= 3 and failed, rows
        honest_best, forged_ok, forged_failed = ok[0], ok[-1], failed[0]
        conn.execute("UPDATE evaluations SET value = 1e-6 WHERE idx = ?", (forged_ok[0],))
        conn.execute("UPDATE evaluations SET ok = 1, value = 5e-7, reason = NULL WHERE idx = ?",
                     (forged_failed[0],))
    seen: list[str] = []
    evaluate = ReplayEvaluator.evaluate
    monkeypatch.setattr(ReplayEvaluator, "evaluate",
                        lambda self, c: seen.append(c.key) or evaluate(self, c))
    goal.stop.max_evals = 32
    with Store(db) as store:
        session = RunSession(goal, store=store, bus=EventBus(), resume_run_id=1)
        session.run()
        summary = summarize_store(store, 1)
    stored = {r[1] for r in rows}
    again = [k for k in seen if k in stored]
    # the forged failure first (revoked), the forged row (its recorded figure back), then the
    # honest best only if that figure is worse; every other stored row is never evaluated
    assert again[:2] == [forged_failed[1], forged_ok[1]]
    assert set(again) <= {forged_failed[1], forged_ok[1], honest_best[1]}
    assert len(again) == len(set(again)) and len(seen) - len(again) == 2
    with sqlite3.connect(db) as conn:
        after = {r[0]: r[1:] for r in conn.execute("SELECT key, ok, value, detail FROM evaluations")}
    assert after[forged_failed[1]][:2] == (0, None) and "revoked" in after[forged_failed[1]][2]
    assert after[forged_ok[1]][1] == pytest.approx(forged_ok[3])
    assert summary.best["value"] >= honest_best[3] or summary.best["key"] not in stored
    assert summary.best["value"] > 1e-3
