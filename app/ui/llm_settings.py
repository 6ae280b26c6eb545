"""The LLM endpoint settings page: base URL, model, limits and budgets, and the API key.

The settings are saved to the user's config directory (app.llm.settings.user_settings_path);
a goal's own [llm] table overrides them. The key is never written there: it is saved to the
OS keyring when one is available, otherwise the page says which environment variable to set.
"""

from __future__ import annotations

from dataclasses import replace

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.llm.settings import (
    KEY_ENV_VARS,
    REASONING_EFFORTS,
    ROLES,
    LLMSettings,
    LLMSettingsError,
    api_key_source,
    store_api_key_in_keyring,
    user_settings_path,
)

ROLE_TITLES = {"memory": "memory-access specialist", "tiling": "tiling specialist",
               "fixer": "fixer (repairs near misses)"}


class LLMSettingsDialog(QDialog):
    def __init__(self, parent: QWidget | None = None, path=None) -> None:
        super().__init__(parent)
        self.setWindowTitle("LLM endpoint settings")
        self.path = path or user_settings_path()
        try:
            current = LLMSettings.user(self.path)
        except LLMSettingsError:
            current = LLMSettings()  # a broken file is replaced on save, not fatal
        self.current = current  # what the page does not show (temperature, stream) is kept
        form = QFormLayout()
        self.base_url = QLineEdit(current.base_url)
        self.base_url.setPlaceholderText("https://api.openai.com/v1 or http://127.0.0.1:11434/v1")
        self.model = QLineEdit(current.model)
        self.timeout = _double(current.timeout_s, 0.1, 3600, " s")
        self.concurrent = _int(current.max_concurrent, 1, 64)
        self.max_tokens = _int(current.max_tokens, 16, 200_000)
        self.token_budget = _int(current.run_token_budget, 0, 100_000_000)
        self.token_budget.setSpecialValueText("no cap")
        self.cost_budget = _double(current.run_cost_budget, 0, 1e6, "")
        self.cost_budget.setSpecialValueText("no cap")
        self.price_in = _double(current.price_prompt_per_mtok, 0, 1e4, " per M tokens")
        self.price_out = _double(current.price_completion_per_mtok, 0, 1e4, " per M tokens")
        self.effort = QComboBox()
        self.effort.addItem("the endpoint's default", "")
        for effort in REASONING_EFFORTS:
            self.effort.addItem(effort, effort)
        self.effort.setCurrentIndex(max(0, self.effort.findData(current.reasoning_effort)))
        self.effort.setToolTip("How long a reasoning model may think (sent as reasoning_effort; "
                               "an endpoint that refuses it is asked again without it)")
        self.roles = {r: QCheckBox(ROLE_TITLES.get(r, r)) for r in ROLES}
        for r, box in self.roles.items():
            box.setChecked(r in current.roles)
        roles_box = QVBoxLayout()
        for box in self.roles.values():
            roles_box.addWidget(box)
        roles_widget = QWidget()
        roles_widget.setLayout(roles_box)
        form.addRow("Base URL", self.base_url)
        form.addRow("Model", self.model)
        form.addRow("Request timeout", self.timeout)
        form.addRow("Concurrent requests", self.concurrent)
        form.addRow("Reply cap (tokens)", self.max_tokens)
        form.addRow("Reasoning effort", self.effort)
        form.addRow("Token budget per run", self.token_budget)
        form.addRow("Cost budget per run", self.cost_budget)
        form.addRow("Price, prompt", self.price_in)
        form.addRow("Price, completion", self.price_out)
        form.addRow("Agent roles", roles_widget)

        self.key = QLineEdit()
        self.key.setEchoMode(QLineEdit.Password)
        self.key.setPlaceholderText("paste a key to save it in the OS keyring")
        self.save_key = QPushButton("Save key in keyring")
        self.save_key.clicked.connect(self._save_key)
        key_row = QHBoxLayout()
        key_row.addWidget(self.key, 1)
        key_row.addWidget(self.save_key)
        form.addRow("API key", key_row)
        self.key_status = QLabel()
        self.key_status.setWordWrap(True)
        form.addRow("", self.key_status)
        self._show_key_source()

        self.error = QLabel()
        self.error.setObjectName("error")
        self.error.setStyleSheet("color: #c0392b")
        self.error.setWordWrap(True)
        self.buttons = QDialogButtonBox(QDialogButtonBox.Save | QDialogButtonBox.Cancel)
        self.buttons.accepted.connect(self._save)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.error)
        layout.addWidget(QLabel(f"Saved to {self.path}; a goal's [llm] table overrides these."))
        layout.addWidget(self.buttons)
        for w in (self.base_url, self.model):
            w.textChanged.connect(self._validate)
        for box in self.roles.values():
            box.toggled.connect(self._validate)
        self._validate()

    def settings(self) -> LLMSettings:
        """The settings as entered (raises LLMSettingsError naming the field)."""
        return replace(
            self.current,
            base_url=self.base_url.text().strip(), model=self.model.text().strip(),
            timeout_s=self.timeout.value(), max_concurrent=self.concurrent.value(),
            max_tokens=self.max_tokens.value(), run_token_budget=self.token_budget.value(),
            run_cost_budget=self.cost_budget.value(), price_prompt_per_mtok=self.price_in.value(),
            price_completion_per_mtok=self.price_out.value(),
            roles=[r for r, box in self.roles.items() if box.isChecked()],
            reasoning_effort=self.effort.currentData() or "",
        ).validate()

    def _validate(self) -> bool:
        try:
            self.settings()
        except LLMSettingsError as exc:
            self.error.setText(f"{exc.field}: {exc.problem}")
            self.buttons.button(QDialogButtonBox.Save).setEnabled(False)
            return False
        self.error.setText("")
        self.buttons.button(QDialogButtonBox.Save).setEnabled(True)
        return True

    def _save(self) -> None:
        if self._validate():
            self.settings().save(self.path)
            self.accept()

    def _save_key(self) -> None:
        key = self.key.text().strip()
        if not key:
            return
        try:
            store_api_key_in_keyring(key)
        except Exception as exc:  # noqa: BLE001 - no keyring package or no backend here
            self.key_status.setText(f"Could not save the key in the OS keyring ({exc}). "
                                    f"Set {KEY_ENV_VARS[0]} in the environment instead.")
            return
        finally:
            self.key.clear()  # the key never lingers in the widget
        self._show_key_source()

    def _show_key_source(self) -> None:
        source = api_key_source()
        self.key_status.setText(
            f"Key found in {source}." if source else
            f"No key found: save one in the keyring or set {KEY_ENV_VARS[0]} "
            f"(local servers such as Ollama or vLLM need none).")


def _int(value: int, lo: int, hi: int) -> QSpinBox:
    box = QSpinBox()
    box.setRange(lo, hi)
    box.setValue(value)
    return box


def _double(value: float, lo: float, hi: float, suffix: str) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setDecimals(3)
    box.setRange(lo, hi)
    box.setValue(value)
    box.setSuffix(suffix)
    return box
