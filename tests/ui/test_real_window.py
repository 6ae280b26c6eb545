"""The real window on a real X server (Xvfb), not the offscreen platform: a replay goal and a
CPU goal run from the form to the end, and the screen is captured after each step."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest
from project_paths import ROOT
from PySide6.QtGui import QImage

pytestmark = pytest.mark.skipif(shutil.which("Xvfb") is None,
                                reason="needs Xvfb (apt-get install xvfb; .ci/run installs it)")


@pytest.fixture
def x_display():
    """A private Xvfb server; its display name."""
    for number in range(90, 120):
        if not os.path.exists(f"/tmp/.X11-unix/X{number}") and not os.path.exists(f"/tmp/.X{number}-lock"):
            break
    display = f":{number}"
    server = subprocess.Popen(["Xvfb", display, "-screen", "0", "1920x1200x24", "-nolisten", "tcp"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while not os.path.exists(f"/tmp/.X11-unix/X{number}") and time.monotonic() < deadline:
        time.sleep(0.05)
    yield display
    server.terminate()
    server.wait(10)


def _not_blank(path: str) -> bool:
    image = QImage(path)
    if image.isNull():
        return False
    pixels = np.array([image.pixel(x, y) for x in range(0, image.width(), 37)
                       for y in range(0, image.height(), 37)])
    return len(np.unique(pixels)) > 20  # a real window has text, lines and colours


@pytest.mark.slow
def test_replay_and_cpu_goals_run_in_the_real_window(x_display, tmp_path):
    env = {**os.environ, "DISPLAY": x_display, "QT_QPA_PLATFORM": "xcb"}
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "real_window.py"),
                           "--out", str(tmp_path), "--size", "1600x1000"],
                          check=False, env=env, capture_output=True, text=True, timeout=280)
    assert proc.stdout.strip(), proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["platform"] == "xcb"
    assert report["gc_automatic"] is False  # collected on the GUI thread (app.ui.gui_gc)
    for run in report["runs"]:
        assert run["error"] is None, run
        assert run["evaluations"] > 0, run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(report["shots"]) == 4
    for shot in report["shots"]:
        assert _not_blank(shot), shot
