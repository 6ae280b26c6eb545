"""Event-loop responsiveness of the live view under load.

A real replay run (recorded GEMM space, real coordinator and agents, real SQLite store) streams
evaluations into the main window while 50,000 candidate points are on screen (the first ones
preloaded from the same recorded space, the rest streamed). A 10 ms precise timer measures how
late the event loop serves it (lag = actual interval - 10 ms); RSS is sampled to show memory
staying flat while the window redraws at 25 Hz.

    .venv/bin/python bench/ui_responsiveness.py [--points 50000] [--evals 6000] [--no-store]

Last line: `p99 event-loop lag X ms at N evals/s, M points`.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from PySide6.QtCore import QSettings, Qt, QTimer
from PySide6.QtWidgets import QApplication

SPACE = "gemm_RTX_3090.json.gz"
TICK_MS = 10


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def preload_rows(n: int, start_index: int = 1):
    """n evaluations drawn from the recorded space (real recorded measurements)."""
    from app.core.types import Candidate
    from app.goal import Goal
    from app.gpu.replay import ReplayEvaluator, load_cache_file

    ev = ReplayEvaluator(load_cache_file(Goal(space=SPACE).resolve_space_path()))
    rng = random.Random(0)
    agents = ["explorer", "local", "evolution", "model"]
    rows, t = [], 0.0
    for i in range(n):
        cfg = ev.space.sample(rng)
        e = ev.evaluate(Candidate(config=cfg, key=f"pre{i}", agent=agents[i % 4]))
        t += e.sim_seconds
        rows.append((start_index + i, e, t))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--points", type=int, default=50_000, help="candidate points on screen at the end")
    p.add_argument("--evals", type=int, default=6000, help="evaluations streamed by the live run")
    p.add_argument("--no-store", action="store_true", help="run without the SQLite store")
    args = p.parse_args(argv)

    from app.ui.app import GUI_SWITCH_INTERVAL_S

    sys.setswitchinterval(GUI_SWITCH_INTERVAL_S)  # as run_gui does
    app = QApplication.instance() or QApplication(["bench"])
    from app.goal import Goal, StopRules, SwarmSettings
    from app.ui.main_window import MainWindow

    tmp = Path(tempfile.mkdtemp(prefix="ks-bench-ui-"))
    window = MainWindow(db_path=tmp / "history.sqlite",
                        settings=QSettings(str(tmp / "s.ini"), QSettings.IniFormat))
    window.interactive = False
    window.resize(1600, 1000)
    window.show()
    if args.no_store:
        window.controller._store_factory = lambda: None

    goal = Goal(name="gemm bench", space=SPACE, stop=StopRules(max_evals=args.evals),
                swarm=SwarmSettings(agents=["local", "evolution"], workers=2, seed=1))
    window.form.set_goal(goal)
    window._prepare_views(goal, "bench")
    n_pre = max(0, args.points - args.evals)
    t0 = time.perf_counter()
    rows = preload_rows(n_pre)
    window.live.preload(rows)
    window.table.add(rows)
    app.processEvents()
    window.table.flush()
    window.live.redraw()
    app.processEvents()
    print(f"preloaded {n_pre:,} points in {time.perf_counter() - t0:.1f} s", flush=True)

    lags: list[float] = []
    last = [time.perf_counter()]
    measuring = [False]

    def tick() -> None:
        now = time.perf_counter()
        if measuring[0]:
            lags.append(max(0.0, (now - last[0]) * 1000 - TICK_MS))
        last[0] = now

    timer = QTimer()
    timer.setTimerType(Qt.PreciseTimer)
    timer.setInterval(TICK_MS)
    timer.timeout.connect(tick)
    timer.start()

    done: list[object] = []
    window.controller.finished.connect(done.append)
    window.controller.failed.connect(done.append)
    # the live run appends after the preloaded points: keep them by not resetting the views
    window.controller.start(goal)
    while window.controller.state != "running" and not done:
        app.processEvents()
    first_eval = [None]
    rss = []
    start_len = len(window.live.data)
    frames0 = window.live.frames
    measuring[0] = True
    t_start = time.perf_counter()
    next_rss = t_start
    while not done:
        app.processEvents()
        now = time.perf_counter()
        if first_eval[0] is None and len(window.live.data) > start_len:
            first_eval[0] = now
        if now >= next_rss:
            rss.append(rss_mb())
            next_rss = now + 0.5
        time.sleep(0.001)
    measuring[0] = False
    t_end = time.perf_counter()
    app.processEvents()
    window.live.redraw()
    streamed = len(window.live.data) - start_len
    elapsed = t_end - (first_eval[0] or t_start)
    rate = streamed / elapsed if elapsed > 0 else 0.0
    points = int(np.count_nonzero(~np.isnan(window.live.data.value.view())))
    frames = window.live.frames - frames0
    lag = np.array(lags) if lags else np.zeros(1)
    if not isinstance(done[0], object) or isinstance(done[0], str):
        print(f"run failed: {done[0]}")
        return 1
    half = len(rss) // 2
    print(f"streamed {streamed:,} evaluations in {elapsed:.1f} s ({rate:.0f}/s), "
          f"{frames} redraws ({frames / elapsed:.1f}/s), store={'off' if args.no_store else 'on'}")
    print(f"event-loop lag: median {np.median(lag):.1f} ms, p95 {np.percentile(lag, 95):.1f} ms, "
          f"p99 {np.percentile(lag, 99):.1f} ms, max {lag.max():.1f} ms over {len(lags)} ticks")
    if rss:
        print(f"RSS: {rss[0]:.0f} MB at start, {max(rss[:half] or rss):.0f} MB peak in first half, "
              f"{max(rss[half:] or rss):.0f} MB peak in second half, {rss[-1]:.0f} MB at end")
    print(f"{len(window.live.data):,} candidates in the view, {points:,} correct points drawn, "
          f"{window.table.model.rowCount():,} table rows")
    window.close()
    print(f"p99 event-loop lag {np.percentile(lag, 99):.1f} ms at {rate:.0f} evals/s, {points:,} points")
    return 0


if __name__ == "__main__":
    sys.exit(main())
