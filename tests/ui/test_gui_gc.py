"""Garbage is collected on the GUI thread, never in a thread that merely allocates (the one
relaying the engine's messages): Qt objects freed off the GUI thread can hang the window."""

from __future__ import annotations

import gc
import threading
import weakref

from app.ui.gui_gc import collect_anywhere, collect_on_gui_thread


class _Node:
    pass


def _cycle_collected_on(qtbot, with_timer: bool) -> list[threading.Thread]:
    """Make an unreachable cycle, let another thread allocate plenty, and return the thread
    the cycle was freed on."""
    gc.collect()
    freed_on: list[threading.Thread] = []
    kept: list[list] = []
    if with_timer:
        collect_on_gui_thread(interval_s=0.05)
    else:
        gc.enable()  # Python's own (conftest turns it off while a Qt test runs)
    try:
        node = _Node()
        node.me = node  # only the cyclic collector can free it
        weakref.finalize(node, lambda: freed_on.append(threading.current_thread()))
        del node

        def allocate() -> None:  # containers, kept alive: generation 0 fills up
            kept.append([[{}] for _ in range(20_000)])

        worker = threading.Thread(target=allocate, name="relay")
        worker.start()
        worker.join()
        qtbot.waitUntil(lambda: bool(freed_on), timeout=5000)
    finally:
        collect_anywhere()
    return freed_on


def test_with_the_timer_a_cycle_is_freed_on_the_gui_thread(qtbot):
    assert _cycle_collected_on(qtbot, with_timer=True) == [threading.main_thread()]
    assert gc.isenabled()  # undone for the tests that follow


def test_without_it_the_allocating_thread_frees_it(qtbot):
    """What the timer prevents: Python's own collection runs in the thread that allocates."""
    freed_on = _cycle_collected_on(qtbot, with_timer=False)
    assert [t.name for t in freed_on] == ["relay"]
