"""Runs from the history in the window: open one (its plot, table, lessons and the run's
summary), compare several, resume one, run a goal again."""

from __future__ import annotations

import logging

from PySide6.QtWidgets import QMessageBox

from app.core.evaluator import DeviceInfo
from app.core.units import run_unit
from app.swarm.lessons import current_lessons
from app.ui.candidates import parameter_order, source_language

log = logging.getLogger(__name__)


class HistoryActionsMixin:
    """Expects the window's store(), controller, live, table, detail, lessons, compare, tabs,
    form, device_label and _start/_notify/_update_actions."""

    def run_summary(self, run_id: int | None):
        """The stored run's one summary (app.run_summary), as `show` and the report give it;
        None when it cannot be read (the rest of the window still shows the run)."""
        if run_id is None:
            return None
        from app.run_summary import summarize_store

        try:
            return summarize_store(self.store(), run_id)
        except Exception:  # a summary that fails must not take the run's other views with it
            log.exception("no summary for run %s", run_id)
            return None

    def open_run(self, run_id: int) -> None:
        self.stop_playback()  # another run replaces one being played back
        if self.controller.running:
            self._notify("Open run", "Stop the current run first.", QMessageBox.Information)
            return
        from app.session import target_value

        store = self.store()
        run = store.get_run(run_id)
        goal = store.goal_of_run(run_id)
        rows = store.load_evaluations(run_id)
        baseline, limit = run.get("baseline_value"), run.get("limit_value")
        unit = run_unit(run, goal.objective.metric)
        self.current_run_id = run_id
        self.current_goal = goal
        self.live.show_run(rows, minimize=bool(run["minimize"]), unit=unit,
                           title=f"{run['name']} — run {run_id} ({run['status']})",
                           baseline=baseline, limit=limit,
                           target=target_value(goal, baseline, limit),
                           max_evals=goal.stop.max_evals, reason=run.get("reason") or run["status"],
                           baseline_name=(run.get("device") or {}).get("baseline", ""),
                           summary=self.run_summary(run_id), credits=run.get("credits"))
        self.table.reset(backend=goal.backend, minimize=bool(run["minimize"]), baseline=baseline,
                         limit=limit, unit=unit, param_order=parameter_order(goal))
        self.table.model.set_references(baseline, limit, (run.get("device") or {}).get("baseline", ""))
        # not the last run's candidate; your kernel as the run kept it (what ran)
        self.detail.set_run(goal, source_language(goal.backend), started_at=run.get("started_at"),
                            kept_source=(run.get("device") or {}).get("kernel_source"))
        self.table.add(rows)
        self.table.flush()
        self.lessons.clear()
        for lesson in current_lessons(store.lessons(run_id=run_id)):
            self.lessons.addItem(f"[{lesson['kind']}] {lesson['text']}")
        device = run.get("device") or {}
        self.show_device(DeviceInfo(kind=device.get("kind", ""), name=device.get("name", "unknown")))
        self.tabs.setCurrentWidget(self.live)
        self.statusBar().clearMessage()  # the last run's "Run finished …" is not this run's
        self.setWindowTitle(f"KernelSwarm — {run['name']} (run {run_id})")
        self._update_actions()

    def compare_runs(self, run_ids: list[int]) -> None:
        store = self.store()
        series, units = [], set()
        for rid in run_ids:
            run = store.get_run(rid)
            units.add(run_unit(run, store.goal_of_run(rid).objective.metric))
            series.append((rid, f"run {rid}: {run['name']} (seed {run.get('seed')})",
                           store.convergence(rid)))
        self.compare.set_runs(series, unit=units.pop() if len(units) == 1 else "")
        self.tabs.setCurrentWidget(self.compare)

    def resume_run(self, run_id: int) -> None:
        if self.controller.running:
            return
        goal = self.store().goal_of_run(run_id)
        self._start(goal, run_id, f"{goal.name} — resuming run {run_id}…")

    def rerun_goal(self, run_id: int) -> None:
        if self.controller.running:
            return
        goal = self.store().goal_of_run(run_id)
        self.form.set_goal(goal)
        self._start(goal, None, f"{goal.name} — starting…")
