"""Render KernelSwarm's main views offscreen to PNG during a real replay run.

    .venv/bin/python scripts/screenshots.py [--out screenshots] [--theme light|dark]

Uses a throwaway history database and settings file, so nothing of the user's is touched.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication

from app.goal import Goal, StopRules, SwarmSettings


def wait(app: QApplication, predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        app.processEvents()
        if predicate():
            return True
        time.sleep(0.01)
    return False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="screenshots")
    p.add_argument("--theme", default="light", choices=("light", "dark"))
    p.add_argument("--space", default="gemm_RTX_3090.json.gz")
    p.add_argument("--evals", type=int, default=400)
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    app = QApplication.instance() or QApplication(["kernelswarm-screenshots"])
    from app.ui.main_window import MainWindow
    from app.ui.theme import ThemeManager

    tmp = tempfile.mkdtemp(prefix="kernelswarm-shots-")
    settings = QSettings(str(Path(tmp) / "settings.ini"), QSettings.IniFormat)
    window = MainWindow(db_path=Path(tmp) / "history.sqlite", settings=settings,
                        theme=ThemeManager(app))
    window.interactive = False
    window.set_theme(args.theme)
    window.resize(1680, 1020)
    window.show()

    goal = Goal(name=f"{args.space.split('.')[0].replace('_', ' ')} (replay)", space=args.space,
                stop=StopRules(max_evals=args.evals), swarm=SwarmSettings(workers=2, seed=7),
                target=__import__("app.goal", fromlist=["Target"]).Target("speedup", 4.0))
    window.form.set_goal(goal)
    shots: list[Path] = []

    def shoot(name: str, widget=None) -> None:
        app.processEvents()
        window.live.redraw()
        app.processEvents()
        path = out / f"{name}.png"
        (widget or window).grab().save(str(path))
        shots.append(path)

    shoot("01-goal-form")
    window.run_goal()
    wait(app, lambda: len(window.live.data) >= args.evals // 3, 120)
    shoot("02-live-run")
    wait(app, lambda: window.controller.state == "idle", 300)
    wait(app, lambda: False, 0.5)
    shoot("03-finished-run")
    window.table_dock.raise_()
    shoot("04-candidate-detail", window)
    window.detail.tabs.setCurrentIndex(5)
    shoot("05-timing-histogram", window.detail)
    window.detail.tabs.setCurrentIndex(2)
    shoot("06-diff", window.detail)

    # A second run with another seed, then compare both from the history.
    goal.swarm.seed = 8
    window.form.set_goal(goal)
    window.run_goal()
    wait(app, lambda: window.controller.state == "idle", 300)
    window.history.refresh()
    window.history_dock.raise_()
    runs = sorted(window.history.runs)
    window.history.select_runs(runs[-2:])
    window.compare_runs(runs[-2:])
    shoot("07-compare-history")
    window.open_run(runs[0])
    window.tabs.setCurrentWidget(window.live)
    shoot("08-opened-past-run")
    window.set_theme("dark" if args.theme == "light" else "light")
    shoot("09-other-theme")
    window.close()
    for s in shots:
        print(s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
