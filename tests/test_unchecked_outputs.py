"""Your own kernel with `check = false` on its outputs: the goal file allows it ("or set check =
false on every output"), so it must run, and every summary (run, show, the report, the window:
one RunSummary) must say plainly that nothing was checked. It failed every evaluation with
"module 'reference' has no attribute ''" when no output was checked."""

from __future__ import annotations

import shutil

import pytest
from project_paths import ROOT

from app.cli import main
from app.run_summary import summarize, unchecked_outputs

needs_cc = pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("cc")), reason="needs a C compiler")


def _unchecked_goal(tmp_path, check_all: bool = True):
    goal_dir = tmp_path / "goal"
    shutil.copytree(ROOT / "resources" / "goals" / "custom" / "pnpoly_c", goal_dir)
    text = (goal_dir / "goal.toml").read_text()
    text = text.replace('reference = "reference.py:pnpoly"\n', "")
    text = text.replace('{ name = "inside", role = "output", shape = "n" }',
                        '{ name = "inside", role = "output", shape = "n", check = false }')
    text = text.replace("shapes = [[100000, 40]]", "shapes = [[2000, 12]]")
    text = text.replace("max_evals = 20", "max_evals = 2")
    assert text.count("check = false") == 1 and "reference =" not in text
    (goal_dir / "goal.toml").write_text(text)
    return goal_dir / "goal.toml"


@needs_cc
def test_a_goal_that_checks_no_output_runs_and_says_so(tmp_path, capsys):
    goal = _unchecked_goal(tmp_path)
    db = str(tmp_path / "h.sqlite")
    assert main(["run", str(goal), "--db", db]) == 0
    out = capsys.readouterr().out
    assert "2 evaluations (2 ok, 0 failed)" in out, out
    assert "note: no output is checked (check = false on every output)" in out
    assert main(["show", "1", "--db", db]) == 0
    assert "these times say nothing about correctness" in capsys.readouterr().out


def test_some_unchecked_outputs_are_named_and_a_checked_goal_gets_no_note():
    toml = ('name = "x"\n[kernel]\nargs = [\n  { name = "a", role = "output", check = false },\n'
            '  { name = "b", role = "inout" },\n  { name = "x", role = "input" },\n]\n')
    assert unchecked_outputs(toml) == (["a"], ["a", "b"])
    notes = summarize({"goal_toml": toml}, []).notes
    assert notes and notes[0].startswith("not checked (check = false): a;")
    assert summarize({"goal_toml": toml.replace(", check = false", "")}, []).notes == []
    assert unchecked_outputs("name = 'catalog goal'\n") == ([], [])
    assert unchecked_outputs("[kernel\nbroken") == ([], [])
