"""The main window: toolbar, menus, dock panels, status bar; wires the goal form, the run
controller, the live view, candidates, history and exports together."""

from __future__ import annotations

import logging
import time
from pathlib import Path

from PySide6.QtCore import QSettings, Qt, QTimer
from PySide6.QtGui import QAction, QActionGroup, QCloseEvent, QIcon, QKeySequence, QPalette
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QLabel,
    QListWidget,
    QMainWindow,
    QMessageBox,
    QPushButton,
    QSizePolicy,
    QStyle,
    QTabWidget,
)

from app.core.evaluator import DeviceInfo
from app.core.units import objective_unit
from app.goal import Goal, GoalError
from app.paths import resources_dir
from app.run_summary import broken_by
from app.store import StoreError
from app.ui.about import AboutDialog
from app.ui.bridge import EventBridge
from app.ui.candidates import CandidateDetail, CandidateTable, parameter_order, source_language
from app.ui.device_summary import device_text
from app.ui.goal_examples import example_goals, example_name
from app.ui.goal_files import GoalFilesMixin
from app.ui.goal_form import GoalForm
from app.ui.history import ComparePlot, HistoryPanel
from app.ui.history_actions import HistoryActionsMixin
from app.ui.history_file import HistoryFileMixin, initial_history_path
from app.ui.kt_import_dialog import KtImportMixin
from app.ui.live_plots import ElidedLabel
from app.ui.live_view import LiveView
from app.ui.model_searches import ModelSearches
from app.ui.playback import PACES, PlaybackMixin
from app.ui.run_controller import RunController
from app.ui.theme import THEMES, ThemeManager
from app.ui.wheel_guard import install_wheel_guard
from app.ui.window_exports import ExportsMixin
from app.ui.window_state import WindowStateMixin

log = logging.getLogger(__name__)


def app_icon() -> QIcon:
    return QIcon(str(resources_dir() / "icons" / "kernelswarm.svg"))


