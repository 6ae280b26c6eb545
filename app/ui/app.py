"""`kernelswarm` with no arguments: the desktop application."""

from __future__ import annotations

import argparse
import logging
import sys

log = logging.getLogger(__name__)

GUI_SWITCH_INTERVAL_S = 0.001


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="kernelswarm", description="KernelSwarm desktop application")
    p.add_argument("goal", nargs="?", help="a goal file (TOML) to open")
    p.add_argument("--db", help="history database (default: the user data directory)")
    p.add_argument("--theme", choices=("system", "light", "dark"), help="colour theme")
    args, _qt_args = p.parse_known_args(argv)
    return args


def configure_application(app) -> None:
    """What the window's process sets once its QApplication exists (the real-window script
    does the same): its desktop entry, and garbage collected on the GUI thread only."""
    from app.ui.gui_gc import collect_on_gui_thread

    app.setDesktopFileName("kernelswarm")
    collect_on_gui_thread()


def run_gui(argv: list[str] | None = None) -> int:
    """Open the main window and run the event loop; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parse(argv)

    from app.ui.preflight import problem

    why_not = problem()
    if why_not:  # Qt would abort with this reason hidden in its log
        print(f"kernelswarm: {why_not}", file=sys.stderr)
        return 2

    from PySide6.QtCore import QCoreApplication
    from PySide6.QtWidgets import QApplication

    from app import __version__
    from app.session.registries import wire
    from app.ui.errors import ExceptionHandler, setup_logging

    wire()

    # Engine threads share the GIL with the GUI; PySide releases it on every Qt call, so a
    # short switch interval lets the GUI thread win it back quickly (bench/ui_responsiveness.py).
    sys.setswitchinterval(GUI_SWITCH_INTERVAL_S)
    log_path = setup_logging()
    QCoreApplication.setOrganizationName("KernelSwarm")
    QCoreApplication.setApplicationName("KernelSwarm")
    QCoreApplication.setApplicationVersion(__version__)
    app = QApplication.instance() or QApplication([sys.argv[0] if sys.argv else "kernelswarm"])
    configure_application(app)
    handler = ExceptionHandler(app)
    handler.install()
    log.info("KernelSwarm %s starting; log at %s", __version__, log_path)

    from app.ui.main_window import MainWindow, app_icon
    from app.ui.theme import ThemeManager

    app.setWindowIcon(app_icon())
    theme = ThemeManager(app)
    try:
        window = MainWindow(db_path=args.db, theme=theme)
    except Exception as exc:  # e.g. the history database is not SQLite: say so, do not crash
        from PySide6.QtWidgets import QMessageBox

        log.exception("cannot open the main window")
        QMessageBox.critical(None, "KernelSwarm", f"KernelSwarm cannot start:\n{exc}")
        return 1
    if args.theme:
        window.set_theme(args.theme)
    if args.goal:
        window.open_goal(args.goal)
    window.show()
    return int(app.exec())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_gui())
