"""Light / dark / system themes for the Qt widgets and the pyqtgraph plots that follow them."""

from __future__ import annotations

from dataclasses import dataclass

import pyqtgraph as pg
from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QColor, QFont, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

from app.html_report import AGENT_COLOURS, agent_colour

THEMES = ("system", "light", "dark")

# Fixed colours per agent so a run and its history look the same everywhere.
AGENT_COLORS = AGENT_COLOURS  # one table for the app and the HTML report (app.html_report)

# One marker per failure reason (pyqtgraph symbol names).
FAILURE_SYMBOLS = {
    "compile_failed": "x",
    "runtime_failed": "t",
    "invalid_config": "s",
    "verification_failed": "d",
    "timeout": "star",
    "crash": "h",
    "resource_limit": "p",
    "static_check": "+",
    "out_of_memory": "o",
}

OVERLAY_COLORS = ["#4e79a7", "#e15759", "#59a14f", "#f28e2b", "#b07aa1", "#76b7b2", "#edc948"]


def label_font(widget, point_size: float | None = None, bold: bool = False) -> QFont:
    """A widget's font, resized and/or bold. Used instead of a style sheet: a label with its
    own style sheet keeps the palette it was polished with, so after a theme switch it drew
    near-black text on the dark theme's grey."""
    font = QFont(widget.font())
    if point_size is not None:
        font.setPointSizeF(point_size)
    font.setBold(bold)
    return font


def agent_color(agent: str, order: int = 0) -> str:
    """The agent's colour, the report's too (`order` is kept for callers; the name decides)."""
    return agent_colour(agent)


def failure_symbol(reason: str) -> str:
    return FAILURE_SYMBOLS.get(reason, "x")


@dataclass(frozen=True)
class PlotTheme:
    dark: bool
    background: str
    foreground: str
    grid_alpha: float
    best_pen: str
    baseline: str
    target: str
    limit: str
    failure: str


LIGHT = PlotTheme(False, "#ffffff", "#333333", 0.25, "#1f1f1f", "#7f7f7f", "#2e9d4f", "#c0392b", "#c0392b")
DARK = PlotTheme(True, "#1e1f22", "#d0d0d0", 0.2, "#f5f5f5", "#9a9a9a", "#5dd47f", "#ff6b5b", "#ff6b5b")


def _system_is_dark() -> bool:
    hints = QGuiApplication.styleHints()
    scheme = getattr(hints, "colorScheme", None)
    if scheme is not None:
        try:
            return scheme() == Qt.ColorScheme.Dark
        except (AttributeError, TypeError, RuntimeError):  # older Qt: fall back to the palette
            pass
    return QGuiApplication.palette().color(QPalette.Window).lightness() < 128


def _dark_palette() -> QPalette:
    p = QPalette()
    base, window, text = QColor("#1e1f22"), QColor("#2b2d30"), QColor("#dfe1e5")
    p.setColor(QPalette.Window, window)
    p.setColor(QPalette.WindowText, text)
    p.setColor(QPalette.Base, base)
    p.setColor(QPalette.AlternateBase, QColor("#26282b"))
    p.setColor(QPalette.ToolTipBase, window)
    p.setColor(QPalette.ToolTipText, text)
    p.setColor(QPalette.Text, text)
    p.setColor(QPalette.Button, window)
    p.setColor(QPalette.ButtonText, text)
    p.setColor(QPalette.BrightText, QColor("#ff6b5b"))
    p.setColor(QPalette.Highlight, QColor("#3574f0"))
    p.setColor(QPalette.HighlightedText, QColor("#ffffff"))
    p.setColor(QPalette.Link, QColor("#589df6"))
    p.setColor(QPalette.PlaceholderText, QColor("#7f8389"))
    for role in (QPalette.Text, QPalette.ButtonText, QPalette.WindowText):
        p.setColor(QPalette.Disabled, role, QColor("#6f737a"))
    return p


_ACTIVE: ThemeManager | None = None


class ThemeManager(QObject):
    """Applies a theme to the application and tells plot owners when it changes."""

    changed = Signal(object)  # PlotTheme

    def __init__(self, app: QApplication, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._app = app
        self._default_palette = QPalette(app.palette())
        self.mode = "system"
        self.current = LIGHT
        app.setStyle("Fusion")
        global _ACTIVE
        _ACTIVE = self

    def apply(self, mode: str) -> PlotTheme:
        if mode not in THEMES:
            mode = "system"
        self.mode = mode
        dark = _system_is_dark() if mode == "system" else mode == "dark"
        self._app.setPalette(_dark_palette() if dark else self._default_palette)
        self.current = DARK if dark else LIGHT
        pg.setConfigOptions(background=self.current.background, foreground=self.current.foreground,
                            antialias=False)
        self.changed.emit(self.current)
        return self.current


def current_plot_theme() -> PlotTheme:
    return _ACTIVE.current if _ACTIVE is not None else LIGHT


def style_plot(widget: pg.PlotWidget, theme: PlotTheme) -> None:
    """Recolour an existing plot: background, axes, labels, grid."""
    widget.setBackground(theme.background)
    item = widget.getPlotItem()
    for name in ("left", "bottom", "right", "top"):
        axis = item.getAxis(name)
        axis.setPen(pg.mkPen(theme.foreground))
        axis.setTextPen(pg.mkPen(theme.foreground))
    item.showGrid(x=True, y=True, alpha=theme.grid_alpha)
    if item.titleLabel is not None:
        item.titleLabel.setAttr("color", theme.foreground)
        item.titleLabel.setText(item.titleLabel.text)
    legend = getattr(item, "legend", None)
    if legend is not None:  # labels drawn before a theme switch keep their colour otherwise
        legend.setLabelTextColor(theme.foreground)
        for _sample, label in legend.items:
            label.setText(label.text)
