"""Drive the real desktop window on a real X display (Xvfb in tests): run a replay goal and a
CPU goal from the form by clicking Run, and capture the screen after each step.

    DISPLAY=:99 QT_QPA_PLATFORM=xcb .venv/bin/python scripts/real_window.py --out DIR

Screenshots are taken from the X server (QScreen.grabWindow), not rendered by the widgets, so
they show what a person would see. Prints one JSON line with what happened; exit 0 when both
runs finished with evaluations. Uses a throwaway database and settings file.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="real-window")
    p.add_argument("--size", default="1600x1000", help="window size WxH")
    p.add_argument("--timeout", type=float, default=240.0, help="seconds per run")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    width, height = (int(v) for v in args.size.split("x"))

    from PySide6.QtCore import QSettings, Qt
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication

    from app.goal import Goal, StopRules, SwarmSettings

    app = QApplication.instance() or QApplication(["kernelswarm-real-window"])
    if app.platformName() != "xcb":
        print(json.dumps({"error": f"needs the xcb platform, got {app.platformName()}"}))
        return 2
    from app.ui.app import configure_application
    from app.ui.main_window import MainWindow

    configure_application(app)  # as the application does
    tmp = Path(tempfile.mkdtemp(prefix="kernelswarm-real-window-"))
    settings = QSettings(str(tmp / "settings.ini"), QSettings.IniFormat)
    window = MainWindow(db_path=tmp / "history.sqlite", settings=settings)
    window.interactive = False
    window.resize(width, height)
    window.show()
    report: dict = {"platform": app.platformName(), "shots": [], "runs": [],
                    "gc_automatic": gc.isenabled()}

    def pump(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            app.processEvents()
            time.sleep(0.01)

    def shoot(name: str) -> None:
        pump(0.3)
        window.live.redraw()
        pump(0.2)
        path = out / f"{name}.png"
        app.primaryScreen().grabWindow(0).save(str(path))  # the X server's pixels
        report["shots"].append(str(path))

    def run_from_form(label: str, goal: Goal) -> None:
        window.form.set_goal(goal)
        pump(0.2)
        shoot(f"{label}-1-form")
        button = window.toolbar_main.widgetForAction(window.act_run)
        QTest.mouseClick(button, Qt.LeftButton)
        done = {"result": None, "error": None}
        window.controller.finished.connect(lambda r: done.__setitem__("result", r))
        window.controller.failed.connect(lambda m: done.__setitem__("error", m))
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline and done["result"] is None and done["error"] is None:
            pump(0.05)
        pump(0.5)
        result = done["result"]
        report["runs"].append({
            "goal": goal.name, "error": done["error"],
            "evaluations": getattr(result, "evaluations", 0),
            "best": getattr(getattr(result, "best", None), "value", None),
            "title": window.live.title.text() if hasattr(window.live, "title") else "",
            "window_width": window.width()})
        shoot(f"{label}-2-finished")

    run_from_form("replay", Goal(
        name="pnpoly on RTX 3090 (replay, real window)", space="pnpoly_RTX_3090.json.gz",
        backend="replay", stop=StopRules(max_evals=60),
        swarm=SwarmSettings(agents=["explorer", "local", "evolution"], workers=1, seed=5)))
    run_from_form("cpu", Goal(
        name="cpu softmax (real window)", backend="cpu", operator="softmax",
        shapes=[[64, 256]], stop=StopRules(max_evals=4),
        swarm=SwarmSettings(agents=["explorer"], workers=1, seed=5)))
    window.close()
    pump(0.5)
    print(json.dumps(report))
    ok = all(r["error"] is None and r["evaluations"] > 0 for r in report["runs"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
