"""The goal form: every field of a Goal as point-and-click widgets, validated as you type.

The form never keeps its own idea of validity: it builds a Goal from the widgets and asks
app.session.check_goal() (the same check a run makes: the goal's fields, then the backend,
operator, agent and LLM registries), then shows GoalError.problem beside GoalError.field.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import re
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QScrollArea,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.goal import (
    DTYPES,
    OBJECTIVES,
    TARGET_KINDS,
    Goal,
    GoalError,
    SwarmSettings,
)
from app.gpu.registry import backend_names, backend_spec, backends
from app.session.registries import wire
from app.ui.form_fields import ShapeEditor, optional_float, optional_int
from app.ui.goal_examples import (  # noqa: F401 - re-exported: tests and the window import them here
    NEEDS,
    SPACE_SUFFIXES,
    backend_usable,
    example_goals,
    example_name,
    example_status,
    recorded_spaces,
)
from app.ui.goal_form_spins import NONE_VALUE, float_spin, int_spin

log = logging.getLogger(__name__)

OWN_KERNEL = ":own-kernel:"  # the Operator box's entry for a goal that brings its own [kernel]
AGENT_HELP = {
    "explorer": "space-filling exploration",
    "local": "local search around the elites",
    "evolution": "crossover and mutation of the elites",
    "model": "model-guided proposals",
    "llm": "LLM rewrites of the kernel source",
}
GPU_ONLY_FIELDS = ("constraints.max_registers", "constraints.max_shared_memory_bytes")
EXAMPLE_STATUS_ROLE = Qt.UserRole + 1  # (runnable here, why not) of an example goal
TARGET_LABELS = {"none": "none", "speedup": "speedup over baseline (×)",
                 "fraction_of_limit": "fraction of hardware limit", "absolute": "absolute value"}


def default_goal() -> Goal:
    """A new goal: valid as it stands when a recorded space is available."""
    spaces = recorded_spaces()
    return Goal(name="untitled goal", space=spaces[0][0] if spaces else "")


def _agent_names() -> tuple[str, ...]:
    """Every registered agent: the swarm's strategies and those other packages add (llm)."""
    from app.session.registries import wire
    from app.swarm.agents import agent_names

    wire()
    return agent_names()


