"""The window's layout and preferences kept between sessions: geometry, dock layout, theme,
plot axis; the default dock sizes on a first start."""

from __future__ import annotations

from PySide6.QtCore import QByteArray, Qt, QTimer


class WindowStateMixin:
    """Expects `settings`, `theme`, `live` and the docks on the window."""

    def _restore_settings(self) -> None:
        s = self.settings
        geometry = s.value("geometry")
        if isinstance(geometry, QByteArray) and not geometry.isEmpty():
            self.restoreGeometry(geometry)
        else:  # a first start: fit the screen (a 1366×768 laptop too)
            screen = self.screen().availableGeometry() if self.screen() else None
            self.resize(min(1500, screen.width()) if screen else 1500,
                        min(950, screen.height()) if screen else 950)
        state = s.value("windowState")
        self._state_restored = isinstance(state, QByteArray) and not state.isEmpty()
        if self._state_restored:
            self.restoreState(state)
        self.set_theme(str(s.value("theme", "system")))
        self.live.set_use_time(str(s.value("plotAgainstTime", "false")).lower() == "true")
        self._rebuild_recent()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if not self._shown_once and not self._state_restored:  # the user's layout wins
            QTimer.singleShot(0, self.fit_docks)
        self._shown_once = True

    def fit_docks(self) -> None:
        """Default dock sizes for the window's size: side docks wide enough to read (the
        candidate tabs all show), the candidate table a third of the height; the plots in
        the middle take the rest and shrink first."""
        w, h = self.width(), self.height()
        self.resizeDocks([self.goal_dock, self.detail_dock],
                         [max(340, min(440, int(w * 0.2))), max(390, min(480, int(w * 0.24)))],
                         Qt.Horizontal)
        self.resizeDocks([self.table_dock], [max(200, int(h * 0.3))], Qt.Vertical)

    def save_settings(self) -> None:
        s = self.settings
        s.setValue("geometry", self.saveGeometry())
        s.setValue("windowState", self.saveState())
        s.setValue("theme", self.theme.mode)
        s.setValue("plotAgainstTime", self.live.convergence.use_time)
        s.sync()
