"""The "Your kernel" goal page: your own C or CUDA kernel as a goal, the Kernel Tuner way.

The source (entry and arguments offered from its parsed signature: app.ui.kernel_signature),
tunable parameters as Python lists, restrictions checked as typed, the CUDA launch geometry,
how outputs are checked. "Compile one configuration" compiles a sample in a subprocess
(app.gpu.custom_reference.preview); "Save as TOML" writes the goal (previewed as you type);
"Use in the window" hands it to the goal form. Two columns of tables: it fits 1366x768.
"""

from __future__ import annotations

import ast
import os
import tempfile
from pathlib import Path
from typing import Any

from PySide6.QtCore import QProcess, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.catalog.custom.spec import ARG_DTYPES, FILLS, ROLES, entry_names
from app.catalog.custom.toml_text import goal_text
from app.core import entry_points
from app.core.restrictions import RestrictionError, compile_restriction
from app.goal import Goal, GoalError, KernelTable, StopRules
from app.ui.custom_kernel_fields import (
    REFERENCE_FILTERS,
    REFERENCE_HINTS,
    REFERENCE_KINDS,
    _python_list,
    _split,
)
from app.ui.custom_kernel_layout import pair, row_buttons
from app.ui.goal_form_spins import int_spin
from app.ui.kernel_signature import SignatureError, parse_signature, suggested_rows
from app.ui.wheel_guard import install_wheel_guard

