"""A run of your own C kernel, one of whose variants misses a ';': the candidate view shows
the real source, the compile command and the compiler's own error, the checks stage by stage
and where the time went; the run's summary says what failed and why (not "recorded
measurement", which is only for replay runs)."""

from __future__ import annotations

import shutil

import pytest
from project_paths import GOALS
from PySide6.QtCore import QSettings

from app.core.types import Evaluation
from app.goal import Goal
from app.store import Store

pytestmark = pytest.mark.slow  # one real run: two compiles, one verified and timed (~15 s)


@pytest.fixture(scope="module")
def custom_run(tmp_path_factory, _machine_roofs):
    """(history path, run id, goal dir): ORDER=1 does not compile, ORDER=0 runs."""
    from app.session import RunSession

    d = tmp_path_factory.mktemp("kernel")
    for f in (GOALS / "custom" / "pnpoly_c").iterdir():
        shutil.copy(f, d / f.name)
    text = (d / "pnpoly.c").read_text()
    k = text.index(";", text.index("odd[c] ^=", text.index("#else")))
    (d / "pnpoly.c").write_text(text[:k] + text[k + 1:])
    goal_text = (d / "goal.toml").read_text()
    goal_text = goal_text.replace("[[100000, 40]]", "[[4000, 12]]").replace(
        "CHUNK = [1, 4, 8, 16, 32, 64], ORDER = [0, 1], THREADS = [1, 2]",
        "CHUNK = [4], ORDER = [0, 1], THREADS = [1]")
    (d / "goal.toml").write_text(goal_text)
    goal = Goal.load(d / "goal.toml")
    goal.stop.max_evals, goal.swarm.workers = 2, 1
    home = tmp_path_factory.mktemp("user")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KERNELSWARM_CACHE", str(home / "cache"))
        if _machine_roofs is not None:  # the roofs' cache is trusted and MAC-checked
            from app.gpu import trusted_cache
            from app.gpu.cpu import memory_roof as cpu_roof

            trusted_cache.store_trusted(cpu_roof.default_file(), _machine_roofs.read_bytes())
        with Store(d / "h.sqlite") as store:
            session = RunSession(goal, store=store)
            session.run()
    return d / "h.sqlite", session.run_id, d


@pytest.fixture
def opened(qtbot, tmp_path, custom_run):
    from app.ui.main_window import MainWindow

    db, run_id, _ = custom_run
    w = MainWindow(db_path=db, settings=QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat))
    w.interactive = False
    qtbot.addWidget(w)
    w.resize(1366, 768)
    w.show()
    w.open_run(run_id)
    w.table.flush()
    yield w
    w.close()


def _select(window, ok: bool):
    ev = next(e for _, e, _ in window.table.model.rows if e.ok is ok)
    assert window.table.select_key(ev.key)
    return ev


def test_a_failed_compile_shows_source_command_and_compiler_error(opened):
    ev = _select(opened, ok=False)
    detail = opened.detail
    assert ev.reason == "compile_failed"
    source, log, checks = (detail.source.toPlainText(), detail.log.toPlainText(),
                           detail.verification.toPlainText())
    for text in (source, log, checks):
        assert "recorded measurement" not in text.lower()
    # the kernel's own text, under the command that compiled it with this candidate's parameters
    assert "void pnpoly(" in source and "Compiled as: cc" in source and "-DORDER=1" in source
    # the very file the compiler got: its error's line number is the line shown
    line = int(ev.detail.split("kernel.c:")[1].split(":")[0])
    code, _language = detail.source_text(ev)
    assert "vertices[2 * k + 1])" in code.splitlines()[line - 1]
    # the command and the compiler's own output, its error line with the file and position
    command = log.split("Compiler command:")[1].split("Compiler output:")[0]
    assert "-DORDER=1" in command and "kernel.c" in command
    assert "error: expected" in log.split("Compiler output:")[1]
    # the checks: what failed and every stage it went through
    assert "Did not compile" in checks and "expected" in checks
    assert "compile" in checks and "static_check" in checks
    assert "Not verified" in checks


def test_a_verified_candidate_shows_one_hardware_fraction_and_its_stage_profile(opened):
    ev = _select(opened, ok=True)
    summary = opened.detail.summary.toPlainText()
    assert ev.metrics.get("fraction_of_roof") is not None
    assert summary.count("% of the ") == 1 and "roof" in summary.split("% of the ")[1]
    for raw in ("fraction_of_roof", "fraction_of_copy_bandwidth", "roof_gbs"):
        assert raw not in summary
    assert "Where the time went" in summary
    profile = summary.split("Where the time went")[1]
    for stage in ("compile", "verify", "time"):
        assert stage in profile
    # the table's column is the same one fraction, named in its tooltip
    model = opened.table.model
    row = model.view_row_of(ev.key)
    cell = model.data(model.index(row, 5))
    tip = model.data(model.index(row, 5), 3)  # Qt.ToolTipRole
    assert cell.endswith("%") and "roof" in tip


def test_the_run_summary_says_what_failed(opened, custom_run):
    lines = opened.live.summary_panel.lines()
    assert any(line.startswith("1 did not compile: ") and "error: expected" in line
               for line in lines), lines
    assert opened.live.summary_panel.isVisible()


def test_a_run_where_nothing_succeeded_says_why(qtbot, custom_run):
    from app.run_summary import summarize
    from app.ui.live_view import LiveView

    db, run_id, _ = custom_run
    with Store(db) as store:
        run, rows = store.get_run(run_id), store.evaluation_rows(run_id)
    failed = [r for r in rows if not r["ok"]]  # the same run as if only its failure had run
    view = LiveView()
    qtbot.addWidget(view)
    view.show_summary(summarize(run, failed, unit="ms"))
    lines = view.summary_panel.lines()
    assert lines[0].startswith("Nothing succeeded in 1 evaluations")
    assert "did not compile" in lines[1] and "kernel.c:" in lines[1]


def test_an_edited_kernel_still_shows_what_ran(opened, custom_run):
    _, run_id, d = custom_run
    kernel = d / "pnpoly.c"
    before = kernel.read_text()
    kernel.write_text("/* EDITED AFTER THE RUN */\n" + before)
    try:
        opened.open_run(run_id)  # reopened after the user edited the kernel
        opened.table.flush()
        _select(opened, ok=False)
        source = opened.detail.source.toPlainText()
        # the text the run kept when it started, not the file as it is now
        assert "EDITED AFTER THE RUN" not in source and "void pnpoly(" in source
        assert "changed after this run started" not in source
    finally:
        kernel.write_text(before)


def test_a_run_that_kept_no_copy_says_its_file_changed(custom_run):
    """Runs stored before the kernel's text was kept with them: today's file, said so."""
    from app.ui.candidate_source import RunSource

    d = custom_run[2]
    goal = Goal.load(d / "goal.toml")
    ev = Evaluation(key="k", config={"CHUNK": 4, "ORDER": 0, "THREADS": 1}, ok=True, value=1.0)
    source = RunSource(goal, started_at=(d / "pnpoly.c").stat().st_mtime - 60)
    assert "void pnpoly(" in source.text(ev)[0]
    assert "pnpoly.c changed after this run started" in source.changed_note()
    assert RunSource(goal, started_at=0.0, kept={"text": "kept"}).changed_note() == ""
