"""Entry point of the frozen bundle.

`kernelswarm` is the CLI (bare, it opens the GUI); on Windows and macOS the bundle also holds
`kernelswarm-gui`, the same program built windowed, which always opens the GUI.

KERNELSWARM_STARTUP_PROBE=<epoch seconds> makes the GUI print how long it took from that moment
until its main window was shown, then quit: the smoke test's way to check that the frozen GUI
comes up, and to time its cold start. It changes nothing else.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
import time

PROBE_ENV = "KERNELSWARM_STARTUP_PROBE"
PROBE_DEADLINE_S = 60.0


def _install_startup_probe(started: float) -> None:
    """Wrap QApplication.exec: poll until a QMainWindow is visible, report, quit."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication, QMainWindow

    original_exec = QApplication.exec

    def exec_with_probe(*_args: object) -> int:
        app = QApplication.instance()
        timer = QTimer(app)

        def poll() -> None:
            windows = [w for w in QApplication.topLevelWidgets()
                       if isinstance(w, QMainWindow) and w.isVisible()]
            waited = time.time() - started
            if windows:
                timer.stop()
                print(f"startup probe: main window up after {waited:.3f} s: "
                      f"{windows[0].windowTitle()!r}", flush=True)
                QTimer.singleShot(0, app.quit)
            elif waited > PROBE_DEADLINE_S:
                timer.stop()
                print(f"startup probe: no main window after {waited:.0f} s", flush=True)
                QTimer.singleShot(0, lambda: app.exit(3))

        timer.timeout.connect(poll)
        timer.start(20)
        return original_exec()

    QApplication.exec = exec_with_probe


def _cli_knows(command: str) -> bool:
    from app.cli import build_parser

    for action in build_parser()._subparsers._group_actions:
        if command in getattr(action, "choices", {}):
            return True
    return False


def main() -> int:
    # Our own child processes (sandbox cells, the compile helper, the sandbox probe, a Kernel
    # Tuner script's cell, the compile preview) are this executable with ENTRY_FLAG: nothing
    # else is imported first (a cell must be single-threaded when it enters its sandbox).
    from app.core.entry_points import ENTRY_FLAG, run  # imports nothing else

    if sys.argv[1:2] == [ENTRY_FLAG]:
        return run(sys.argv[2] if len(sys.argv) > 2 else "", sys.argv[3:])
    multiprocessing.freeze_support()  # workers spawned by multiprocessing (Windows, libraries)
    probe = os.environ.get(PROBE_ENV)
    if probe:
        try:
            started = float(probe)
        except ValueError:
            started = time.time()
        _install_startup_probe(started)

    argv = sys.argv[1:]
    gui_launcher = os.path.basename(sys.executable).lower().startswith("kernelswarm-gui")
    if gui_launcher:
        argv = []  # a file manager may pass a path; the GUI opens goals itself
    if argv[:1] == ["selftest"] and not _cli_knows("selftest"):
        from app.selftest import main as selftest_main

        return selftest_main(argv[1:])
    from app.cli import main as cli_main

    return int(cli_main(argv) or 0)


if __name__ == "__main__":
    sys.exit(main())
