"""The history under every process layout the product has: real processes committing through the
project's Store while another one holds the file open and opens it once more (as the window does
after each run), with `kill -9` mixed in. Every row a writer reported committed must be there
afterwards, and SQLite's own integrity check must pass.

The processes run the code of the checkout this test imports (`app.__file__`), so running this
file with another checkout first on sys.path tests that checkout."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import app
from app.core.types import Evaluation
from app.goal import Goal
from app.store import Store, StoreError, check_file

ROOT = str(Path(app.__file__).resolve().parent.parent)

# A writer: open the history, commit a few rows, close it (the last connection of this process
# closes: that is when SQLite checkpoints and removes -wal/-shm if it believes it is alone), again.
WRITER = r"""
import sys
sys.path.insert(0, sys.argv[1])
from app.core.types import Evaluation
from app.goal import Goal
from app.store import Store, StoreError, check_file
db, name, rounds, per_round = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
goal = Goal(name=name, space="pnpoly_RTX_3090.json.gz")
with Store(db) as store:
    run = store.create_run(goal, {"name": name})
print("run", run, flush=True)
i = 0
for _ in range(rounds):
    with Store(db) as store:
        for _ in range(per_round):
            i += 1
            store.record_evaluation(run, i, Evaluation(key=f"k{i}", config={"i": i}, ok=True,
                                                       value=float(i)), float(i), float(i))
            print(i, flush=True)
print("done", flush=True)
"""

# The window's layout: one Store held open for the whole session, a second Store on the same
# path opened and closed again and again (run_usage after each run), and rows committed through
# the long-lived one.
HOLDER = r"""
import os, sys
sys.path.insert(0, sys.argv[1])
from app.core.types import Evaluation
from app.goal import Goal
from app.store import Store, StoreError, check_file
db, stop = sys.argv[2], sys.argv[3]
held = Store(db)
run = held.create_run(Goal(name="window", space="pnpoly_RTX_3090.json.gz"), {"name": "window"})
print("run", run, flush=True)
i = 0
while not os.path.exists(stop):
    again = Store(db)
    again.list_runs()
    again.llm_usage(run)
    again.close()
    i += 1
    held.record_evaluation(run, i, Evaluation(key=f"k{i}", config={"i": i}, ok=True,
                                              value=float(i)), float(i), float(i))
    print(i, flush=True)
    held.list_runs()
