"""The window's exports: the HTML report, the best kernel's source, the data (CSV, T4, JSON)
and the convergence plot as an image."""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QMessageBox

log = logging.getLogger(__name__)


class ExportsMixin:
    """Expects `store()`, `current_run_id`, `live` and `_notify` on the window."""

    def _ask_path(self, title: str, name: str, filters: str) -> str:
        path, _ = QFileDialog.getSaveFileName(self, title, name, filters)
        return path

    def export_report(self, path: str | Path) -> Path:
        """The same report as `kernelswarm export RUN --format html`: a light print theme
        whatever the app's theme, charts drawn from the stored run."""
        from app.export import write_atomic
        from app.html_report import render_report

        write_atomic(path, render_report(self.store(), self.current_run_id))
        return Path(path)

    def export_report_dialog(self) -> None:
        if self.current_run_id is None:
            return
        path = self._ask_path("Export run report", f"kernelswarm-run-{self.current_run_id}.html",
                              "HTML (*.html)")
        if path:
            self._export(lambda: self.export_report(path), path)

    def export_source_dialog(self) -> None:
        from app.export import write_atomic
        from app.ui.report import best_source_text

        if self.current_run_id is None:
            return
        try:
            text, suffix = best_source_text(self.store(), self.current_run_id)
        except ValueError as exc:
            self._notify("Export best kernel", str(exc), QMessageBox.Information)
            return
        path = self._ask_path("Export best kernel", f"best-run-{self.current_run_id}{suffix}",
                              f"*{suffix}")
        if path:
            self._export(lambda: write_atomic(path, text), path)

    def export_data_dialog(self, fmt: str) -> None:
        from app.ui.report import export_data

        if self.current_run_id is None:
            return
        suffix = {"csv": ".csv", "t4": ".t4.json", "json": ".json"}[fmt]
        path = self._ask_path(f"Export {fmt.upper()}", f"kernelswarm-run-{self.current_run_id}{suffix}",
                              f"*{suffix}")
        if path:
            self._export(lambda: export_data(self.store(), self.current_run_id, fmt, path), path)

    def export_plot_dialog(self) -> None:
        from app.ui.report import export_plot_image

        path = self._ask_path("Export plot image", "convergence.png", "PNG (*.png);;SVG (*.svg)")
        if path:
            self._export(lambda: export_plot_image(self.live.convergence, path), path)

    def _export(self, fn, path: str) -> None:
        try:
            fn()
        except Exception as exc:
            log.exception("export failed")
            self._notify("Export", f"Could not write {path}:\n{exc}", QMessageBox.Warning)
            return
        self.statusBar().showMessage(f"Exported {path}", 6000)
