"""Cheats proposed by an LLM agent (a loopback chat server scripted with the kernels) through
the real CLI (`python -m app run`): each is rejected with its reason and none becomes the
run's best."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from llm_server import ChatServer, Reply
from test_llm_run import GOOD, KEY, NO_CODE

from app.goal import Goal, StopRules
from app.store import Store

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="needs a C compiler")

SIGNATURE = "void ks_kernel(float *restrict y, const float *restrict x, long rows, long cols) {\n"
# (a) returns at once when the output looks written already (timed outputs were never refilled)
EARLY_RETURN = GOOD.replace("Idea: one exp per element, three simple passes",
                            "Idea: skip rows already done").replace(
    SIGNATURE, SIGNATURE + "    if (y[0] == y[0] && y[rows * cols - 1] == y[rows * cols - 1]) return;\n")
# (b) a result cache in statics, an attribute after the declarator
STATIC_CACHE = GOOD.replace("Idea: one exp per element, three simple passes",
                            "Idea: reuse results").replace(
    SIGNATURE, "static const float *seen __attribute__((used));\n" + SIGNATURE
    + "    if (x == seen) return;\n    seen = x;\n")


@pytest.mark.slow
def test_cheats_from_the_llm_are_rejected_through_the_cli(tmp_path):
    root = Path(__file__).resolve().parents[1]
    goal = Goal(name="cheats via cli", operator="softmax", backend="cpu", shapes=[[32, 700]],
                stop=StopRules(max_evals=4))
    goal.swarm.agents = ["llm"]
    path = tmp_path / "goal.toml"
    path.write_text(goal.to_toml())
    db = tmp_path / "h.sqlite"
    with ChatServer([Reply(EARLY_RETURN), Reply(STATIC_CACHE)], default=Reply(NO_CODE),
                    lifetime_s=200) as srv:
        env = {**os.environ, "PYTHONPATH": str(root), "KERNELSWARM_LLM_BASE_URL": srv.base_url,
               "KERNELSWARM_LLM_TIMEOUT_S": "30", "KERNELSWARM_LLM_ROLES": "memory",
               "KERNELSWARM_LLM_API_KEY": KEY}
        proc = subprocess.run([sys.executable, "-m", "app", "run", str(path), "--db", str(db),
                               "--quiet"], cwd=root, env=env, capture_output=True, text=True,
                              timeout=180, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    store = Store(db)
    try:
        rows = store.evaluation_rows(1)
    finally:
        store.close()
    by_idea = {}
    for r in rows:
        src = r["source"] or ""
        if "y[0] == y[0]" in src:
            by_idea["early"] = r
        if "__attribute__((used))" in src:
            by_idea["static"] = r
    assert set(by_idea) == {"early", "static"}, [(r["agent"], r["reason"]) for r in rows]
    early, static = by_idea["early"], by_idea["static"]
    assert not early["ok"] and early["reason"] == "verification_failed", early["detail"]
    assert "not deterministic" in early["detail"]
    # the LLM guard's text policy misses the attribute; the built library's .bss does not
    assert not static["ok"] and static["reason"] == "resource_limit", static["detail"]
    assert "writable global data" in static["detail"] and ".bss" in static["detail"]
    best = [r for r in rows if r["ok"]]
    assert all("y[0] == y[0]" not in (r["source"] or "") and "((used))" not in (r["source"] or "")
               for r in best)