held.close()
print("done", flush=True)
"""


class _Proc:
    """A child process and what it reported on stdout (its run id, each committed index)."""

    def __init__(self, argv: list[str]) -> None:
        self.popen = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True)
        self.run: int | None = None
        self.committed = 0
        self.done = False
        self.killed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            word = line.split()
            if word[:1] == ["run"]:
                self.run = int(word[1])
            elif word[:1] == ["done"]:
                self.done = True
            elif word and word[0].isdigit():
                self.committed = int(word[0])

    def kill(self) -> None:
        self.killed = True
        self.popen.send_signal(signal.SIGKILL)

    def finish(self, timeout: float = 60.0) -> str:
        self.popen.wait(timeout)
        self._reader.join(timeout)
        assert self.popen.stderr is not None
        return self.popen.stderr.read()


@pytest.mark.slow  # 4-7 s on 2 cores: seven processes
def test_committed_rows_survive_a_holder_reopening_writers_closing_and_kill_9(tmp_path):
    db = tmp_path / "history.sqlite"
    stop = tmp_path / "stop"
    with Store(db):  # created (and migrated) once, before the crowd arrives
        pass
    py = sys.executable
    holder = _Proc([py, "-c", HOLDER, ROOT, str(db), str(stop)])
    writers = [_Proc([py, "-c", WRITER, ROOT, str(db), f"w{i}", "12", "2"]) for i in range(3)]
    victims = [_Proc([py, "-c", WRITER, ROOT, str(db), f"v{i}", "1000", "3"]) for i in range(2)]
    deadline = time.monotonic() + 60
    # each victim is killed mid-run, once it has committed something
    for victim in victims:
        while victim.committed < 5 + 7 * victims.index(victim) and victim.popen.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.01)
        victim.kill()
    for w in writers:
        w.popen.wait(60)
    # one more command once the crowd is gone (its close is the last but the holder's), then
    # the holder goes on committing for a moment
    late = _Proc([py, "-c", WRITER, ROOT, str(db), "late", "1", "1"])
    late.popen.wait(60)
    seen = holder.committed
    while holder.committed < seen + 3 and holder.popen.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.touch()
    writers.append(late)
    errors = {p: p.finish() for p in [holder, *writers, *victims]}
    problems = []  # every problem at once: a failure shows the lost rows and the errors
    for p in [holder, *writers]:
        if p.popen.returncode != 0 or not p.done:
            problems.append(f"process failed: {errors[p].strip().splitlines()[-1:]}")
    for v in victims:
        if v.popen.returncode != -signal.SIGKILL:
            problems.append(f"victim ended by itself: {errors[v][-500:]}")
    conn = sqlite3.connect(db)
    try:
        try:
            check = conn.execute("PRAGMA integrity_check").fetchall()
        except sqlite3.DatabaseError as exc:  # too broken to check
            check = [(str(exc),)]
        if check != [("ok",)]:
            problems.append(f"integrity_check: {check[:5]}")
            assert not problems, "\n".join(problems)
        for p in [holder, *writers, *victims]:
            if p.run is None:
                continue
            n, top = conn.execute("SELECT COUNT(*), COALESCE(MAX(idx), 0) FROM evaluations "
                                  "WHERE run_id = ?", (p.run,)).fetchone()
            # a killed writer may have committed one more row than it had time to print
            if n != top or n < p.committed:
                problems.append(f"run {p.run}: {p.committed} rows reported committed, {n} stored")
    finally:
        conn.close()
    assert not problems, "\n".join(problems)
    assert holder.committed > 0 and [w.committed for w in writers] == [24, 24, 24, 1]
    with Store(db) as store:  # and the project's own reader sees them
        assert len(store.list_runs()) == 1 + len(writers) + len(victims)


# The window's steps one at a time, driven over stdin: commit a row through the long-lived
# Store, or open and close a second Store on the same path.
STEPPED_HOLDER = r"""
import sys
sys.path.insert(0, sys.argv[1])
from app.core.types import Evaluation
from app.goal import Goal
from app.store import Store, StoreError, check_file
held = Store(sys.argv[2])
run = held.create_run(Goal(name="window", space="pnpoly_RTX_3090.json.gz"), {})
print("run", run, flush=True)
i = 0
for line in sys.stdin:
    if line.strip() == "reopen":
        Store(sys.argv[2]).close()
    else:
        i += 1
        held.record_evaluation(run, i, Evaluation(key=f"k{i}", config={}, ok=True, value=1.0),
                               1.0, 1.0)
    print(i, flush=True)
