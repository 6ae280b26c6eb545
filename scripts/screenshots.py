"""Render every view and dock of KernelSwarm to PNG, at each screen size, during real runs.

    .venv/bin/python scripts/screenshots.py [--out screenshots] [--size 1366x768 --size 1920x1080]
                                            [--theme light|dark] [--evals N] [--no-cpu]

For each size (default: 1366×768 and 1920×1080) a window of that size runs a recorded-space
goal from the form, then shows the candidate dock's tabs, the lessons, the history, a
comparison of two runs, a CPU run (measured headless in this process, then opened from the
history, so its Source tab shows the C code that ran) and the other theme. Images go to
OUT/WxH/NN-name.png. Offscreen by default (set QT_QPA_PLATFORM=xcb to draw on an X display).
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

from app.goal import Goal, StopRules, SwarmSettings, Target

SIZES = ("1366x768", "1920x1080")


def wait(app: QApplication, predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        app.processEvents()
        if predicate():
            return True
        time.sleep(0.01)
    return False


def parse_size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not WIDTHxHEIGHT, e.g. 1366x768") from None
    return w, h


def shoot_size(app: QApplication, out: Path, size: tuple[int, int], args) -> list[Path]:
    from app.session import RunSession
    from app.ui.main_window import MainWindow
    from app.ui.theme import ThemeManager

    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="kernelswarm-shots-"))
    settings = QSettings(str(tmp / "settings.ini"), QSettings.IniFormat)
    window = MainWindow(db_path=tmp / "history.sqlite", settings=settings, theme=ThemeManager(app))
    window.interactive = False
    window.set_theme(args.theme)
    window.resize(*size)
    window.show()
    shots: list[Path] = []

    def shoot(name: str, widget=None) -> None:
        wait(app, lambda: False, 0.2)
        window.live.redraw()
        app.processEvents()
        path = out / f"{len(shots) + 1:02d}-{name}.png"
        (widget or window).grab().save(str(path))
        shots.append(path)

    goal = Goal(name=f"{args.space.split('.')[0].replace('_', ' ')} (replay)", space=args.space,
                stop=StopRules(max_evals=args.evals), swarm=SwarmSettings(workers=2, seed=7),
                target=Target("speedup", 4.0))
    window.form.set_goal(goal)
    window.goal_dock.raise_()
    shoot("goal-form")
    window.form.example.showPopup()  # the examples, marked with what this machine can run
    shoot("goal-examples", window.form.example.view().window())
    window.form.example.hidePopup()
    window.form.scroll.verticalScrollBar().setValue(window.form.scroll.verticalScrollBar().maximum())
    shoot("goal-form-bottom", window.goal_dock)
    window.form.scroll.verticalScrollBar().setValue(0)
    window.run_goal()
    wait(app, lambda: len(window.live.data) >= args.evals // 3, 120)
    shoot("live-run")
    wait(app, lambda: window.controller.state == "idle", 300)
    shoot("finished-run")
    shoot("candidates-table", window.table_dock)
    tabs = window.detail.tabs
    for i, name in enumerate(("summary", "source", "diff", "compile-log", "verification", "timing")):
        tabs.setCurrentIndex(i)
        shoot(f"candidate-{name}", window.detail_dock)
    tabs.setCurrentIndex(0)
    shoot("lessons", window.lessons_dock)

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
    shoot("compare-history")
    shoot("history", window.history_dock)
    window.open_run(runs[0])
    window.tabs.setCurrentWidget(window.live)
    shoot("opened-past-run")

    if args.cpu:  # a real CPU run (C compiled here), opened from the history
        cpu = Goal.load(Path(__file__).resolve().parent.parent / "resources/goals/cpu_softmax.toml")
        cpu.shapes = [[512, 1024]]
        cpu.name = "softmax fp32 512x1024 (cpu)"
        cpu.stop = StopRules(max_evals=args.cpu_evals, time_budget_s=120.0)
        session = RunSession(cpu, store=window.store())
        session.run()
        window.history.refresh()
        window.open_run(session.run_id)
        window.table.flush()
        if window.table.model.best is not None:
            window.table.select_key(window.table.model.best.key)
        shoot("cpu-run")
        for i, name in ((1, "source"), (3, "compile-log"), (5, "timing")):
            tabs.setCurrentIndex(i)
            shoot(f"cpu-candidate-{name}", window.detail_dock)
        tabs.setCurrentIndex(0)

    window.set_theme("dark" if args.theme == "light" else "light")
    window.open_run(runs[0])
    window.table.flush()
    window.table.select_key(window.table.model.rows[0][1].key)
    shoot("other-theme")
    window.set_theme(args.theme)
    window.close()
    return shots


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="screenshots")
    p.add_argument("--size", action="append", type=parse_size,
                   help=f"window size WxH (repeatable; default {' and '.join(SIZES)})")
    p.add_argument("--theme", default="light", choices=("light", "dark"))
    p.add_argument("--space", default="gemm_RTX_3090.json.gz")
    p.add_argument("--evals", type=int, default=300)
    p.add_argument("--no-cpu", dest="cpu", action="store_false", help="skip the CPU run")
    p.add_argument("--cpu-evals", type=int, default=8)
    args = p.parse_args(argv)
    sizes = args.size or [parse_size(s) for s in SIZES]

    app = QApplication.instance() or QApplication(["kernelswarm-screenshots"])
    for size in sizes:
        for path in shoot_size(app, Path(args.out) / f"{size[0]}x{size[1]}", size, args):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
