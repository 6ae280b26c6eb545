"""The headless CLI: run / history / show / export / devices, and one clear line for bad input
with nothing stored lost."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import subprocess
import sys

import pytest
from project_paths import ROOT

from app import __version__
from app.cli import main
from app.store import SCHEMA_VERSION
from app.store.db import Store


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def db_with_run(capsys, tmp_db, small_goal_file):
    rc, out, _ = _run(capsys, "run", small_goal_file, "--db", tmp_db, "--quiet")
    assert rc == 0, out
    return tmp_db


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"kernelswarm {__version__}"


def test_bare_command_prints_help_without_a_gui(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "app.ui.app", None)  # the GUI cannot be imported
    rc, out, _ = _run(capsys)
    assert rc == 0 and "usage: kernelswarm" in out and "run" in out


def test_run_prints_progress_summary_and_writes_a_trace(capsys, tmp_db, small_goal_file, tmp_path):
    trace = tmp_path / "trace.jsonl"
    rc, out, err = _run(capsys, "run", small_goal_file, "--db", tmp_db, "--max-evals", 30,
                        "--seed", 11, "--trace", trace)
    assert rc == 0
    assert "run 1 max_evals: 30 evaluations" in out
    assert "best time:" in out and "configuration: between_method=" in out
    assert "over the first successful evaluation" in out
    for agent in ("explorer", "local", "evolution", "model"):
        assert f"  {agent}" in out
    assert "30/30 evals" in err  # progress on stderr (plain lines when not a terminal)
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    assert events[0]["event"] == "RunStarted" and events[-1]["event"] == "RunFinished"
    assert sum(e["event"] == "Evaluated" for e in events) == 30
    conn = sqlite3.connect(tmp_db)
    assert conn.execute("SELECT seed, status FROM runs").fetchone() == (11, "finished")


def test_quiet_run_has_no_progress(capsys, tmp_db, small_goal_file):
    rc, _, err = _run(capsys, "run", small_goal_file, "--db", tmp_db, "--quiet")
    assert rc == 0 and err == ""


def test_a_repeated_goal_says_which_earlier_run_it_started_from(capsys, db_with_run, small_goal_file):
    rc, out, _ = _run(capsys, "run", small_goal_file, "--db", db_with_run, "--quiet")
    assert rc == 0 and "started from run 1 (their best configurations first" in out, out
    rc, out, _ = _run(capsys, "show", "2", "--db", db_with_run)
    assert rc == 0 and "started from run 1 (" in out, out
    rc, out, _ = _run(capsys, "show", "1", "--db", db_with_run)
    assert rc == 0 and "started from" not in out  # the first run had nothing to start from


def test_history_show_and_export(capsys, db_with_run, tmp_path):
    rc, out, _ = _run(capsys, "history", "--db", db_with_run)
    assert rc == 0 and "pnpoly test" in out and "finished" in out and " 40 " in out
    rc, out, _ = _run(capsys, "show", 1, "--db", db_with_run, "--top", 3)
    assert rc == 0 and "run 1: pnpoly test" in out and out.count(" ms  ") == 3
    for fmt in ("json", "csv", "t4"):
        target = tmp_path / f"run.{fmt}"
        rc, _, err = _run(capsys, "export", 1, "--format", fmt, "-o", target, "--db", db_with_run)
        assert rc == 0 and target.exists() and str(target) in err
    assert len(json.loads((tmp_path / "run.json").read_text())["evaluations"]) == 40
    assert len((tmp_path / "run.csv").read_text().splitlines()) == 41
    assert len(json.loads((tmp_path / "run.t4").read_text())["results"]) == 40
    rc, out, _ = _run(capsys, "export", 1, "--format", "csv", "--db", db_with_run)
    assert rc == 0 and out.startswith("index,run_id,key")


def test_devices_lists_every_backend(capsys):
    rc, out, _ = _run(capsys, "devices")
    assert rc == 0
    assert [line.split()[0] for line in out.splitlines()] == ["replay", "cpu", "cuda"]
    assert out.startswith("replay  yes")


def _goal(tmp_path, body: str):
    path = tmp_path / "bad.toml"
    path.write_text(body)
    return path


PNPOLY = 'name = "x"\nspace = "pnpoly_RTX_3090.json.gz"\n'


@pytest.mark.parametrize("body, message", [
    ('name = "x\n', "malformed TOML"),
    ('name = "x"\nbackend = "cpu"\noperator = "no_such_op"\nshapes = [[64]]\n',
     "operator: unknown operator 'no_such_op'"),
    (PNPOLY + "[constraints]\nrestrictions = [\"__import__('os').system('touch PWNED')\"]\n",
     "only"),
    (PNPOLY + '[constraints]\nrestrictions = ["block_size_x.real > 1"]\n', "Attribute is not allowed"),
    (PNPOLY + '[constraints]\nrestrictions = ["block_size_x <="]\n', "not a valid expression"),
    (PNPOLY + '[stop]\nmax_evals = -3\n', "stop.max_evals"),
    (PNPOLY + '[swarm]\nagents = ["oracle"]\n', "swarm.agents: unknown agent 'oracle'"),
    ('name = "x"\nbackend = "opencl"\n', "backend: unknown backend 'opencl'"),
    ('name = "x"\nspace = "no_such_space.json.gz"\n', "no_such_space.json.gz' not found"),
])
def test_bad_goal_is_one_line_and_stores_nothing(capsys, db_with_run, tmp_path, body, message):
    before = sqlite3.connect(db_with_run).execute(
        "SELECT COUNT(*), (SELECT COUNT(*) FROM evaluations) FROM runs").fetchone()
    rc, _, err = _run(capsys, "run", _goal(tmp_path, body), "--db", db_with_run)
    assert rc == 1
    assert err.count("\n") == 1 and err.startswith("kernelswarm: error: ") and message in err
    assert sqlite3.connect(db_with_run).execute(
        "SELECT COUNT(*), (SELECT COUNT(*) FROM evaluations) FROM runs").fetchone() == before
    assert not (ROOT / "PWNED").exists() and not (tmp_path / "PWNED").exists()


def test_corrupt_and_missing_cache_files_are_named(capsys, tmp_path, tmp_db):
    broken = tmp_path / "broken.json.gz"
    broken.write_bytes(b"\x1f\x8b\x08\x00 definitely not gzip")
    rc, _, err = _run(capsys, "run", _goal(tmp_path, f'name = "x"\nspace = "{broken}"\n'),
                      "--db", tmp_db)
    assert rc == 1 and "broken.json.gz" in err and "corrupt" in err and err.count("\n") == 1
    rc, _, err = _run(capsys, "run", _goal(tmp_path, f'name = "x"\nspace = "{tmp_path}/gone.json"\n'),
                      "--db", tmp_db)
    assert rc == 1 and "gone.json" in err and "does not exist" in err


def test_missing_goal_file_is_named(capsys, tmp_db):
    rc, _, err = _run(capsys, "run", "/no/such/goal.toml", "--db", tmp_db)
    assert rc == 1 and "/no/such/goal.toml" in err and "does not exist" in err


@pytest.mark.parametrize("argv", [["show", "99"], ["export", "99", "--format", "t4"],
                                  ["run", "--resume", "99"]])
def test_unknown_run_id_is_named(capsys, db_with_run, argv):
    rc, _, err = _run(capsys, *argv, "--db", db_with_run)
    assert rc == 1 and "no run 99" in err and err.count("\n") == 1


def test_resume_refuses_another_goal(capsys, db_with_run, tmp_path):
    other = _goal(tmp_path, 'name = "x"\nspace = "gemm_RTX_3090.json.gz"\n')
    rc, _, err = _run(capsys, "run", other, "--resume", 1, "--db", db_with_run)
    assert rc == 1 and "is not the goal of run 1" in err


def test_database_that_is_not_sqlite_is_refused_untouched(capsys, tmp_path, small_goal_file):
    notes = tmp_path / "notes.db"
    notes.write_text("my notes\n" * 100)
    before = _digest(notes)
    for argv in (["run", small_goal_file], ["history"], ["show", "1"]):
        rc, _, err = _run(capsys, *argv, "--db", notes)
        assert rc == 1 and "not a SQLite database" in err and err.count("\n") == 1
    assert _digest(notes) == before


def test_database_with_newer_schema_is_refused_untouched(capsys, db_with_run, small_goal_file):
    conn = sqlite3.connect(db_with_run)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    before = _digest(db_with_run)
    rc, _, err = _run(capsys, "run", small_goal_file, "--db", db_with_run)
    assert rc == 1 and "newer" in err and err.count("\n") == 1
    assert _digest(db_with_run) == before


def test_bad_input_in_a_real_process_has_no_traceback(tmp_path, tmp_db):
    bad = _goal(tmp_path, PNPOLY + '[stop]\nmax_evals = "many"\n')
    proc = subprocess.run([sys.executable, "-m", "app", "run", str(bad), "--db", str(tmp_db)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "Traceback" not in proc.stderr and "stop.max_evals" in proc.stderr


def test_usage_errors_exit_2(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["run", "x.toml", "--max-evals", "0"])
    assert exit_.value.code == 2 and "--max-evals" in capsys.readouterr().err


def test_progress_redraws_in_place_on_a_terminal():
    import io

    from app.cli import Progress
    from app.core.events import Evaluated, RunFinished
    from app.core.types import Evaluation

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    term = Terminal()
    progress = Progress(term, max_evals=4, unit="ms")
    for i in range(1, 5):
        e = Evaluation(key=f"k{i}", config={}, ok=i != 3, value=None if i == 3 else 10.0 / i)
        progress(Evaluated(index=i, evaluation=e, elapsed_s=float(i), best_value=10.0 / i))
    progress(RunFinished(reason="max_evals", evaluations=4, best=None, elapsed_s=4.0))
    text = term.getvalue()
    assert text.startswith("\r[") and text.endswith("\n") and text.count("\n") == 1
    assert text.rstrip().endswith("[" + "#" * Progress.WIDTH + "] 4/4 evals, 1 failed, best 2.5 ms, 4.0 s")


def test_a_notice_is_one_line_on_stderr_with_what_the_user_can_do():
    import io

    from app.cli import Progress
    from app.core.events import Notice

    out = io.StringIO()
    progress = Progress(out, 10, "ms")
    progress(Notice(text="the Ray cluster at h:1 is gone or has no worker left; the run is "
                         "paused until it comes back (nothing committed is lost)",
                    choices=("continue_here",), run_id=7))
    progress(Notice(text="the Ray cluster at h:1 is back; the run goes on", run_id=7))
    first, second = out.getvalue().splitlines()
    assert first.startswith("kernelswarm: the Ray cluster at h:1 is gone")
    assert first.endswith("Ctrl-C stops it, then `kernelswarm run --resume 7 --cluster-fallback "
                          "local` goes on here")
    assert second == "kernelswarm: the Ray cluster at h:1 is back; the run goes on"


@pytest.mark.slow
def test_a_cpu_run_has_one_speedup_and_a_resume_keeps_its_basis(capsys, tmp_db, tmp_path):
    """One speedup per run, stated with its basis, the same at the end of `run`, in the event
    the window ends on and in `show`; the baseline measured at the start stays the run's (the
    end-of-run re-timing is a fact of its own), and a resumed run keeps it rather than rescaling
    every stored row with what it measures now (kept beside it in the record)."""
    import shutil

    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler")
    goal = tmp_path / "cpu.toml"
    goal.write_text('name = "softmax cpu"\nbackend = "cpu"\noperator = "softmax"\n'
                    'shapes = [[64, 256]]\n[stop]\nmax_evals = 2\n'
                    '[swarm]\nagents = ["explorer"]\nworkers = 1\n')
    trace = tmp_path / "trace.jsonl"
    rc, out, err = _run(capsys, "run", goal, "--db", tmp_db, "--quiet", "--trace", trace)
    assert rc == 0, out + err
    line = next(x for x in out.splitlines() if x.strip().startswith("speedup "))
    assert re.search(r"× vs numpy [\d.]+ ms, both re-timed interleaved at the end of the run",
                     line), out
    events = [json.loads(x) for x in trace.read_text().splitlines()]
    started = next(e for e in events if e["event"] == "RunStarted")
    finished = next(e for e in events if e["event"] == "RunFinished")
    assert finished["speedup_basis"] and finished["speedup_basis"] in line
    assert f"{finished['speedup']:.2f}×" in line
    store = Store(tmp_db)
    run_id = store.list_runs()[0]["id"]
    run = store.get_run(run_id)
    assert run["baseline_value"] == pytest.approx(started["baseline_value"])  # not overwritten
    assert run["device"]["final_comparison"]["key"] == run["best_key"]
    rc, shown, _ = _run(capsys, "show", run_id, "--db", tmp_db)
    assert line in shown.splitlines()
    # An earlier session's baseline (stamped: another library, another figure) stays the run's.
    store.set_run_info(run_id, baseline_value=1000.0,
                       device={**run["device"], "baseline": "an-old-library"})
    store.close()
    rc, out, err = _run(capsys, "run", "--resume", run_id, "--max-evals", 3, "--db", tmp_db,
                        "--quiet")
    assert rc == 0, out + err
    with Store(tmp_db) as store:
        run = store.get_run(run_id)
    assert run["baseline_value"] == 1000.0 and run["device"]["baseline"] == "an-old-library"
    again = run["device"]["resumes"][-1]
    assert again["baseline_name"] == "numpy" and 0 < again["baseline_value"] < 1000.0
    # the end-of-run re-timing names the baseline it timed (numpy), not the kept one
    assert run["device"]["final_comparison"]["baseline_name"] == "numpy"
