"""`kernelswarm export RUN --format html`: a self-contained page with units, spread, charts and
the best kernel's source, rendered without Qt; checked in headless Chromium when installed."""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys

import pytest
from project_paths import ROOT, SMALL_SPACE

from app.goal import Goal, StopRules, SwarmSettings
from app.session import RunSession
from app.store import Store


@pytest.fixture
def replay_run(tmp_path):
    db = tmp_path / "h.sqlite"
    goal = Goal(name="pnpoly <report>", space=str(SMALL_SPACE), backend="replay",
                stop=StopRules(max_evals=60),
                swarm=SwarmSettings(agents=["explorer", "local"], workers=1, seed=2))
    with Store(db) as store:
        session = RunSession(goal, store=store)
        session.run()
    return db, session.run_id


def _export(db, run_id, out) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app", "export", str(run_id), "--format", "html",
                           "-o", str(out), "--db", str(db)], capture_output=True, text=True,
                          timeout=120, check=False)


def test_cli_exports_a_readable_report(replay_run, tmp_path):
    db, run_id = replay_run
    out = tmp_path / "report.html"
    proc = _export(db, run_id, out)
    assert proc.returncode == 0, proc.stderr
    page = out.read_text()
    assert "<svg" in page and "aria-label='convergence'" in page and "aria-label='agents'" in page
    assert "pnpoly &lt;report&gt;" in page  # escaped, never raw
    assert "objective (ms)" in page and "GFLOP/s" not in page
    assert "mean recorded by Kernel Tuner" in page  # replay figures are Kernel Tuner's means
    # three or four significant digits: no six-digit figures like 8.71424 ms
    figures = re.findall(r"(\d+\.\d+) ms", page)
    assert figures and all(len(f.replace(".", "").lstrip("0")) <= 4 for f in figures), figures
    assert "Best kernel" in page and "block_size_x" in page  # replay: the configuration


@pytest.mark.slow
def test_a_cpu_run_shows_the_kernel_that_ran(tmp_path):
    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler")
    db = tmp_path / "h.sqlite"
    goal = Goal(name="softmax report", backend="cpu", operator="softmax", shapes=[[64, 256]],
                stop=StopRules(max_evals=3), swarm=SwarmSettings(agents=["explorer"], workers=1))
    with Store(db) as store:
        session = RunSession(goal, store=store)
        session.run()
    out = tmp_path / "cpu.html"
    assert _export(db, session.run_id, out).returncode == 0
    page = out.read_text()
    assert "ks_kernel" in page and "#define THREADS" in page
    # the baseline is named: which library (or compiler) the speedup is over
    with Store(db) as store:
        assert store.get_run(session.run_id)["device"]["baseline"] == "numpy"
    assert re.search(r"<td>baseline</td><td>[^<]* ms \(numpy\) measured at the start of the run",
                     page), page[:3000]
    # the run's one speedup, as `show` and the window give it (app.run_summary)
    from app.run_summary import summarize_store

    with Store(db) as store:
        summary = summarize_store(store, session.run_id)
    assert f"<td>speedup</td><td>{html.escape(summary.speedup_text())}" in page


@pytest.mark.slow
def test_a_custom_kernel_report_shows_its_source_and_no_home_directory(tmp_path):
    """The best kernel is the user's source (with its parameters as -D), not the parameter
    JSON; the goal's paths are relative to the goal file even when the goal named them
    absolutely (as the window's form does), so a shared report shows no home directory."""
    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler")
    home = tmp_path / "home" / "alice" / "kernels"
    shutil.copytree(ROOT / "resources" / "goals" / "custom" / "pnpoly_c", home)
    text = (home / "goal.toml").read_text()
    text = text.replace('source = "pnpoly.c"', f'source = "{home / "pnpoly.c"}"')
    text = text.replace('reference = "reference.py:pnpoly"',
                        f'reference = "{home / "reference.py"}:pnpoly"')
    (home / "goal.toml").write_text(text.replace("max_evals = 20", "max_evals = 1"))
    db = tmp_path / "h.sqlite"
    with Store(db) as store:
        session = RunSession(Goal.load(home / "goal.toml"), store=store)
        session.run()
    (home / "pnpoly.c").write_text("/* edited after the run */\n")  # the report shows what ran
    out = tmp_path / "custom.html"
    assert _export(db, session.run_id, out).returncode == 0
    page = out.read_text()
    assert "int odd[CHUNK]" in html.unescape(re.sub(r"<[^>]+>", "", page))  # the real source
    assert "#define CHUNK" in page and "edited after the run" not in page
    assert "-DCHUNK=" in page  # the compile command
    assert str(tmp_path) not in page and "alice" not in page
    goal_section = html.unescape(page.split("<h2>Goal</h2>")[1])
    assert 'source = "pnpoly.c"' in goal_section
    assert 'reference = "reference.py:pnpoly"' in goal_section


def test_paths_outside_the_goal_folder_keep_only_their_name():
    from app.html_report import portable_goal_toml

    goal = Goal(name="paths", backend="replay", space="/home/alice/spaces/pnpoly.json")
    goal.source_path = "/home/alice/goals/goal.toml"
    assert 'space = "../spaces/pnpoly.json"' in portable_goal_toml(goal)
    goal.source_path = "/tmp/goal.toml"  # nothing shared but the root: the name alone
    assert 'space = "pnpoly.json"' in portable_goal_toml(goal)
    goal.space = "spaces/pnpoly.json"  # relative already: as written
    assert 'space = "spaces/pnpoly.json"' in portable_goal_toml(goal)


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium")
@pytest.mark.slow
def test_report_renders_in_headless_chromium(replay_run, tmp_path):
    db, run_id = replay_run
    out, shot = tmp_path / "report.html", tmp_path / "report.png"
    assert _export(db, run_id, out).returncode == 0
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,1600",
                    f"--screenshot={shot}", out.as_uri()], capture_output=True, timeout=90, check=False)
    from PySide6.QtGui import QImage

    image = QImage(str(shot))
    assert not image.isNull() and image.width() == 1200
    # the light print theme: the page background is white
    assert image.pixelColor(5, 5).lightness() > 245
