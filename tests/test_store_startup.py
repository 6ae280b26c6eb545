"""Opening the history costs no pandas: sqlite_utils would import it whenever it is installed,
most of a second of every process's start (the CLI, the engine process, every test)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
from project_paths import ROOT

_CHILD = """
import json, sys
from app.goal import Goal
from app.store import Store
store = Store(sys.argv[1])
run_id = store.create_run(Goal(name="g", space="pnpoly_RTX_3090.json.gz"))
store.close()
again = Store(sys.argv[1])
print(json.dumps({"pandas": "pandas" in sys.modules, "runs": len(again.list_runs()),
                  "run_id": run_id}))
"""


@pytest.mark.skipif(importlib.util.find_spec("pandas") is None,
                    reason="pandas is not installed: nothing to keep out")
def test_the_store_opens_writes_and_reads_without_importing_pandas(tmp_path):
    out = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "h.sqlite")], cwd=ROOT, check=False,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["runs"] == 1 and seen["run_id"] >= 1
    assert seen["pandas"] is False


def test_pandas_loaded_first_still_works(tmp_path):
    """A process that has pandas already (Kernel Tuner's import cell) gets the same store."""
    pytest.importorskip("pandas")
    code = "import pandas\n" + _CHILD
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "h.sqlite")], cwd=ROOT, check=False,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1])["runs"] == 1
