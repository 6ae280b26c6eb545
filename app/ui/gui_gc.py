"""Python's cyclic garbage collector runs in whichever thread happens to allocate when a
generation fills up. In the window that includes the thread that relays the engine process's
messages: a reference cycle that holds Qt objects, collected there, destroys them off the GUI
thread, which Qt does not allow (seen in the test suite: a collection in a publishing thread
took Qt's lock while the GUI thread, deleting widgets, waited for the GIL; both hung). So
while the window runs, automatic collection is off and pyqtgraph's GarbageCollector collects
on a timer in the GUI thread instead."""

from __future__ import annotations

import gc

from pyqtgraph.util.garbage_collector import GarbageCollector

INTERVAL_S = 1.0  # how often the GUI thread looks at the generations' counts

_COLLECTOR: GarbageCollector | None = None


def collect_on_gui_thread(interval_s: float = INTERVAL_S) -> GarbageCollector:
    """Turn automatic collection off and collect from a timer in this (the GUI) thread. Call
    once the QApplication exists; later calls return the same collector."""
    global _COLLECTOR
    if _COLLECTOR is None:
        _COLLECTOR = GarbageCollector(interval=interval_s)
    return _COLLECTOR


def collect_anywhere() -> None:
    """Back to Python's own automatic collection (tests that installed the timer undo it)."""
    global _COLLECTOR
    if _COLLECTOR is not None:
        _COLLECTOR.timer.stop()
        _COLLECTOR = None
    gc.enable()
