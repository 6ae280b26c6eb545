"""A run where nothing works says why: `run` ends with the failure kinds, a count and the first
message of each (the compiler's own first error line; a custom output's real tolerance), `show`
and the report say the same, and the command exits 3 (EXIT_NOTHING_SUCCEEDED)."""

from __future__ import annotations

import shutil

import pytest
from project_paths import ROOT

from app.cli import main

EXIT_NOTHING_SUCCEEDED = 3  # app.cli_common: a run without one correct candidate

pytestmark = [pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler"),
              pytest.mark.slow]

PNPOLY = ROOT / "resources" / "goals" / "custom" / "pnpoly_c"


def _goal(tmp_path, edit_kernel=None, edit_reference=None):
    goal = tmp_path / "pnpoly"
    shutil.copytree(PNPOLY, goal)
    for name, edit in (("pnpoly.c", edit_kernel), ("reference.py", edit_reference)):
        if edit:
            path = goal / name
            path.write_text(edit(path.read_text()))
    return goal / "goal.toml"


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_a_kernel_that_does_not_compile_says_why_and_exits_3(capsys, tmp_path, tmp_db):
    # the user's missing ';' (line 16 of pnpoly.c)
    goal = _goal(tmp_path, edit_kernel=lambda s: s.replace(": n - start;", ": n - start", 1))
    rc, out, err = _run(capsys, "run", goal, "--db", tmp_db, "--quiet", "--max-evals", 2)
    assert rc == EXIT_NOTHING_SUCCEEDED, out + err
    line = next(x.strip() for x in out.splitlines() if "did not compile" in x)
    # the compiler's own first error line, without the cascade's "compile error: "
    assert line.startswith("2 did not compile: kernel.c:") and "error: expected" in line, out
    assert "compile error:" not in line
    rc, shown, _ = _run(capsys, "show", 1, "--db", tmp_db)
    assert rc == 0 and line in [x.strip() for x in shown.splitlines()], shown
    rc, report, _ = _run(capsys, "export", 1, "--format", "html", "--db", tmp_db)
    assert "did not compile" in report and "error: expected" in report


def test_a_wrong_reference_names_the_outputs_real_tolerance(capsys, tmp_path, tmp_db):
    goal = _goal(tmp_path, edit_reference=lambda s: s.replace("return odd.astype",
                                                              "return (~odd).astype"))
    rc, out, err = _run(capsys, "run", goal, "--db", tmp_db, "--quiet", "--max-evals", 1)
    assert rc == EXIT_NOTHING_SUCCEEDED, out + err
    line = next(x.strip() for x in out.splitlines() if "wrong results" in x)
    # float32 custom outputs default to rtol 1e-4 (not the verifier's normalised 1 and 0)
    assert "outside tolerance (rtol 1.00e-04, atol 1.0e-04" in line, line
    assert "rtol 1.00e+00" not in out