class MainWindow(HistoryFileMixin, HistoryActionsMixin, GoalFilesMixin, KtImportMixin, ExportsMixin,
                 WindowStateMixin, PlaybackMixin, QMainWindow):
    def __init__(self, db_path: str | Path | None = None, settings: QSettings | None = None,
                 theme: ThemeManager | None = None) -> None:
        super().__init__()
        self.setWindowTitle("KernelSwarm")
        self.setWindowIcon(app_icon())
        self.setObjectName("MainWindow")
        self.settings = settings or QSettings("KernelSwarm", "KernelSwarm")
        self.db_path = initial_history_path(db_path, self.settings)
        self._store = None
        self.theme = theme or ThemeManager(QApplication.instance())
        self.current_run_id: int | None = None
        self.current_goal: Goal | None = None
        self._prepared_device = False  # the current run's backend came up (its device shown)
        self.searches = ModelSearches()  # a goal run once per GPU model of a cluster
        self._shown_once = False  # the first show fits the docks to the window's size
        self._state_restored = False
        self.interactive = True  # tests switch modal questions off
        install_wheel_guard()  # the wheel scrolls; it never changes an unfocused value

        self.bridge = EventBridge(self)
        self.controller = RunController(self.bridge, self.store, self)

        # central: live view and comparison
        self.live = LiveView()
        self.compare = ComparePlot()
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.tabs.addTab(self.live, "Run")
        self.tabs.addTab(self.compare, "Compare runs")
        self.setCentralWidget(self.tabs)

        # docks
        self.form = GoalForm()
        self.history = HistoryPanel(self.store)
        self.table = CandidateTable()
        self.detail = CandidateDetail(self.table.model)
        self.lessons = QListWidget()
        self.lessons.setWordWrap(True)
        self.goal_dock = self._dock("Goal", self.form, Qt.LeftDockWidgetArea)
        self.history_dock = self._dock("History", self.history, Qt.LeftDockWidgetArea)
        self.tabifyDockWidget(self.goal_dock, self.history_dock)
        self.goal_dock.raise_()
        self.table_dock = self._dock("Candidates", self.table, Qt.BottomDockWidgetArea)
        self.detail_dock = self._dock("Candidate", self.detail, Qt.RightDockWidgetArea)
        # Lessons under the candidate detail, not tabified (Qt 6.12 leaves a stale tab bar).
        self.lessons_dock = self._dock("Lessons", self.lessons, Qt.RightDockWidgetArea)
        self.splitDockWidget(self.detail_dock, self.lessons_dock, Qt.Vertical)
        # Side docks of a readable width; the central plots take what is left and shrink first.
        self.resizeDocks([self.goal_dock, self.detail_dock], [370, 390], Qt.Horizontal)
        self.resizeDocks([self.table_dock], [260], Qt.Vertical)
        self.resizeDocks([self.detail_dock, self.lessons_dock], [520, 160], Qt.Vertical)

        self._make_actions()
        self._make_menus()
        self._make_toolbar()
        self._make_status_bar()
        self._wire()
        self._restore_settings()
        self._update_actions()
        QTimer.singleShot(0, self.check_history)  # lists it, or says why it cannot

    # ---- construction -----------------------------------------------------------------------
    def _dock(self, title: str, widget, area) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(f"dock:{title}")  # saveState needs stable names
        dock.setWidget(widget)
        dock.setFeatures(QDockWidget.DockWidgetMovable | QDockWidget.DockWidgetClosable
                         | QDockWidget.DockWidgetFloatable)
        self.addDockWidget(area, dock)
        return dock

    def _action(self, text: str, slot, shortcut=None, icon=None, tip: str = "") -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcuts(shortcut if isinstance(shortcut, list) else [shortcut])
        if icon is not None:
            action.setIcon(self.style().standardIcon(icon))
        keys = ", ".join(s.toString(QKeySequence.NativeText) for s in action.shortcuts())
        action.setToolTip(f"{tip or text.replace('…', '')}" + (f" ({keys})" if keys else ""))
        action.triggered.connect(slot)
        return action

    def _make_actions(self) -> None:
        S = QStyle.StandardPixmap
        self.act_new = self._action("&New goal", self.new_goal, QKeySequence.New, S.SP_FileIcon)
        self.act_open = self._action("&Open goal…", self.open_goal_dialog, QKeySequence.Open,
                                     S.SP_DialogOpenButton)
        self.act_save = self._action("&Save goal", self.save_goal, QKeySequence.Save,
                                     S.SP_DialogSaveButton)
        self.act_save_as = self._action("Save goal &as…", self.save_goal_as, QKeySequence.SaveAs)
        self.act_run = self._action("&Run", self.run_goal, [QKeySequence("Ctrl+R"), QKeySequence("F5")],
                                    S.SP_MediaPlay, "Run the goal")
        self.act_pause = self._action("&Pause", self.toggle_pause, [QKeySequence("Ctrl+P"), QKeySequence("F6")],
                                      S.SP_MediaPause, "Pause or resume the run")
        self.act_pause.setCheckable(True)
        self.act_stop = self._action("S&top", self.stop_run, [QKeySequence("Ctrl+."), QKeySequence("Shift+F5")],
                                     S.SP_MediaStop, "Stop the run (it stays resumable)")
        self.act_export = self._action("&Export report…", self.export_report_dialog,
                                       QKeySequence("Ctrl+E"), S.SP_DialogSaveButton,
                                       "Export an HTML run report")
        self.act_export_source = self._action("Best kernel source…", self.export_source_dialog)
        self.act_export_csv = self._action("Evaluations as CSV…", lambda: self.export_data_dialog("csv"))
        self.act_export_t4 = self._action("T4 results (JSON)…", lambda: self.export_data_dialog("t4"))
        self.act_export_json = self._action("Everything as JSON…", lambda: self.export_data_dialog("json"))
        self.act_export_plot = self._action("Convergence plot image…", self.export_plot_dialog)
        self.act_history_file = self._action("&History file…", self.choose_history_file,
                                             tip="Choose or create the history database")
        self.act_quit = self._action("&Quit", self.close, QKeySequence.Quit)
        self.act_axis = self._action("Plot against &time", self.live.set_use_time, QKeySequence("Ctrl+T"))
        self.act_axis.setCheckable(True)
        self.act_about = self._action("&About KernelSwarm", self.show_about, QKeySequence.HelpContents)
        self.act_log = self._action("Show log file location", self.show_log_location)
        self.act_llm = self._action("&LLM endpoint settings…", self.show_llm_settings,
                                    QKeySequence("Ctrl+,"))

    def _make_menus(self) -> None:
        bar = self.menuBar()
        file = bar.addMenu("&File")
        for a in (self.act_new, self.act_open, self.act_save, self.act_save_as):
            file.addAction(a)
        for text, slot in (("Your &kernel…", self.show_custom_kernel_page),
                           ("&Import Kernel Tuner script…", self.import_kt_dialog)):
            file.addAction(self._action(text, slot))
        self.examples_menu = file.addMenu("Exa&mples")  # shipped goals and your-own-kernel ones
        for path in example_goals():
            a = self.examples_menu.addAction(example_name(path))
            a.setToolTip(str(path))
            a.triggered.connect(lambda _c=False, p=str(path): self.open_goal(p))
        self.recent_menu = file.addMenu("Recent goals")
        file.addSeparator()
        file.addAction(self.act_history_file)
        file.addSeparator()
        export = file.addMenu("E&xport")
        for a in (self.act_export, self.act_export_source, self.act_export_csv, self.act_export_t4,
                  self.act_export_json, self.act_export_plot):
            export.addAction(a)
        file.addSeparator()
        file.addAction(self.act_quit)
        run = bar.addMenu("&Run")
        for a in (self.act_run, self.act_pause, self.act_stop):
            run.addAction(a)
        run.addSeparator()
        run.addAction(self.act_llm)
        view = bar.addMenu("&View")
        view.addAction(self.act_axis)
        theme_menu = view.addMenu("Theme")
        group = QActionGroup(self)
        self.theme_actions = {}
        for mode in THEMES:
            a = QAction(mode.capitalize(), self, checkable=True)
            a.triggered.connect(lambda _c=False, m=mode: self.set_theme(m))
            group.addAction(a)
            theme_menu.addAction(a)
            self.theme_actions[mode] = a
        self.playback_menu = view.addMenu("Play &back the open run")  # a replay at a watchable pace
        for pace in PACES:
            a = self.playback_menu.addAction(f"{pace} evaluations per second")
            a.triggered.connect(lambda _c=False, p=pace: self.play_back_run(per_second=p))
        view.addSeparator()
        for dock in (self.goal_dock, self.history_dock, self.table_dock, self.detail_dock,
                     self.lessons_dock):
            view.addAction(dock.toggleViewAction())
        help_ = bar.addMenu("&Help")
        help_.addAction(self.act_log)
        help_.addAction(self.act_about)

    def _make_toolbar(self) -> None:
        tb = self.toolbar_main = self.addToolBar("Main")
        tb.setObjectName("toolbar:main")
        tb.setToolButtonStyle(Qt.ToolButtonTextBesideIcon)
        for a in (self.act_new, self.act_open):
            tb.addAction(a)
        tb.addSeparator()
        for a in (self.act_run, self.act_pause, self.act_stop):
            tb.addAction(a)
        tb.addSeparator()
        tb.addAction(self.act_export)

    def _make_status_bar(self) -> None:
        self.device_label = ElidedLabel("No device in use")  # a long CPU name never hides the messages
        self.device_label.setSizePolicy(QSizePolicy.Preferred, QSizePolicy.Preferred)  # its ≤400 px
        self.state_label = QLabel("Idle")
        self.db_label = QLabel(f"History: {self.db_path.name}")  # the whole path in the tooltip
        self.db_label.setToolTip(str(self.db_path))
        self.db_label.setForegroundRole(QPalette.PlaceholderText)  # follows the theme
        # shown while a cluster run waits for its cluster to come back (a Notice offers it)
        self.continue_here = QPushButton("Continue on this machine")
        self.continue_here.setObjectName("button:continue-here")
        self.continue_here.setToolTip("The Ray cluster is gone: evaluate the rest of the run on "
                                      "this machine instead of waiting for it")
        self.continue_here.clicked.connect(self._continue_here)
        self.continue_here.hide()
        self.notice_label = QLabel()  # the run's state the user must know (the cluster is gone)
        self.notice_label.setObjectName("label:notice")
        self.notice_label.hide()
        sb = self.statusBar()
        sb.addPermanentWidget(self.notice_label)
        sb.addPermanentWidget(self.continue_here)
        sb.addPermanentWidget(self.state_label)
        sb.addPermanentWidget(self.device_label)
        sb.addPermanentWidget(self.db_label)

    def _on_lesson(self, event) -> None:
        """A lesson that supersedes or retracts an earlier one replaces it in the list."""
        lesson = event.lesson
        old = lesson.evidence.get("supersedes")
        if old:
            for row in range(self.lessons.count() - 1, -1, -1):
                if self.lessons.item(row).text().endswith(f"] {old}"):
                    self.lessons.takeItem(row)
        if lesson.kind != "retracted":
            self.lessons.addItem(f"[{lesson.kind}] {lesson.text}")

    def _wire(self) -> None:
        b = self.bridge
        b.runStarted.connect(self._on_run_started)
        b.modelRunEnded.connect(self._on_model_run_ended)
        b.notice.connect(self._on_notice)
        b.evaluated.connect(self.live.on_evaluated)
        b.evaluated.connect(lambda evs: self.table.add([(e.index, e.evaluation, e.elapsed_s) for e in evs]))
        b.telemetry.connect(self.live.on_telemetry)
        b.lesson.connect(self._on_lesson)
        b.revoked.connect(self._on_revoked)
        b.rechecked.connect(self._on_rechecked)
        b.credit.connect(self.live.on_credit)  # the adversary's share of the run's time
        b.caseFound.connect(lambda ev: self.lessons.addItem(
            f"[case {ev.case_id if ev.case_id is not None else '?'}] kept with the goal: "
            f"{ev.origin}"))
        b.newBest.connect(lambda ev: self.statusBar().showMessage(
            f"New best {ev.evaluation.value:.4g} by {ev.evaluation.agent} at evaluation {ev.index}", 4000))
        b.runFinished.connect(self.live.on_run_finished)
        c = self.controller
        c.prepared.connect(self._on_prepared)
        c.searchesPlanned.connect(self._on_searches_planned)
        c.finished.connect(self._on_finished)
        c.failed.connect(self._on_failed)
        c.stateChanged.connect(self._on_state)
        self.form.validityChanged.connect(lambda _ok: self._update_actions())
        self.form.watch_backend(self.table.follow_form)  # the empty table's columns, before a run
        self.table.selected.connect(self.detail.show_evaluation)
        self.history.openRun.connect(self.open_run)
        self.history.compareRuns.connect(self.compare_runs)
        self.history.resumeRun.connect(self.resume_run)
        self.history.rerunGoal.connect(self.rerun_goal)
        self.history.chooseFile.connect(self.choose_history_file)
        self.live.xAxisChanged.connect(self._axis_changed)
        self.theme.changed.connect(self._theme_changed)

    def set_theme(self, mode: str) -> None:
        self.theme.apply(mode)
        if mode in self.theme_actions:
            self.theme_actions[self.theme.mode].setChecked(True)

    def _theme_changed(self, theme) -> None:
        self.live.apply_theme(theme)
        self.compare.apply_theme(theme)
        self.detail.apply_theme(theme)

    def _axis_changed(self, use_time: bool) -> None:
        self.act_axis.setChecked(use_time)
        self.compare.set_use_time(use_time)

    # ---- running ------------------------------------------------------------------------------
    def _prepare_views(self, goal: Goal, title: str) -> None:
        unit = objective_unit(goal.objective.metric)  # until RunStarted says the run's own
        self.live.reset(minimize=goal.objective.minimize, title=title, unit=unit)
        self.table.reset(backend=goal.backend, minimize=goal.objective.minimize, unit=unit,
                         param_order=parameter_order(goal))
        self.detail.set_run(goal, source_language(goal.backend), started_at=time.time())
        self.lessons.clear()
        self.tabs.setCurrentWidget(self.live)

    def run_goal(self) -> None:
        if self.controller.running:
            return
        try:
            goal = self.form.goal()
        except GoalError as exc:
            self.form.show_error(exc)
            self.goal_dock.raise_()
            return
        self._start(goal, None, f"{goal.name} — starting…")

    def confirm(self, question: str) -> bool:
        """Ask the user a yes/no question (never in tests: `interactive` is off there)."""
        if not self.interactive:
            return False
        answer = QMessageBox.question(self, "KernelSwarm", question,
                                      QMessageBox.Yes | QMessageBox.No, QMessageBox.No)
        return answer == QMessageBox.Yes

    def _start(self, goal: Goal, resume_run_id: int | None, title: str) -> None:
        from app.ui.endpoint_check import goal_endpoint_allowed

        allowed, why = goal_endpoint_allowed(goal, self.confirm)
        if not allowed:  # the API key would go to an endpoint the user did not choose
            self.statusBar().showMessage(why.splitlines()[0], 15000)
            return
        if not self.history_usable():  # nothing could be recorded: say why, stay idle
            self.offer_other_history("Cannot run", "Choose or create another history file, "
                                     "then run again.")
            return
        self.stop_playback()
        try:
            self.current_goal = goal
            self._prepare_views(goal, title)
            if resume_run_id is not None:
                rows = self.store().load_evaluations(resume_run_id)
                self.live.preload(rows)
                self.table.add(rows)
            self.current_run_id = resume_run_id
            self._prepared_device = False
            self.searches.clear()
            self.device_label.setText("Preparing the device…")
            self.device_label.setToolTip("")
        except Exception as exc:  # whatever it was, the run controls stay idle
            log.exception("the run could not start")
            self._on_failed(str(exc) if isinstance(exc, StoreError) else f"{type(exc).__name__}: {exc}")
            return
        self.controller.start(goal, resume_run_id=resume_run_id)  # a failure comes as `failed`

    def toggle_pause(self) -> None:
        if self.controller.state == "running":
            self.controller.pause()
        elif self.controller.state == "paused":
            self.controller.resume()
        self._update_actions()

    def stop_run(self) -> None:
        self.controller.stop()

    def show_device(self, device: DeviceInfo | None) -> None:
        self.device_label.setText(device_text(device))

    def _on_prepared(self, run_id: int, device: DeviceInfo) -> None:
        self.current_run_id = None if run_id < 0 else run_id
        self._prepared_device = True
        self.device_label.setText(device_text(device))
        self.device_label.setToolTip(device.summary())
        self.history.refresh()

    def _on_run_started(self, ev) -> None:
        if self.searches.run_started() and self.current_goal is not None:
            # the next GPU model's run: its own plot and table (the last one's is in History)
            self._prepare_views(self.current_goal, self.searches.title(self.current_goal.name))
            for line in self.searches.lines:
                self.lessons.addItem(f"[per model] {line}")
        self.live.on_run_started(ev)
        run_id = ev.run_id if ev.run_id is not None else self.current_run_id
        run = f"run {run_id}" if run_id else "run"
        name = self.searches.title(ev.goal_name)
        self.setWindowTitle(f"KernelSwarm — {name} ({run})")
        if self.searches.active:
            self.live.title.setText(f"{name}: {self.live.title.text().split(' — ', 1)[-1]}")
        self.table.model.set_references(ev.baseline_value, ev.limit_value, ev.baseline_name or "")
        self.table.model.set_unit(ev.unit)

    def _on_notice(self, event) -> None:
        self.lessons.addItem(f"[notice] {event.text}")
        # not a passing status message (a new best would replace it): the run's state until
        # the next notice or the run's end
        short = event.text if len(event.text) <= 90 else event.text[:89] + "…"
        self.notice_label.setText(short)
        self.notice_label.setToolTip(event.text)
        self.notice_label.setVisible(self.controller.state != "idle")
        self.continue_here.setVisible("continue_here" in event.choices
                                      and self.controller.state != "idle")

    def _continue_here(self) -> None:
        self.continue_here.hide()
        self.controller.continue_here()

    def _on_searches_planned(self, models: list[str]) -> None:
        line = self.searches.plan(models)
        self.lessons.addItem(f"[per model] {line}")
        self.statusBar().showMessage(line, 15000)

    def _on_model_run_ended(self, message) -> None:
        self.table.flush()
        line = self.searches.ended(message, self.table.model.unit)
        self.lessons.addItem(f"[per model] {line}")
        self.statusBar().showMessage(line, 15000)
        self.history.refresh()

    def _on_revoked(self, event) -> None:
        self.live.on_revoked(event.key, event.evaluation.reason or "verification_failed",
                             broken_by(event.evaluation.detail))
        self.table.flush()
        self.table.model.replace(event.evaluation)
        who = "best candidate" if event.was_best else "candidate"
        text = (f"{who} {event.key[:10]} revoked: {event.evaluation.detail}; "
                f"best is now {event.new_best_value:.4g}" if event.new_best_value is not None
                else f"{who} {event.key[:10]} revoked: {event.evaluation.detail}")
        self.lessons.addItem(f"[revoked] {text}")
        self.statusBar().showMessage(text, 30000)

    def _on_rechecked(self, event) -> None:
        """A stored best (a resumed run's history) passed its re-check: the window shows the
        figure measured now, never the stored one."""
        self.live.on_rechecked(event.key, event.evaluation)
        self.table.flush()
        self.table.model.replace(event.evaluation)
        self.statusBar().showMessage(f"stored best {event.key[:10]} {event.evaluation.detail}",
                                     15000)

    def show_llm_settings(self) -> None:
        from app.ui.llm_settings import LLMSettingsDialog

        dialog = LLMSettingsDialog(self)
        if self.interactive:
            dialog.exec()
        else:  # tests drive the dialog themselves
            self.llm_dialog = dialog

    def llm_usage_text(self, run_id: int | None) -> str:
        """Token use and cost of a run's LLM requests ('' when it made none)."""
        if run_id is None or self._store is None:
            return ""
        from app.llm.usage import run_usage

        usage = run_usage(self._store, run_id)  # the open Store: a second one breaks its locks
        if not usage["requests"]:
            return ""
        cost = f", cost {usage['cost']:.4g}" if usage["cost"] else ""
        return (f"LLM: {usage['requests']} requests, {usage['prompt_tokens']:,} prompt + "
                f"{usage['completion_tokens']:,} completion tokens{cost}")

    def _on_finished(self, result) -> None:
        self.table.flush()
        # the run's one summary, from what is stored: the figures a reopened run, `show` and
        # the report give (the live ratio was against the start's baseline)
        summary = self.run_summary(self.controller.run_id)
        self.live.show_summary(summary)
        best = f"best {result.best.value:.4g}" if result.best is not None and result.best.value else "no correct candidate"
        if summary is not None and summary.speedup:
            best += f", {summary.speedup_text()}"
        elif summary is not None and not summary.succeeded and summary.failures:
            best += f": {summary.failure_lines()[0]}"  # why nothing worked, in one line
        usage = self.llm_usage_text(self.controller.run_id)
        self.statusBar().showMessage(f"Run finished ({result.reason.replace('_', ' ')}): "
                                     f"{result.evaluations} evaluations, {best}"
                                     + (f" · {usage}" if usage else ""), 30000)
        if usage:
            self.lessons.addItem(f"[usage] {usage}")
        if self.searches.active:
            self.statusBar().showMessage(self.searches.summary(), 60000)
        self.history.refresh()
        if result.best is not None:
            self.table.select_key(result.best.key)

    def _on_failed(self, message: str) -> None:
        self.live.on_run_finished(type("F", (), {"reason": "error"})())
        if self.controller.run_id is not None and not self.history_problem:
            self.live.show_summary(self.run_summary(self.controller.run_id))
        name = self.current_goal.name if self.current_goal is not None else "Run"
        self.live.title.setText(f"{name} — failed: {message.splitlines()[0] if message else ''}")
        self.live.title.setToolTip(message)
        if not self._prepared_device:  # the backend never came up
            self.device_label.setText("No device in use")
        self.history.refresh()
        self._notify("Run failed", message, QMessageBox.Warning)

    def _on_state(self, state: str) -> None:
        if state == "idle":
            self.continue_here.hide()
            self.notice_label.hide()
        self.state_label.setText({"idle": "Idle", "starting": "Starting…", "running": "Running",
                                  "paused": "Paused", "stopping": "Stopping…"}.get(state, state))
        self.live.set_paused(state == "paused")
        self._update_actions()

    def _update_actions(self) -> None:
        state = self.controller.state
        busy = state != "idle"
        self.act_run.setEnabled(not busy and self.form.is_valid)
        self.act_pause.setEnabled(state in ("running", "paused"))
        self.act_pause.setChecked(state == "paused")
        self.act_stop.setEnabled(state in ("starting", "running", "paused"))
        self.form.setEnabled(not busy)
        has_run = self.current_run_id is not None
        for a in (self.act_export, self.act_export_source, self.act_export_csv, self.act_export_t4,
                  self.act_export_json):
            a.setEnabled(has_run)
        self.history.setEnabled(not busy)
        self.playback_menu.setEnabled(not busy and has_run)

    # ---- misc ---------------------------------------------------------------------------------
    def show_about(self) -> None:
        AboutDialog(self).exec()

    def show_log_location(self) -> None:
        from app.ui.errors import log_file_path

        self._notify("Log file", f"The log is written to:\n{log_file_path()}", QMessageBox.Information)

    def _notify(self, title: str, text: str, icon=QMessageBox.Information) -> None:
        """A message that does not block the event loop (a run keeps drawing behind it)."""
        log.info("%s: %s", title, text)
        self.statusBar().showMessage(f"{title}: {text.splitlines()[0]}", 10000)
        if not self.interactive:
            return
        box = QMessageBox(icon, title, text, QMessageBox.Ok, self)
        box.setAttribute(Qt.WA_DeleteOnClose)
        box.open()

    def closeEvent(self, event: QCloseEvent) -> None:
        if self.controller.running and self.interactive and not self.confirm(
                "A run is in progress. Stop it and quit?\n\nThe run is kept in the history "
                "and can be resumed from there."):
            event.ignore()  # Ctrl+Q mid-run asks first
            return
        if self.controller.running:
            # Stop cleanly: the run records 'stopped' and stays resumable from the history.
            self.statusBar().showMessage("Stopping the run before closing…")
            if not self.controller.stop_and_wait(timeout_s=30.0):
                log.warning("the run did not stop within 30 s; closing anyway")
        self.save_settings()
        if self._store is not None:
            self._store.close()
            self._store = None
        event.accept()
