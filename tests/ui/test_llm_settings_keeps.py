"""Saving the LLM settings page keeps what it does not show (temperature, streaming) and the
reasoning effort chosen: the page built fresh settings, so a save reset them to defaults."""

from __future__ import annotations

from dataclasses import replace


def test_saving_keeps_hidden_fields_and_the_reasoning_effort(qtbot, tmp_path):
    from PySide6.QtWidgets import QDialogButtonBox

    from app.llm.settings import LLMSettings
    from app.ui.llm_settings import LLMSettingsDialog

    path = tmp_path / "llm.toml"
    replace(LLMSettings(), base_url="http://127.0.0.1:8000/v1", model="m", temperature=0.2,
            stream=False, reasoning_effort="low").validate().save(path)
    dialog = LLMSettingsDialog(path=path)
    qtbot.addWidget(dialog)
    assert dialog.effort.currentData() == "low"
    dialog.effort.setCurrentIndex(dialog.effort.findData("high"))
    dialog.buttons.button(QDialogButtonBox.Save).click()
    saved = LLMSettings.user(path)
    assert (saved.temperature, saved.stream, saved.reasoning_effort) == (0.2, False, "high")