class GoalForm(QWidget):
    """Edits a Goal. `validityChanged(bool)` follows every edit (debounced a little)."""

    validityChanged = Signal(bool)
    goalEdited = Signal()
    backendChanged = Signal(str)  # the backend chosen (the empty candidate table follows it)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        wire()  # the form lists the registered backends (idempotent; any entry point may build it)
        self._loading = False
        self._source_path = ""
        self._base = Goal()  # the goal last set: fields the form does not edit come from it
        self.error: GoalError | None = None
        self.errors: dict[str, QLabel] = {}
        self.rows: dict[str, QWidget] = {}  # each field's row, by its goal field

        self._what_fields()
        self._better_fields()
        self._true_fields()
        self._stop_fields()
        self._swarm_fields()
        self.general_error = QLabel()
        self._style_error(self.general_error)

        self._lay_out()
        self._connect_edits()
        self._backend_changed()
        self._target_kind_changed()
        self.set_goal(default_goal())

    # ---- the fields, one group at a time ----------------------------------------------------
    def _what_fields(self) -> None:
        """Examples, name, backend, kernel or recorded space, device, dtype, shapes."""
        self.example = QComboBox()
        self._shrinkable(self.example)
        self.example.addItem("Start from an example…", None)
        self._add_examples()
        self.example.activated.connect(self._load_example)

        self.name = QLineEdit()
        self.name.setPlaceholderText("e.g. pnpoly on the RTX 3090")
        self.backend = QComboBox()
        for spec in backends():
            self.backend.addItem(spec.label, spec.name)
        self.kernel_label = QLabel("Recorded space")
        self.kernel = QComboBox()
        self.kernel.setEditable(False)
        self._shrinkable(self.kernel)
        self.browse = QToolButton(text="…")
        self.browse.setToolTip("Choose a Kernel Tuner cache file")
        self.browse.clicked.connect(self._browse_space)
        self.device = int_spin("device", "automatic")
        self.dtype = QComboBox()
        self.dtype.addItems(list(DTYPES))
        self.shapes = ShapeEditor()

    def _better_fields(self) -> None:
        """The objective, its direction and the target; the tolerances."""
        self.objective_metric = QComboBox()
        self.objective_metric.addItems(list(OBJECTIVES))
        self.direction = QComboBox()
        self.direction.addItem("automatic (from metric)", "")
        self.direction.addItem("minimize", "minimize")
        self.direction.addItem("maximize", "maximize")
        self.target_kind = QComboBox()
        for k in TARGET_KINDS:
            self.target_kind.addItem(TARGET_LABELS.get(k, k), k)
        self.target_value = float_spin("target.value", decimals=3)
        self.rtol = QLineEdit()
        self.rtol.setPlaceholderText("dtype default")
        self.atol = QLineEdit()
        self.atol.setPlaceholderText("dtype default")

    def _true_fields(self) -> None:
        """Restrictions and resource limits that every candidate must respect."""
        self.restrictions = QPlainTextEdit()
        self.restrictions.setPlaceholderText("one expression per line, e.g. block_size_x * block_size_y <= 1024")
        self.restrictions.setMaximumHeight(64)
        self.max_registers = QLineEdit()
        self.max_registers.setPlaceholderText("no limit")
        self.max_shared = QLineEdit()
        self.max_shared.setPlaceholderText("no limit (bytes)")
        self.forbid = QLineEdit()
        self.forbid.setPlaceholderText("e.g. precision_lowering, atomics")

    def _stop_fields(self) -> None:
        """The stop rules, their ranges from the goal's table (app.goal.ranges)."""
        self.max_evals = int_spin("stop.max_evals")
        self.time_budget = float_spin("stop.time_budget_s", "no limit")
        self.time_budget.setSuffix(" s")
        self.plateau = int_spin("stop.plateau_patience", "off")

    def _swarm_fields(self) -> None:
        """Agents (each with its one-line help), workers, seed, cluster, replay clock."""
        self.agent_boxes: dict[str, QCheckBox] = {}
        self._agent_order: list[str] = list(SwarmSettings().agents)  # the goal's own order
        agents_widget = self.agents_widget = QWidget()
        agents_layout = QGridLayout(agents_widget)
        agents_layout.setContentsMargins(0, 0, 0, 0)
        agents_layout.setVerticalSpacing(2)
        agents_layout.setColumnStretch(1, 1)
        for row, a in enumerate(_agent_names()):
            box = QCheckBox(a)
            box.setChecked(a in SwarmSettings().agents)
            box.setToolTip(AGENT_HELP.get(a, ""))
            help_label = QLabel(AGENT_HELP.get(a, ""))  # wraps: the form never scrolls sideways
            help_label.setWordWrap(True)
            help_label.setForegroundRole(QPalette.PlaceholderText)
            help_label.setMinimumWidth(40)
            self.agent_boxes[a] = box
            agents_layout.addWidget(box, row, 0)
            agents_layout.addWidget(help_label, row, 1)
        self.workers = int_spin("swarm.workers")
        self.seed = int_spin("swarm.seed")
        self.cluster = QLineEdit()  # the goal's [cluster] address; empty: this machine, no Ray
        self.cluster.setPlaceholderText("this machine (or auto, host:port, ray://host:10001)")
        self.cluster.setToolTip("Run the evaluations on a Ray cluster (pip install "
                                "'kernelswarm[cluster]'); empty: here")
        self.simulate_time = QCheckBox("charge recorded times")
        self.simulate_time.setToolTip("Charge the recorded compile, verification and benchmark "
                                      "times to the run clock, so the time axis reads like a real run")
        self.simulate_time.setChecked(True)

    def _lay_out(self) -> None:
        """The groups in a scroll area that follows the dock's width."""
        kernel_row = QHBoxLayout()
        kernel_row.setSpacing(2)
        kernel_row.addWidget(self.kernel, 1)
        kernel_row.addWidget(self.browse)

        what = self._group("What to optimise", [
            ("Name", self.name, "name"),
            ("Backend", self.backend, "backend"),
            (self.kernel_label, kernel_row, "kernel"),
            ("Device", self.device, "device"),
            ("Data type", self.dtype, "dtype"),
            ("Shapes", self.shapes, "shapes"),
        ])
        better = self._group("What “better” means", [
            ("Objective", self.objective_metric, "objective.metric"),
            ("Direction", self.direction, "objective.direction"),
            ("Target", self.target_kind, "target.kind"),
            ("Target value", self.target_value, "target.value"),
        ])
        true = self._group("What must stay true", [
            ("Relative tolerance", self.rtol, "tolerance.rtol"),
            ("Absolute tolerance", self.atol, "tolerance.atol"),
            ("Restrictions", self.restrictions, "constraints.restrictions"),
            ("Max registers", self.max_registers, "constraints.max_registers"),
            ("Max shared memory", self.max_shared, "constraints.max_shared_memory_bytes"),
            ("Forbid", self.forbid, "constraints.forbid"),
        ])
        stop = self._group("When to stop", [
            ("Max evaluations", self.max_evals, "stop.max_evals"),
            ("Time budget", self.time_budget, "stop.time_budget_s"),
            ("Plateau patience", self.plateau, "stop.plateau_patience"),
        ])
        swarm = self._group("Swarm", [
            ("Agents", self.agents_widget, "swarm.agents"),
            ("Worker threads", self.workers, "swarm.workers"),
            ("Seed", self.seed, "swarm.seed"),
            ("Cluster (Ray)", self.cluster, "cluster"),
            ("Replay clock", self.simulate_time, "simulate_time"),
        ])

        inner = QWidget()
        v = QVBoxLayout(inner)
        v.setContentsMargins(6, 6, 6, 6)
        v.addWidget(self.example)
        v.addWidget(self.general_error)
        for g in (what, better, true, stop, swarm):
            v.addWidget(g)
        v.addStretch(1)
        # Fields shrink to the dock's width instead of scrolling sideways (buttons at the right
        # edge, like the shapes' +/− and the space's browse button, stay in view).
        scroll = self.scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)
        scroll.setWidget(inner)
        scroll.setFrameShape(QScrollArea.NoFrame)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll)

    def _connect_edits(self) -> None:
        """Every edit revalidates, debounced; backend and target kind reshape the form."""
        self._debounce = QTimer(self)
        self._debounce.setSingleShot(True)
        self._debounce.setInterval(120)
        self._debounce.timeout.connect(self.revalidate)
        for w in (self.name, self.rtol, self.atol, self.max_registers, self.max_shared, self.forbid,
                  self.cluster):
            w.textChanged.connect(self._edited)
        for w in (self.kernel, self.dtype, self.objective_metric, self.direction, self.target_kind):
            w.currentIndexChanged.connect(self._edited)
        for w in (self.device, self.max_evals, self.plateau, self.workers, self.seed):
            w.valueChanged.connect(self._edited)
        for w in (self.target_value, self.time_budget):
            w.valueChanged.connect(self._edited)
        for box in self.agent_boxes.values():
            box.toggled.connect(self._edited)
        self.simulate_time.toggled.connect(self._edited)
        self.restrictions.textChanged.connect(self._edited)
        self.shapes.changed.connect(self._edited)
        self.backend.currentIndexChanged.connect(self._backend_changed)
        self.target_kind.currentIndexChanged.connect(self._target_kind_changed)

    # ---- layout helpers ---------------------------------------------------------------------
    @staticmethod
    def _style_error(label: QLabel) -> None:
        label.setStyleSheet("color: #d9534f; font-size: 8.5pt;")
        label.setWordWrap(True)
        label.hide()

    @staticmethod
    def _shrinkable(combo: QComboBox) -> None:
        """A combo box whose width follows its dock, not its longest entry (the popup still
        shows entries whole)."""
        combo.setSizeAdjustPolicy(QComboBox.AdjustToMinimumContentsLengthWithIcon)
        combo.setMinimumContentsLength(8)

    def _add_examples(self) -> None:
        """Every example goal, marked with whether this machine can run it and why not."""
        for p in example_goals():
            ok, why = example_status(str(p))
            name = example_name(p)
            self.example.addItem(name if ok else f"{name} — cannot run here: {why.split(' (')[0]}",
                                 str(p))
            i = self.example.count() - 1
            self.example.setItemData(i, (ok, why), EXAMPLE_STATUS_ROLE)
            self.example.setItemData(i, "runs on this machine" if ok else why, Qt.ToolTipRole)
            if not ok:
                self.example.setItemData(i, self.palette().color(QPalette.PlaceholderText),
                                         Qt.ForegroundRole)

    def _group(self, title: str, rows: list) -> QGroupBox:
        box = QGroupBox(title)
        form = QFormLayout(box)
        form.setFieldGrowthPolicy(QFormLayout.AllNonFixedFieldsGrow)
        form.setRowWrapPolicy(QFormLayout.WrapLongRows)  # a narrow dock puts fields under labels
        form.setLabelAlignment(Qt.AlignRight)
        for label, widget, field in rows:
            holder = QWidget()
            col = QVBoxLayout(holder)
            col.setContentsMargins(0, 0, 0, 0)
            col.setSpacing(1)
            if isinstance(widget, QWidget):
                col.addWidget(widget)
            else:
                col.addLayout(widget)
            err = QLabel()
            err.setObjectName(f"error:{field}")
            self._style_error(err)
            col.addWidget(err)
            self.errors[field] = err
            self.rows[field] = holder  # a row the backend may hide
            form.addRow(label, holder)
        return box

    # ---- behaviour --------------------------------------------------------------------------
    def _edited(self, *_args) -> None:
        if self._loading:
            return
        self._debounce.start()
        self.goalEdited.emit()

    def _backend_changed(self, *_args) -> None:
        backend = self.backend.currentData()
        spec = backend_spec(backend)
        keep = self.kernel.currentData()
        self.kernel.blockSignals(True)
        self.kernel.clear()
        if not spec.compiles:  # recorded measurements, chosen by file
            self.kernel_label.setText("Recorded space")
            for name, path in recorded_spaces():
                self.kernel.addItem(name.removesuffix(".gz").removesuffix(".json"), name)
                self.kernel.setItemData(self.kernel.count() - 1, str(path), Qt.ToolTipRole)
        else:
            self.kernel_label.setText("Operator")
            try:
                from app.catalog import known_operators

                ops = sorted(known_operators(backend))
            except Exception as exc:  # noqa: BLE001 - a broken catalog module must not break the form
                log.warning("catalog for %s failed to load: %s", backend, exc)
                ops = []
            own = getattr(self, "_base", None)
            if own is not None and own.kernel is not None:  # the loaded goal's own kernel
                self.kernel.addItem(f"your own kernel: {own.kernel.entry}", OWN_KERNEL)
            for op in ops:
                self.kernel.addItem(op, op)
        if keep is not None:
            i = self.kernel.findData(keep)
            if i >= 0:
                self.kernel.setCurrentIndex(i)
        self.kernel.blockSignals(False)
        self.browse.setVisible(not spec.compiles)
        self.simulate_time.setEnabled(spec.simulated_clock)
        for field in GPU_ONLY_FIELDS:  # a CPU kernel has no registers or shared memory to cap
            holder = self.rows.get(field)
            if holder is not None:
                holder.parentWidget().layout().setRowVisible(holder, backend != "cpu")
        clock = self.rows.get("simulate_time")  # only a replay has recorded times to charge
        if clock is not None:
            clock.parentWidget().layout().setRowVisible(clock, spec.simulated_clock)
        self.device.setEnabled(spec.selects_device)
        self.backendChanged.emit(backend)
        self._edited()

    def watch_backend(self, slot) -> None:
        """Call `slot(backend)` now and whenever the form's backend changes."""
        self.backendChanged.connect(slot)
        slot(self.backend.currentData())

    def _target_kind_changed(self, *_args) -> None:
        kind = self.target_kind.currentData()
        self.target_value.setEnabled(kind != "none")
        self.target_value.setSuffix({"speedup": " ×", "fraction_of_limit": ""}.get(kind, ""))

    def _browse_space(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Recorded tuning space", "",
                                              "Kernel Tuner cache (*.json *.json.gz);;All files (*)")
        if path:
            self._select_space(path)

    def _select_space(self, space: str) -> None:
        i = self.kernel.findData(space)
        if i < 0:
            self.kernel.addItem(Path(space).name.removesuffix(".gz").removesuffix(".json"), space)
            i = self.kernel.count() - 1
        self.kernel.setCurrentIndex(i)

    def _load_example(self, index: int) -> None:
        path = self.example.itemData(index)
        self.example.setCurrentIndex(0)
        if not path:
            return
        try:
            self.set_goal(Goal.load(path))
        except GoalError as exc:
            self.show_error(exc)

    # ---- goal in / out ----------------------------------------------------------------------
    def build_goal(self) -> Goal:
        """The goal the widgets describe (not validated). Raises GoalError for text that does
        not even parse (a shape that is not numbers, a tolerance that is not a number)."""
        backend = self.backend.currentData()
        recorded = not backend_spec(backend).compiles
        kernel = self.kernel.currentData() or ""
        own = kernel == OWN_KERNEL
        forbid = [f.strip() for f in self.forbid.text().split(",") if f.strip()]
        restrictions = [r.strip() for r in self.restrictions.toPlainText().splitlines() if r.strip()]
        # Start from the goal that was loaded: what the form does not show (the [llm] table,
        # and any field or table entry added later, like swarm.transfer) goes back out unchanged.
        base = copy.deepcopy(self._base)
        edit = dataclasses.replace
        return edit(
            base,
            name=self.name.text().strip(),
            operator="" if recorded or own else kernel,
            kernel=base.kernel if own or recorded else None,  # an operator picked instead: no [kernel]
            space=kernel if recorded else "",
            backend=backend,
            dtype=self.dtype.currentText(),
            shapes=self.shapes.shapes(),
            device=None if self.device.value() < 0 else self.device.value(),
            objective=edit(base.objective, metric=self.objective_metric.currentText(),
                           direction=self.direction.currentData()),
            target=edit(base.target, kind=self.target_kind.currentData(),
                        value=float(self.target_value.value())),
            stop=edit(base.stop, max_evals=self.max_evals.value(),
                      time_budget_s=float(self.time_budget.value()),
                      plateau_patience=self.plateau.value()),
            tolerance=edit(base.tolerance, rtol=optional_float(self.rtol, "tolerance.rtol"),
                           atol=optional_float(self.atol, "tolerance.atol")),
            constraints=edit(
                base.constraints,
                restrictions=restrictions,
                max_registers=optional_int(self.max_registers, "constraints.max_registers"),
                max_shared_memory_bytes=optional_int(self.max_shared,
                                                      "constraints.max_shared_memory_bytes"),
                forbid=forbid),
            swarm=edit(base.swarm, agents=self._checked_agents(),
                       workers=self.workers.value(), seed=self.seed.value()),
            simulate_time=self.simulate_time.isChecked(),
            cluster={**base.cluster, "address": self.cluster.text().strip()}
            if self.cluster.text().strip() else {},
            source_path=self._source_path,
        )

    def _checked_agents(self) -> list[str]:
        """The checked agents in the goal's own order (the order the swarm schedules them in:
        reordering them changes the run), then those checked since, in the form's order."""
        checked = [a for a, b in self.agent_boxes.items() if b.isChecked()]
        unknown = [a for a in self._agent_order if a not in self.agent_boxes]  # check_goal names them
        return ([a for a in self._agent_order if a in checked or a in unknown]
                + [a for a in checked if a not in self._agent_order])

    def goal(self) -> Goal:
        """The goal, checked as a run will check it (its fields, then the backend, operator,
        agents and LLM settings through their registries); raises GoalError."""
        from app.session import check_goal

        goal = self.build_goal()
        check_goal(goal)
        return goal

    def set_goal(self, goal: Goal) -> None:
        self._loading = True
        try:
            self._base = copy.deepcopy(goal)
            self._agent_order = list(goal.swarm.agents)
            self._source_path = goal.source_path
            self.name.setText(goal.name)
            self.backend.setCurrentIndex(max(0, self.backend.findData(goal.backend)))
            self._backend_changed()
            recorded = goal.backend in backend_names() and not backend_spec(goal.backend).compiles
            kernel = goal.space if recorded else (OWN_KERNEL if goal.kernel else goal.operator)
            if kernel:
                i = self.kernel.findData(kernel)
                if i < 0 and recorded:
                    try:
                        kernel = str(goal.resolve_space_path())
                    except FileNotFoundError:
                        pass
                    self._select_space(kernel)
                elif i >= 0:
                    self.kernel.setCurrentIndex(i)
                else:
                    self.kernel.addItem(f"{kernel} (unknown)", kernel)
                    self.kernel.setCurrentIndex(self.kernel.count() - 1)
            self.device.setValue(NONE_VALUE if goal.device is None else goal.device)
            self.dtype.setCurrentText(goal.dtype)
            self.shapes.set_shapes(goal.shapes)
            self.objective_metric.setCurrentText(goal.objective.metric)
            self.direction.setCurrentIndex(max(0, self.direction.findData(goal.objective.direction)))
            self.target_kind.setCurrentIndex(max(0, self.target_kind.findData(goal.target.kind)))
            self.target_value.setValue(goal.target.value)
            self.rtol.setText("" if goal.tolerance.rtol is None else repr(goal.tolerance.rtol))
            self.atol.setText("" if goal.tolerance.atol is None else repr(goal.tolerance.atol))
            self.restrictions.setPlainText("\n".join(goal.constraints.restrictions))
            mr, ms = goal.constraints.max_registers, goal.constraints.max_shared_memory_bytes
            self.max_registers.setText("" if mr is None else str(mr))
            self.max_shared.setText("" if ms is None else str(ms))
            self.forbid.setText(", ".join(goal.constraints.forbid))
            self.max_evals.setValue(goal.stop.max_evals)
            self.time_budget.setValue(goal.stop.time_budget_s)
            self.plateau.setValue(goal.stop.plateau_patience)
            for a, box in self.agent_boxes.items():
                box.setChecked(a in goal.swarm.agents)
            self.workers.setValue(goal.swarm.workers)
            self.seed.setValue(goal.swarm.seed)
            self.simulate_time.setChecked(goal.simulate_time)
            self.cluster.setText(str(goal.cluster.get("address", "")))
        finally:
            self._loading = False
        self.revalidate()

    # ---- validation -------------------------------------------------------------------------
    def _label_for(self, field: str) -> QLabel:
        if field in ("operator", "space"):
            field = "kernel"
        while field and field not in self.errors:
            # "shapes[2]" -> "shapes"; "swarm.agents.x" -> "swarm.agents"
            field = re.sub(r"(\[\d+\]|\.[^.]*)$", "", field) if re.search(r"(\[\d+\]|\.)", field) else ""
        return self.errors.get(field, self.general_error)

    def show_error(self, error: GoalError | None) -> None:
        for label in (*self.errors.values(), self.general_error):
            label.hide()
        self.error = error
        if error is not None:
            label = self._label_for(error.field)
            label.setText(error.problem if label is not self.general_error else str(error))
            label.show()

    def revalidate(self) -> bool:
        self._debounce.stop()
        try:
            self.goal()
            error = None
        except GoalError as exc:
            error = exc
        self.show_error(error)
        self.validityChanged.emit(error is None)
        return error is None

    @property
    def source_path(self) -> str:
        return self._source_path

    @property
    def is_valid(self) -> bool:
        return self.error is None

    # ---- files ------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Goal:
        goal = self.build_goal()
        goal.save(path)
        self._source_path = str(Path(path).resolve())
        return goal

    def load(self, path: str | Path) -> Goal:
        goal = Goal.load(path)
        self.set_goal(goal)
        return goal