ARG_COLUMNS = ("name", "role", "dtype", "shape or value", "fill")
class CustomKernelPage(QDialog):
    """Builds a custom-kernel goal; `goal_ready` carries it to the main window."""

    goal_ready = Signal(object)
    saved = Signal(str)  # the goal file Save as TOML wrote: the window lists it in Recent goals
    preview_done = Signal(bool, str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Your kernel")
        self.setObjectName("page:custom_kernel")
        self._process: QProcess | None = None
        self._preview_goal: str = ""
        self._saved_dir: Path | None = None
        self._saved: tuple[str, str] = ("", "")  # the last save: its path and TOML text
        self._cancelled = False
        install_wheel_guard()  # scrolling the tables never changes a role, dtype or fill
        left = self._goal_fields()
        left.addWidget(self._params_box(), 1)  # resizing gives the height to the tables
        right = QVBoxLayout()  # the arguments, how outputs are checked, the CUDA launch geometry
        right.addWidget(self._args_box(), 1)
        checks = QGroupBox("How outputs are checked")
        self._reference_rows(QFormLayout(checks))
        right.addWidget(checks)
        right.addWidget(self._geometry_box())
        top = QWidget()
        columns = QHBoxLayout(top)
        columns.setContentsMargins(0, 0, 0, 0)
        columns.addLayout(left, 1)
        columns.addLayout(right, 1)
        self._outputs(top)
        layout = QVBoxLayout(self)
        layout.addWidget(self.splitter, 1)
        self.problem = QLabel("")
        self.problem.setWordWrap(True)
        layout.addWidget(self.problem)
        layout.addLayout(self._buttons())
        self._language_changed()
        self._reference_kind_changed()
        self._preview_timer = QTimer(self, singleShot=True, interval=250)
        self._preview_timer.timeout.connect(self.refresh_toml_preview)
        self._watch(self)
        self._fit_screen()
        self.refresh_toml_preview()


    def _goal_fields(self) -> QVBoxLayout:
        """The goal's own fields, two a row where they belong together (the tables get the height)."""
        left = QVBoxLayout()  # the goal's fields, then the tunable parameters
        form = QFormLayout()  # two fields a row where they belong together: the tables get the height
        self.name = QLineEdit("my kernel")
        self.max_evals = int_spin("stop.max_evals")
        form.addRow("Name", pair(self.name, "Evaluations", self.max_evals))
        self.source = QLineEdit()
        self.source.setPlaceholderText("kernel.c or kernel.cu")
        self.source.editingFinished.connect(lambda: self.set_source(self.source.text()))
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse_source)
        row = QHBoxLayout()
        row.addWidget(self.source, 1)
        row.addWidget(browse)
        form.addRow("Source", row)
        self.language = QComboBox()
        self.language.addItem("C (cpu backend)", "c")
        self.language.addItem("CUDA (cuda backend)", "cuda")
        self.language.currentIndexChanged.connect(self._language_changed)
        self.entry = QComboBox()
        self.entry.setEditable(True)
        self.entry.currentTextChanged.connect(self._entry_changed)
        form.addRow("Language", pair(self.language, "Entry function", self.entry))
        self.dims = QLineEdit("n")
        self.dims.setToolTip("names of a problem size's entries, used in shapes and values")
        self.shapes = QLineEdit("1024")
        self.shapes.setToolTip("problem sizes, e.g. 1024, 1024; 2048, 2048")
        form.addRow("Dimension names", pair(self.dims, "Problem sizes", self.shapes))
        left.addLayout(form)
        return left


    def _params_box(self) -> QGroupBox:
        """Tunable parameters and their restrictions, checked as typed."""
        params_box = QGroupBox("Tunable parameters (#defines): a name and a Python list of values")
        pv = QVBoxLayout(params_box)
        self.params = QTableWidget(0, 2)
        self.params.setHorizontalHeaderLabels(["name", "values"])
        self.params.horizontalHeader().setStretchLastSection(True)
        self.params.itemChanged.connect(lambda _item: self._check_restrictions())
        self.params.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 10)
        pv.addWidget(self.params, 1)
        pv.addLayout(row_buttons(self.params, lambda: self.add_param("", "")))
        self.restrictions = QPlainTextEdit()
        self.restrictions.setPlaceholderText("one restriction per line, e.g. TILE_X * TILE_Y <= 256")
        self.restrictions.setMaximumHeight(48)
        self.restrictions.textChanged.connect(self._check_restrictions)
        pv.addWidget(QLabel("Restrictions (Kernel Tuner syntax)"))
        pv.addWidget(self.restrictions)
        self.restriction_status = QLabel("")
        self.restriction_status.setWordWrap(True)
        pv.addWidget(self.restriction_status)
        return params_box


    def _args_box(self) -> QGroupBox:
        """The arguments in call order, offered from the entry's signature."""
        args_box = QGroupBox("Arguments, in call order (offered from the entry's signature)")
        av = QVBoxLayout(args_box)
        self.args = QTableWidget(0, len(ARG_COLUMNS))
        self.args.setHorizontalHeaderLabels(list(ARG_COLUMNS))
        self.args.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 14)  # combos
        header = self.args.horizontalHeader()
        for col, mode in enumerate((QHeaderView.Stretch, QHeaderView.ResizeToContents,
                                    QHeaderView.ResizeToContents, QHeaderView.Stretch,
                                    QHeaderView.ResizeToContents)):
            header.setSectionResizeMode(col, mode)  # every column shows, fill included
        av.addWidget(self.args, 1)
        arg_buttons = row_buttons(self.args, lambda: self.add_arg("", "input", "float32", "n"))
        self.from_signature = QPushButton("From the signature")
        self.from_signature.setToolTip("list the entry's parameters again: names, pointer or "
                                       "scalar, dtype from the C type (shapes and fills kept)")
        self.from_signature.clicked.connect(lambda: self.args_from_signature(replace=True))
        arg_buttons.insertWidget(2, self.from_signature)
        av.addLayout(arg_buttons)
        self.signature_status = QLabel("")
        self.signature_status.setWordWrap(True)
        av.addWidget(self.signature_status)
        return args_box

    def _geometry_box(self) -> QGroupBox:
        """The CUDA launch geometry, as in Kernel Tuner."""
        self.geometry = QGroupBox("Launch geometry (CUDA, as in Kernel Tuner)")
        gf = QFormLayout(self.geometry)
        self.problem_size = QLineEdit()
        self.problem_size.setPlaceholderText("default: the dimension names")
        self.grid_div = [QLineEdit("block_size_x"), QLineEdit("block_size_y"), QLineEdit("block_size_z")]
        self.block_size_names = QLineEdit("block_size_x, block_size_y, block_size_z")
        gf.addRow("problem_size", self.problem_size)
        for axis, edit in zip("xyz", self.grid_div):
            gf.addRow(f"grid_div_{axis}", edit)
        gf.addRow("block_size_names", self.block_size_names)
        return self.geometry


    def _outputs(self, top: QWidget) -> None:
        """The fields over the compiler's output and the TOML preview, in a splitter."""
        self.output_tabs = QTabWidget()
        self.preview_output = QPlainTextEdit()
        self.preview_output.setReadOnly(True)
        self.preview_output.setPlaceholderText("the compiler's output appears here")
        self.output_tabs.addTab(self.preview_output, "Compiler output")
        self.toml_preview = QPlainTextEdit()
        self.toml_preview.setReadOnly(True)
        self.toml_preview.setObjectName("text:toml-preview")
        self.output_tabs.addTab(self.toml_preview, "Goal TOML (as saved)")
        self.output_tabs.setCurrentIndex(1)
        self.splitter = QSplitter(Qt.Vertical)
        self.splitter.addWidget(top)
        self.splitter.addWidget(self.output_tabs)
        self.splitter.setStretchFactor(0, 3)  # the tables grow first
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setChildrenCollapsible(False)
        self.splitter.setSizes([470, 190])  # the compiler output and the TOML get ~10 lines

    def _reference_rows(self, ref: QFormLayout) -> None:
        self.reference_kind = QComboBox()
        for label, kind in REFERENCE_KINDS:
            self.reference_kind.addItem(label, kind)
        self.reference_kind.currentIndexChanged.connect(self._reference_kind_changed)
        ref.addRow("Correctness", self.reference_kind)
        self.reference_file = QLineEdit()
        self.reference_file.editingFinished.connect(lambda: self.set_reference(self.reference_file.text()))
        self.reference_pick = QPushButton("Browse…")
        self.reference_pick.clicked.connect(self._browse_reference)
        rrow = QHBoxLayout()
        rrow.addWidget(self.reference_file, 1)
        rrow.addWidget(self.reference_pick)
        ref.addRow("Reference file", rrow)
        self.reference_function = QComboBox()
        self.reference_function.setEditable(True)
        self.reference_function_label = QLabel("Reference function")
        ref.addRow(self.reference_function_label, self.reference_function)

    def _buttons(self) -> QHBoxLayout:
        buttons = QHBoxLayout()
        self.compile_button = QPushButton("Compile one configuration")
        self.compile_button.clicked.connect(self.compile_preview)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("stop the compile in progress")
        self.cancel_button.clicked.connect(self.cancel_preview)
        self.cancel_button.setEnabled(False)
        self.save_button = QPushButton("Save as TOML…")
        self.save_button.clicked.connect(self._save_dialog)
        self.use_button = QPushButton("Use in the window")
        self.use_button.setToolTip("put this goal in the window's goal form and close this page")
        self.use_button.clicked.connect(self.use_goal)
        self.close_button = QPushButton("Close")
        self.close_button.setToolTip("close this page (what you typed stays for next time)")
        self.close_button.clicked.connect(self.close)
        for b in (self.compile_button, self.cancel_button, self.save_button, self.use_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        buttons.addWidget(self.close_button)
        return buttons

    def _fit_screen(self) -> None:
        """Wide rather than tall: the page fits a 1366x768 laptop screen with its tables."""
        screen = self.screen().availableGeometry() if self.screen() else None
        w, h = (screen.width(), screen.height()) if screen else (1366, 768)
        self.resize(min(1240, w - 40), min(max(700, int(h * 0.8)), h - 60))

    # ---- rows -----------------------------------------------------------------------------
    def add_param(self, name: str, values: str) -> None:
        r = self.params.rowCount()
        self.params.insertRow(r)
        self.params.setItem(r, 0, QTableWidgetItem(name))
        self.params.setItem(r, 1, QTableWidgetItem(values))

    def add_arg(self, name: str, role: str, dtype: str, shape_or_value: str, fill: str = "normal") -> None:
        r = self.args.rowCount()
        self.args.insertRow(r)
        self.args.setItem(r, 0, QTableWidgetItem(name))
        for col, choices, value in ((1, ROLES, role), (2, ARG_DTYPES, dtype), (4, FILLS, fill)):
            box = QComboBox()
            box.addItems(list(choices))
            box.setCurrentText(value)
            box.currentTextChanged.connect(self._changed)
            self.args.setCellWidget(r, col, box)
        self.args.setItem(r, 3, QTableWidgetItem(shape_or_value))
        role_box, fill_box = self.args.cellWidget(r, 1), self.args.cellWidget(r, 4)
        # a scalar has a value and an output is overwritten (NaN-filled): neither has a fill
        role_box.currentTextChanged.connect(lambda text: fill_box.setEnabled(text in ("input", "inout", "constant")))
        fill_box.setEnabled(role in ("input", "inout", "constant"))

    def _entry_changed(self) -> None:
        if not self.args.rowCount():  # offered, never over rows the user typed
            self.args_from_signature(replace=False)

    def args_from_signature(self, replace: bool = True) -> bool:
        """Fill the Arguments table from the entry's parsed signature (kept: what was typed
        for a name); False, and the reason shown, when the source or entry does not parse."""
        entry, path = self.entry.currentText().strip(), self.source.text().strip()
        if not entry or not path:
            return False
        try:
            tunables = tuple(self._text(self.params, r, 0) for r in range(self.params.rowCount()))
            parsed = parse_signature(Path(path).read_text(encoding="utf-8"), entry,
                                     self.language.currentData(), tunables)
        except (OSError, UnicodeDecodeError, SignatureError) as exc:
            self.signature_status.setText(f"⚠ arguments not offered: {exc}")
            return False
        kept = {self._text(self.args, r, 0): tuple(self._text(self.args, r, c) for c in range(1, 5))
                for r in range(self.args.rowCount())} if replace else {}
        self.args.setRowCount(0)
        for row in suggested_rows(parsed, _split(self.dims.text()), kept):
            self.add_arg(*row)
        odd = [a.name for a in parsed if not a.dtype]
        self.signature_status.setText(
            f"✓ {len(parsed)} arguments from {entry}(…): give each array its shape and role"
            + (f"; no dtype for {', '.join(odd)} (float32 assumed)" if odd else ""))
        return True

    def _text(self, table: QTableWidget, r: int, c: int) -> str:
        widget = table.cellWidget(r, c)
        if isinstance(widget, QComboBox):
            return widget.currentText()
        item = table.item(r, c)
        return item.text().strip() if item else ""

    # ---- files ----------------------------------------------------------------------------
    def _browse_source(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Kernel source", "", "Kernels (*.c *.cu *.cuh);;All (*)")
        if path:
            self.set_source(path)

    def set_source(self, path: str) -> None:
        """Read the source: the language from its suffix, the entry offered from its functions."""
        self.source.setText(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            self.problem.setText(f"kernel.source: cannot read {path}: {exc}")
            return
        language = "cuda" if Path(path).suffix in (".cu", ".cuh") else "c"
        self.language.setCurrentIndex(self.language.findData(language))
        keep = self.entry.currentText()
        self.entry.blockSignals(True)  # the arguments are offered once, for the chosen entry
        self.entry.clear()
        names = entry_names(text, language)
        self.entry.addItems(names)
        if keep in names:
            self.entry.setCurrentText(keep)
        elif names:  # the function named like the file, else the last one (helpers come first in C)
            stem = Path(path).stem
            self.entry.setCurrentText(stem if stem in names else names[-1])
        self.entry.blockSignals(False)
        self._entry_changed()
        self.problem.setText("")

    def _browse_reference(self) -> None:
        kind = self.reference_kind.currentData()
        path, _ = QFileDialog.getOpenFileName(self, "Reference", "", REFERENCE_FILTERS.get(kind, "All (*)"))
        if path:
            self.set_reference(path)

    def set_reference(self, path: str) -> None:
        """A reference file: its kind from the suffix (a Python module, a reference kernel
        source, stored outputs), and the functions it defines offered (parsed, never run)."""
        self.reference_file.setText(path)
        suffix = Path(path).suffix
        kind = "python" if suffix == ".py" else "expected" if suffix == ".npz" else "source"
        self.reference_kind.setCurrentIndex(self.reference_kind.findData(kind))
        self.reference_function.clear()
        if kind == "expected":
            return
        try:
            text = Path(path).read_text(encoding="utf-8")
            if kind == "python":
                tree = ast.parse(text)
                names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
            else:
                names = entry_names(text, "cuda" if suffix in (".cu", ".cuh") else "c")
        except (OSError, SyntaxError, UnicodeDecodeError) as exc:
            field = "reference" if kind == "python" else "reference_source"
            self.problem.setText(f"kernel.{field}: {exc}")
            return
        self.reference_function.addItems(names)
        entry = self.entry.currentText()
        if kind == "source" and entry and f"{entry}_ref" in names:  # the usual naming
            self.reference_function.setCurrentText(f"{entry}_ref")

    def _reference_kind_changed(self) -> None:
        kind = self.reference_kind.currentData()
        self.reference_file.setPlaceholderText(REFERENCE_HINTS[kind])
        self.reference_file.setEnabled(kind != "none")
        self.reference_pick.setEnabled(kind != "none")
        named = kind in ("python", "source")
        self.reference_function.setVisible(named)
        self.reference_function_label.setVisible(named)
        self.reference_function_label.setText("Reference kernel's function" if kind == "source"
                                              else "Reference function")

    def _language_changed(self) -> None:
        self.geometry.setVisible(self.language.currentData() == "cuda")

    # ---- checks ---------------------------------------------------------------------------
    def param_values(self) -> dict[str, list]:
        out = {}
        for r in range(self.params.rowCount()):
            name, values = self._text(self.params, r, 0), self._text(self.params, r, 1)
            if not name:
                continue
            try:
                out[name] = _python_list(values)
            except ValueError as exc:
                raise GoalError(f"kernel.tune_params.{name}", str(exc)) from None
        return out

    def _check_restrictions(self) -> bool:
        """Inline validation: each line through the safe parser, against the parameter names."""
        try:
            names = list(self.param_values()) + _split(self.dims.text())
        except GoalError as exc:
            self.restriction_status.setText(f"⚠ {exc}")
            return False
        for i, line in enumerate(self.restrictions.toPlainText().splitlines()):
            if not line.strip():
                continue
            try:
                compile_restriction(line, names)
            except RestrictionError as exc:
                self.restriction_status.setText(f"⚠ line {i + 1}: {exc}")
                self.restriction_status.setProperty("invalid", True)
                return False
        self.restriction_status.setText("✓ restrictions are valid" if self.restrictions.toPlainText().strip() else "")
        self.restriction_status.setProperty("invalid", False)
        return True

    # ---- the goal -------------------------------------------------------------------------
    def _path(self, path: str, relative_to: Path | None) -> str:
        p = Path(path).expanduser().resolve()
        return os.path.relpath(p, relative_to) if relative_to else str(p)

    def build_goal(self, relative_to: Path | None = None) -> Goal:
        """The goal the page describes (paths absolute, or relative to `relative_to`)."""
        args = []
        for r in range(self.args.rowCount()):
            name, role, dtype = (self._text(self.args, r, c) for c in range(3))
            if not name:
                continue
            arg: dict[str, Any] = {"name": name, "role": role, "dtype": dtype}
            value = self._text(self.args, r, 3)
            if role == "scalar":
                arg["value"] = value
            else:
                arg["shape"] = _split(value)
                arg["fill"] = self._text(self.args, r, 4)
            args.append(arg)
        try:
            shapes = [[int(d) for d in _split(s)] for s in self.shapes.text().split(";") if s.strip()]
        except ValueError:
            raise GoalError("shapes", f"{self.shapes.text()!r}: sizes are integers, e.g. 1024, 1024") from None
        language = self.language.currentData()
        table = KernelTable(
            source=self._path(self.source.text(), relative_to) if self.source.text().strip() else "",
            entry=self.entry.currentText().strip(), language=language,
            tune_params=self.param_values(),
            restrictions=[r.strip() for r in self.restrictions.toPlainText().splitlines() if r.strip()],
            dims=_split(self.dims.text()), args=args)
        self._set_reference_fields(table, relative_to)
        if language == "cuda":
            table.problem_size = _split(self.problem_size.text())
            table.grid_div_x, table.grid_div_y, table.grid_div_z = (_split(e.text()) for e in self.grid_div)
            table.block_size_names = _split(self.block_size_names.text())
        return Goal(name=self.name.text().strip() or "my kernel", backend="cpu" if language == "c" else "cuda",
                    shapes=shapes, kernel=table, stop=StopRules(max_evals=self.max_evals.value()))

    def _set_reference_fields(self, table: KernelTable, relative_to: Path | None) -> None:
        kind, path = self.reference_kind.currentData(), self.reference_file.text().strip()
        if kind == "none":  # nothing is compared: every output says so
            for arg in table.args:
                if arg["role"] in ("output", "inout"):
                    arg["check"] = False
            return
        if not path:
            return  # the goal check names the missing reference
        path, function = self._path(path, relative_to), self.reference_function.currentText().strip()
        if kind == "python":
            table.reference = f"{path}:{function}"
        elif kind == "source":
            table.reference_source = path
            if function and function != table.entry:
                table.reference_entry = function
        else:
            table.expected = path

    def checked_goal(self, relative_to: Path | None = None, save_as: Path | None = None) -> Goal | None:
        """The goal checked as a run checks it; None (and the problem shown) when it is wrong."""
        from app.session import check_goal

        try:
            goal = self.build_goal(relative_to)
            if save_as is not None:
                goal.source_path = str(save_as.resolve())
            check_goal(goal)
        except GoalError as exc:
            self.problem.setText(f"⚠ {exc}")
            return None
        self.problem.setText("")
        return goal

    def save(self, path: str | Path) -> bool:
        path = Path(path)
        goal = self.checked_goal(path.parent.resolve(), save_as=path)
        if goal is None:
            return False
        path.write_text(goal_text(goal), encoding="utf-8")
        self._saved_dir = path.parent.resolve()
        self._saved = (str(path.resolve()), self.refresh_toml_preview())
        self.saved.emit(self._saved[0])
        return True

    def _save_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save goal", "goal.toml", "Goals (*.toml)")
        if path:
            self.save(path)

    def use_goal(self) -> Goal | None:
        goal = self.checked_goal()
        if goal is not None:
            if self._saved[0] and self.refresh_toml_preview() == self._saved[1]:
                goal.source_path = self._saved[0]  # unchanged since saved: File > Save writes there
            self.goal_ready.emit(goal)
            self.close()  # the goal is in the window now
        return goal

    # ---- the TOML as it will be saved ------------------------------------------------------
    def _watch(self, root: QWidget) -> None:
        """Every edit schedules a refresh of the TOML preview."""
        for w in root.findChildren(QLineEdit):
            w.textChanged.connect(self._changed)
        for w in root.findChildren(QComboBox):
            w.currentTextChanged.connect(self._changed)
        self.max_evals.valueChanged.connect(self._changed)
        self.restrictions.textChanged.connect(self._changed)
        self.params.itemChanged.connect(self._changed)
        self.args.itemChanged.connect(self._changed)

    def _changed(self, *_args: Any) -> None:
        self._preview_timer.start()

    def refresh_toml_preview(self) -> str:
        """The goal file's text (paths relative to where it was last saved, else absolute)."""
        try:
            text = goal_text(self.build_goal(self._saved_dir))
        except GoalError as exc:
            text = f"# not a goal yet: {exc}"
        if text != self.toml_preview.toPlainText():
            self.toml_preview.setPlainText(text)
        return text

    # ---- compile preview ------------------------------------------------------------------
    def compile_preview(self) -> bool:
        """Compile one sampled configuration in a subprocess; preview_done(ok, output) after."""
        goal = self.checked_goal()
        if goal is None or (self._process is not None and self._process.state() != QProcess.NotRunning):
            return False
        fd, self._preview_goal = tempfile.mkstemp(prefix="kernelswarm-preview-", suffix=".toml")
        os.close(fd)
        goal.save(self._preview_goal)
        self.preview_output.setPlainText("compiling…")
        self.output_tabs.setCurrentWidget(self.preview_output)
        self.compile_button.setEnabled(False)
        self.cancel_button.setEnabled(True)
        self._cancelled = False
        process = self._process = QProcess(self)
        process.setProcessChannelMode(QProcess.MergedChannels)
        process.setWorkingDirectory(str(Path(__file__).resolve().parents[2]))
        process.finished.connect(self._preview_finished)
        argv = entry_points.command("app.gpu.custom_reference.preview:main", self._preview_goal,
                                    isolated=False)  # the bundle's executable, frozen
        process.start(argv[0], argv[1:])
        return True

    def cancel_preview(self) -> None:
        """Stop a compile in progress (its output so far stays)."""
        if self._process is not None and self._process.state() != QProcess.NotRunning:
            self._cancelled = True
            self._process.kill()

    def _preview_finished(self, code: int, _status: Any) -> None:
        assert self._process is not None
        text = bytes(self._process.readAll().data()).decode("utf-8", errors="replace")
        self.preview_output.setPlainText(text if not self._cancelled else text + "\n(cancelled)")
        self.compile_button.setEnabled(True)
        self.cancel_button.setEnabled(False)
        try:
            os.unlink(self._preview_goal)
        except OSError:
            pass
        self.preview_done.emit(code == 0, text)

