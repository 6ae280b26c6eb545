"""`kernelswarm run`, `kernelswarm show`, the HTML report and the window (reopened) give the
same improvement count from the same stored run: new bests clear of the timing noise, and
those inside it. A real replay run over the small recorded space, every figure given a
±15 % spread (a recorded space's extra numeric fields are the figures' metrics)."""

from __future__ import annotations

import gzip
import json
import re

import pytest

from app.cli import main
from app.core.noise import ImprovementCount, new_bests
from app.html_report import render_report
from app.store.db import Store
from app.ui.buffers import RunData

SENTENCE = re.compile(r"improvements: (\d+) clear of the timing noise(?:, (\d+) more new bests? "
                      r"within it)?", re.IGNORECASE)


@pytest.fixture
def noisy_goal_file(tmp_path, small_space):
    data = json.loads(gzip.decompress(small_space.read_bytes()))
    for rec in data["cache"].values():
        rec["spread"] = 0.3  # p10-p90 is 30 % of the median: ±15 %
    space = tmp_path / "pnpoly_spread.json"
    space.write_text(json.dumps(data), encoding="utf-8")
    goal = tmp_path / "goal.toml"
    goal.write_text(f'name = "noisy pnpoly"\nspace = "{space}"\nbackend = "replay"\n'
                    "[stop]\nmax_evals = 60\n[swarm]\nworkers = 1\nseed = 3\n", encoding="utf-8")
    return goal


def _count(text: str) -> tuple[int, int]:
    m = SENTENCE.search(text)
    assert m, text
    return int(m.group(1)), int(m.group(2) or 0)


def test_run_show_report_and_window_agree(capsys, tmp_db, noisy_goal_file):
    assert main(["run", str(noisy_goal_file), "--db", str(tmp_db), "--quiet"]) == 0
    run_out = capsys.readouterr().out
    clear, within = _count(run_out)

    with Store(tmp_db) as store:
        history = store.load_evaluations(1)
        run = store.get_run(1)
        report = render_report(store, 1)
    evals = [e for _, e, _ in history]
    all_new_bests = len(new_bests(evals, minimize=True))
    assert within >= 1 and clear >= 1  # this run has both kinds
    assert clear + within == all_new_bests  # nothing lost: the old count is their sum
    assert ImprovementCount.of(new_bests(evals, True)) == ImprovementCount(clear, within)

    assert main(["show", "1", "--db", str(tmp_db)]) == 0
    assert _count(capsys.readouterr().out) == (clear, within)
    assert _count(report) == (clear, within)

    reopened = RunData(minimize=True)
    reopened.add(history)
    assert reopened.improvement_count == ImprovementCount(clear, within)

    # the coordinator's credits: the old key still counts every new best, the new one the clear
    credits = {a: c for a, c in run["credits"].items() if "clear_improvements" in c}
    assert sum(c["improvements"] for c in credits.values()) == all_new_bests
    assert sum(c["clear_improvements"] for c in credits.values()) == clear
    assert re.search(r"new bests\s+clear of noise", run_out)
