"""`kernelswarm export RUN --format html`: a self-contained page with units, spread, charts and
the best kernel's source, rendered without Qt; checked in headless Chromium when installed."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest

from app.goal import Goal, StopRules, SwarmSettings
from app.session import RunSession
from app.store import Store
from project_paths import SMALL_SPACE


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
    assert re.search(r"<td>baseline</td><td>[^<]* ms \(numpy\)</td>", page), page[:3000]


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium")
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
