"""Screenshots of KernelSwarm during a CPU run of your own C kernel, at each screen size.

    xvfb-run -a -s "-screen 0 1366x768x24" .venv/bin/python scripts/screenshots.py --size 1366x768
    xvfb-run -a -s "-screen 0 1920x1080x24" .venv/bin/python scripts/screenshots.py --size 1920x1080

The new user's path: the "Your kernel…" page filled with a C example (pnpoly or conv2d) (arguments from
its signature, the TOML preview, one configuration compiled), "Use in the window", the run from
the window (a real CPU run: compiled here, measured in the sandboxed worker), then every dock
(Goal, History, Candidates, Candidate with each tab, Timing included, Lessons) while it runs and
after it ends, the HTML report exported, the run played back. Images go to OUT/WxH/NN-name.png. On an X display (Xvfb) the real xcb platform
draws them; without DISPLAY it falls back to offscreen. Uses a throwaway history database and
settings file, so nothing of the user's is touched.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(ROOT))

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QApplication

SIZES = ("1366x768", "1920x1080")
TABS = ("summary", "source", "diff", "compile-log", "checks", "timing")


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


EXAMPLES = {  # what a user types for each example: dims, sizes, tunables, argument rows
    "conv2d": ("conv2d_c", "conv2d.c", "w, h", "{n}, {n}",
               (("TILE_X", "[8, 16, 32, 64]"), ("TILE_Y", "[1, 2, 4, 8]"), ("THREADS", "[1, 2]"),
                ("FW", "[7]"), ("FH", "[7]")),
               {0: ("h, w", None), 1: ("h + 6, w + 6", "uniform"), 2: ("7, 7", "uniform")}),
    "pnpoly": ("pnpoly_c", "pnpoly.c", "n, nv", "{n}, 40",
               (("CHUNK", "[1, 4, 8, 16, 32, 64]"), ("ORDER", "[0, 1]"), ("THREADS", "[1, 2]")),
               {0: ("n", None), 1: ("n, 2", "uniform"), 2: ("nv, 2", "uniform")}),
}


def fill_page(page, kernel: str, size: int, evals: int) -> None:
    """An example typed as a user would: source, sizes, tunables, then the arguments the page
    offered from the signature given their shapes and fills."""
    folder, source, dims, shapes, params, rows = EXAMPLES[kernel]
    here = ROOT / "resources" / "goals" / "custom" / folder
    page.name.setText(f"{kernel} (my C kernel)")
    page.dims.setText(dims)
    page.set_source(str(here / source))
    page.shapes.setText(shapes.format(n=size))
    page.max_evals.setValue(evals)
    for name, values in params:
        page.add_param(name, values)
    for row, (shape, fill) in rows.items():
        page.args.item(row, 3).setText(shape)
        if fill:
            page.args.cellWidget(row, 4).setCurrentText(fill)
    page.set_reference(str(here / "reference.py"))


def shoot_size(app: QApplication, out: Path, size: tuple[int, int], args) -> list[Path]:
    from app.ui.goal_files import open_custom_kernel_page
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
    wait(app, lambda: False, 0.5)
    shots: list[Path] = []

    def shoot(name: str, widget=None) -> None:
        wait(app, lambda: False, 0.3)
        window.live.redraw()
        app.processEvents()
        path = out / f"{len(shots) + 1:02d}-{name}.png"
        (widget or window).grab().save(str(path))
        shots.append(path)

    window.goal_dock.raise_()
    shoot("start")
    page = open_custom_kernel_page(window)
    fill_page(page, args.kernel, args.shape, args.evals)
    page.refresh_toml_preview()
    shoot("your-kernel-page", page)
    done = []
    page.preview_done.connect(lambda ok, text: done.append(ok))
    if page.compile_preview():
        wait(app, lambda: bool(done), 120)
    shoot("your-kernel-compiled", page)
    if page.use_goal() is None:
        print(f"the page's goal is wrong: {page.problem.text()}", file=sys.stderr)
        return shots
    window.form.workers.setValue(2)
    shoot("goal-form")
    window.form.scroll.verticalScrollBar().setValue(window.form.scroll.verticalScrollBar().maximum())
    shoot("goal-form-bottom", window.goal_dock)
    window.form.scroll.verticalScrollBar().setValue(0)

    started = time.monotonic()
    window.run_goal()
    wait(app, lambda: len(window.live.data) >= max(3, args.evals // 3), 300)
    window.table.flush()
    shoot("live-run")
    window.toggle_pause()
    wait(app, lambda: window.controller.state == "paused", 30)
    shoot("paused")
    window.toggle_pause()
    wait(app, lambda: window.controller.state == "idle", 900)
    print(f"{size[0]}x{size[1]}: the run took {time.monotonic() - started:.1f} s "
          f"for {len(window.live.data)} evaluations", file=sys.stderr)
    window.table.flush()
    model = window.table.model
    best = model.best or (model.rows[0][1] if model.rows else None)
    if best is not None:  # the best, else the first candidate: the tabs show one
        window.table.select_key(best.key)
    shoot("finished-run")
    shoot("candidates-dock", window.table_dock)
    tabs = window.detail.tabs
    for i, name in enumerate(TABS[: tabs.count()]):
        tabs.setCurrentIndex(i)
        shoot(f"candidate-{name}", window.detail_dock)
    window.detail_dock.raise_()
    tabs.setCurrentIndex(len(TABS) - 1)
    shoot("timing-in-window")
    tabs.setCurrentIndex(0)
    shoot("lessons-dock", window.lessons_dock)
    report = window.export_report(out / "report.html")  # the path ends with the exported report
    print(f"report: {report} ({report.stat().st_size} bytes)", file=sys.stderr)
    window.history.refresh()
    window.history_dock.raise_()
    shoot("history-dock", window.history_dock)
    window.open_run(window.current_run_id)
    window.tabs.setCurrentWidget(window.live)
    shoot("reopened-run")
    total = len(window.live.data)
    if window.play_back_run(per_second=5):  # View > Play back the open run, caught halfway
        wait(app, lambda: len(window.live.data) >= max(2, total // 2), 30)  # (at 20/s a short
        shoot("playback")  # run had ended before the shot: it showed the finished run)
        wait(app, lambda: not window.playing_back, 60)
    window.set_theme("dark" if args.theme == "light" else "light")
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
    p.add_argument("--evals", type=int, default=12, help="evaluations of the CPU run")
    p.add_argument("--kernel", default="pnpoly", choices=sorted(EXAMPLES),
                   help="which of the your-own-kernel C examples the page is filled with")
    p.add_argument("--shape", type=int, default=20000,
                   help="the problem size (pnpoly: points; conv2d: the image's side)")
    args = p.parse_args(argv)
    sizes = args.size or [parse_size(s) for s in SIZES]

    app = QApplication.instance() or QApplication(["kernelswarm-screenshots"])
    print(f"platform: {app.platformName()}", file=sys.stderr)
    for size in sizes:
        for path in shoot_size(app, Path(args.out) / f"{size[0]}x{size[1]}", size, args):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
