"""A run that waits for a cluster that went away says so in the window and offers "Continue on
this machine"; the button's command reaches the engine process's session.

The whole path with a real cluster killed mid-run (the pool waiting, session.continue_here,
the rest evaluated here) is tests/test_cluster.py::test_the_cluster_going_away_never_blames_a_
candidate[choose]. Here the window runs a real replay goal in a real engine process; the Notice
is handed to the bridge as the engine's reader thread hands it over, because making the pool
wait needs a Ray head killed mid-run (about 30 s more of CI for the same wiring)."""

from __future__ import annotations

import threading

from PySide6.QtCore import Qt

from app.core.events import Notice
from app.core.messages import ContinueHere, Pause


def test_the_window_offers_to_go_on_here_and_sends_the_choice(qtbot, window, replay_goal):
    window.form.set_goal(replay_goal(max_evals=3000))
    qtbot.waitUntil(lambda: window.act_run.isEnabled(), timeout=3000)
    window.run_goal()
    qtbot.waitUntil(lambda: len(window.live.data) >= 5, timeout=30000)
    sent = []
    engine = window.controller._engine
    real_send = engine.send
    engine.send = lambda command: (sent.append(command), real_send(command))

    assert not window.continue_here.isVisible()
    window.bridge(Notice(text="the Ray cluster at 10.0.0.5:6379 is gone or has no worker left; "
                              "the run is paused until it comes back (nothing committed is lost)",
                         choices=("continue_here",)))
    qtbot.waitUntil(window.continue_here.isVisible, timeout=3000)
    assert window.notice_label.isVisible()
    assert "is paused until it comes back" in window.notice_label.toolTip()
    assert any(window.lessons.item(i).text().startswith("[notice] the Ray cluster at 10.0.0.5")
               for i in range(window.lessons.count()))

    qtbot.mouseClick(window.continue_here, Qt.LeftButton)
    assert not window.continue_here.isVisible()
    assert [type(c) for c in sent] == [ContinueHere]

    window.bridge(Notice(text="the Ray cluster at 10.0.0.5:6379 is back; the run goes on"))
    qtbot.waitUntil(lambda: "is back" in window.notice_label.text(), timeout=3000)
    assert not window.continue_here.isVisible()  # a notice without the choice hides it
    with qtbot.waitSignal(window.controller.finished, timeout=60000):
        window.act_stop.trigger()
    assert not window.continue_here.isVisible() and not window.notice_label.isVisible()


class _Session:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.done = threading.Event()

    def continue_here(self) -> bool:
        self.calls.append("continue_here")
        self.done.set()
        return True

    def pause(self) -> None:
        self.calls.append("pause")


def test_the_engine_hands_the_choice_to_its_session():
    """The engine's command dispatch (app.engine_process._Commands, what its pipe server calls
    for each command): a stand-in session records what reaches it (a real RunSession's
    continue_here is the pool's, tested with a real cluster in tests/test_cluster.py). The pipe
    server itself is not started here: a closed pipe makes it end the process, as it must."""
    from app.engine_process import _Commands

    commands = _Commands(None)
    session = _Session()
    commands._apply(Pause())  # before the session exists: applied when it is attached
    commands._apply(ContinueHere())
    commands.attach(session)
    assert session.calls == ["pause", "continue_here"]
    commands.attach(second := _Session())  # the next GPU model's run starts paused too
    assert second.calls == ["pause"]