"""


def test_the_window_reopening_the_history_loses_no_row_another_process_commits(tmp_path):
    """The issue's sequence, step by step: the window holds the history and opens it once more
    (run_usage), a CLI command commits a row and exits (its last connection closes), the
    window commits again. Each row must be there afterwards."""
    db = tmp_path / "history.sqlite"
    Store(db).close()
    holder = subprocess.Popen([sys.executable, "-c", STEPPED_HOLDER, ROOT, str(db)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    assert holder.stdin is not None and holder.stdout is not None

    def step(command: str) -> None:
        holder.stdin.write(command + "\n")
        holder.stdin.flush()
        if not holder.stdout.readline().strip():  # the window's process died
            holder.wait(60)
            pytest.fail(f"the holding process failed at {command!r}: "
                        f"{holder.stderr.read().strip().splitlines()[-1:]}")

    held_run = int(holder.stdout.readline().split()[1])
    cli_runs = []
    try:
        for _ in range(2):
            step("write")
            step("reopen")
            cli = subprocess.run([sys.executable, "-c", WRITER, ROOT, str(db), "cli", "1", "1"],
                                 check=False, capture_output=True, text=True, timeout=60)
            assert cli.returncode == 0, cli.stderr[-2000:]
            cli_runs.append(int(cli.stdout.split()[1]))
            step("write")  # the window goes on committing
    finally:
        holder.stdin.close()
        holder.wait(60)
    assert holder.returncode == 0, holder.stderr.read()[-2000:]
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        counts = dict(conn.execute("SELECT run_id, COUNT(*) FROM evaluations GROUP BY run_id"))
    finally:
        conn.close()
    assert counts == {held_run: 4, **{r: 1 for r in cli_runs}}


def test_a_second_store_in_one_process_shares_the_live_connection(tmp_path):
    db = tmp_path / "history.sqlite"
    link = tmp_path / "link.sqlite"
    first = Store(db)
    link.symlink_to(db)
    second, third = Store(db), Store(link)
    try:
        assert second.conn is first.conn and third.conn is first.conn
        second.close()  # one sharer's close leaves the others working
        run = first.create_run(Goal(name="g", space="pnpoly_RTX_3090.json.gz"), {})
        assert third.get_run(run)["status"] == "running"
    finally:
        third.close()
        first.close()
    assert not Path(f"{db}-wal").exists()  # the last close checkpointed and cleaned up


def test_threads_opening_at_once_get_one_connection(tmp_path):
    db = tmp_path / "history.sqlite"
    got: list[Store] = []
    barrier = threading.Barrier(8)

    def open_and_write(n: int) -> None:
        barrier.wait()
        store = Store(db)
        got.append(store)
        run = store.create_run(Goal(name=f"t{n}", space="pnpoly_RTX_3090.json.gz"), {})
        store.record_evaluation(run, 1, Evaluation(key="k", config={}, ok=True, value=1.0), 1.0, 1.0)

    threads = [threading.Thread(target=open_and_write, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(s.conn) for s in got}) == 1
    assert len(got[0].list_runs()) == 8
    for s in got:
        s.close()


def test_a_forked_child_opens_its_own_connection(tmp_path):
    db = tmp_path / "history.sqlite"
    with Store(db) as parent:
        run = parent.create_run(Goal(name="g", space="pnpoly_RTX_3090.json.gz"), {})
        inherited = id(parent.conn)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: a Store of its own, never the parent's connection
            code = 1
            try:
                with Store(db) as child:
                    ok = id(child.conn) != inherited and child.get_run(run)["id"] == run
                    child.record_evaluation(run, 1, Evaluation(key="k", config={}, ok=True,
                                                               value=1.0), 1.0, 1.0)
                    # the parent's Store object, used here, opens the child's own connection
                    ok = ok and parent.conn is child.conn and parent.get_run(run)["id"] == run
                    code = 0 if ok else 2
            finally:
                os.write(write, bytes([code]))
                os._exit(code)
        os.close(write)
        code = os.read(read, 1)
        os.close(read)
        os.waitpid(pid, 0)
        assert code == b"\x00"
        assert len(parent.load_evaluations(run)) == 1  # the parent's connection still works


def test_a_file_open_in_this_process_is_never_opened_again_by_a_check(tmp_path, monkeypatch):
    """Closing any descriptor of the file would drop the live connection's locks: a second
    Store and an explicit check look at the registry, not at the file."""
    import builtins

    db = tmp_path / "history.sqlite"
    opened: list[str] = []
    real_open = builtins.open

    def spy(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    with Store(db):
        monkeypatch.setattr(builtins, "open", spy)
        Store(db).close()
        check_file(db)
        monkeypatch.undo()
    assert str(db) not in opened and str(db.resolve()) not in opened


def test_a_history_with_two_hard_links_is_refused_in_one_line(tmp_path):
    db = tmp_path / "history.sqlite"
    Store(db).close()
    os.link(db, tmp_path / "other-name.sqlite")
    with pytest.raises(StoreError, match="2 hard links"):
        Store(db)
