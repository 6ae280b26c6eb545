"""The registries are wired by one explicit call (app.session.registries.wire), not by
importing a module for its side effects: a fresh process that calls it knows every backend
and agent, and calling it again changes nothing."""

from __future__ import annotations

import json
import subprocess
import sys

from project_paths import ROOT

PROBE = """
import json
from app.swarm.agents import agent_names
before = list(agent_names())
from app.session.registries import wire
wire(); wire()
from app.gpu.registry import backend_names
print(json.dumps({"before": before, "agents": list(agent_names()),
                  "backends": list(backend_names())}))
"""


def test_wire_fills_every_registry_in_a_fresh_process():
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    got = json.loads(out.strip().splitlines()[-1])
    assert "llm" not in got["before"]  # nothing registers it as a side effect of the swarm
    assert got["agents"].count("llm") == 1 and "explorer" in got["agents"]
    assert {"cpu", "cuda", "replay"} <= set(got["backends"])


def test_the_goal_check_wires_what_it_reads(tmp_path):
    """A caller that never wired (a script, a benchmark) still gets the LLM agent checked."""
    probe = ("from app.goal import Goal\nfrom app.session import check_goal\n"
             "g = Goal(name='g', space='pnpoly_RTX_3090.json.gz')\n"
             "g.swarm.agents = ['local', 'llm']\ng.llm = {'colour': 'red'}\n"
             "from app.goal import GoalError\n"
             "try:\n    check_goal(g)\nexcept GoalError as e:\n    print(e.field)\n")
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert out.strip().splitlines()[-1] == "llm.colour"
