"""Play back a stored run in the Run view at a pace a person can follow: the run is opened as
usual (table, candidate, lessons), then its evaluations are drawn again from the first, a few
at a time. Nothing is measured again; the title says it is a playback and at what pace. A replay
of a recorded space finishes in seconds; this is how one watches it converge."""

from __future__ import annotations

from PySide6.QtCore import QTimer

PACES = (5, 20, 100)  # evaluations per second offered in the View menu
TICK_MS = 100


def pace(per_second: float) -> tuple[int, int]:
    """(timer interval in ms, evaluations per tick) for `per_second`: a slow pace ticks less
    often rather than rounding its step up (5/s drew one per 100 ms tick: 10/s)."""
    interval = max(TICK_MS, round(1000 / per_second))
    return interval, max(1, round(per_second * interval / 1000))


class PlaybackMixin:
    """Expects `open_run`, `store`, `live`, `table`, `controller` and `current_goal`."""

    _playback_timer: QTimer | None = None

    def play_back_run(self, run_id: int | None = None, per_second: float = 20.0) -> bool:
        run_id = self.current_run_id if run_id is None else run_id
        if run_id is None or self.controller.running:
            return False
        self.stop_playback()
        self.open_run(run_id)
        live, d = self.live, self.live.data
        rows = self.store().load_evaluations(run_id)
        summary, reason = live.summary_panel.summary, d.finished_reason
        title = live.title.text()
        # the playback first: a narrow window elides the title's end
        live.show_run([], minimize=d.minimize, unit=live.unit,
                      title=f"Playing back at {per_second:g} evaluations/s: {title}",
                      baseline=d.baseline, limit=d.limit, target=d.target, max_evals=d.max_evals,
                      baseline_name=d.baseline_name)
        live.data.time_shares = d.time_shares  # the adversary's row stays (not in the rows)
        live._running = True  # the x axis spans the budget while the points come in
        live._fix_x_range()
        self.table.reset(backend=self.table.backend, minimize=d.minimize, baseline=d.baseline,
                         limit=d.limit, unit=live.unit, param_order=self.table.model.param_order)
        interval, step = pace(per_second)
        state = {"next": 0}

        def tick() -> None:
            chunk = rows[state["next"]:state["next"] + step]
            state["next"] += len(chunk)
            if chunk:
                live.preload(chunk)
                self.table.add(chunk)
                live.data.version += 1
            if state["next"] >= len(rows):
                self.stop_playback()
                self.table.flush()
                live.data.finished_reason = reason
                live.title.setText(title)
                live.show_summary(summary)
                live._running = False
                live._fix_x_range()
                live.data.version += 1  # drawn whole once more: the agent chart is throttled
                live.redraw()           # while running, and the last tick may have been drawn

        timer = self._playback_timer = QTimer(self)
        timer.setInterval(interval)
        timer.timeout.connect(tick)
        timer.start()
        return True

    def stop_playback(self) -> None:
        if self._playback_timer is not None:
            self._playback_timer.stop()
            self._playback_timer.deleteLater()
            self._playback_timer = None

    @property
    def playing_back(self) -> bool:
        return self._playback_timer is not None
