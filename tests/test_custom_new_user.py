"""Your own kernel as a new user meets it: a C kernel with two tunable macros, a goal file
of about fifteen lines and a numpy reference in a fresh directory; the installed `kernelswarm`
command (a real process) tunes it with the real compiler into a real SQLite history. Then every
agent at once (explorer, local, evolution, model and the LLM agents, these talking to a
scripted chat server on loopback) on the same goal: the LLM gets the user's kernel as the
current source and its rewrite is verified against the user's reference."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from project_paths import ROOT

from app.store import Store

pytestmark = pytest.mark.skipif(not (shutil.which("gcc") or shutil.which("cc")), reason="needs a C compiler")

KERNEL_C = """\
/* out[i] = a three-point smoothing of x, walked in blocks of BLOCK, UNROLL points at a time */
void smooth(float *out, const float *x, int n)
{
    for (int b = 0; b < n; b += BLOCK)
        for (int i = b; i < b + BLOCK && i < n; i += UNROLL)
            for (int u = 0; u < UNROLL && i + u < b + BLOCK && i + u < n; u++)
                out[i + u] = 0.25f * x[i + u] + 0.5f * x[i + u + 1] + 0.25f * x[i + u + 2];
}
"""
REFERENCE_PY = """\
def smooth(x):
    return 0.25 * x[:-2] + 0.5 * x[1:-1] + 0.25 * x[2:]
"""
GOAL_TOML = """\
name = "smooth"
backend = "cpu"
shapes = [[100000]]

[kernel]
source = "smooth.c"
entry = "smooth"
tune_params = { BLOCK = [256, 1024, 4096], UNROLL = [1, 2, 4] }
reference = "reference.py:smooth"
args = [
  { name = "out", role = "output", shape = "n" },
  { name = "x", shape = "n + 2" },
  { name = "n", role = "scalar", dtype = "int32", value = "n" },
]
"""
AGENTS = ["explorer", "local", "evolution", "model"]
LLM_KEY = {"KERNELSWARM_LLM_API_KEY": "sk-test-0123456789"}
# what the scripted chat server answers every LLM agent: the same arithmetic, regrouped
# (the stored source is the agent's normalised file: comments are not kept)
REWRITE = KERNEL_C.replace(
    "0.25f * x[i + u] + 0.5f * x[i + u + 1] + 0.25f * x[i + u + 2]",
    "0.25f * (x[i + u] + x[i + u + 2]) + 0.5f * x[i + u + 1]")


def _write(tmp_path: Path) -> Path:
    (tmp_path / "smooth.c").write_text(KERNEL_C)
    (tmp_path / "reference.py").write_text(REFERENCE_PY)
    (tmp_path / "goal.toml").write_text(GOAL_TOML)
    return tmp_path / "goal.toml"


def _kernelswarm(tmp_path: Path, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The installed console script when there is one, else the module (the same entry point)."""
    script = Path(sys.executable).parent / "kernelswarm"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "app"]
    return subprocess.run(command + list(argv), cwd=tmp_path, capture_output=True, text=True,
                          timeout=240, check=False, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


def _stored(db: Path) -> tuple[dict, list]:
    with Store(db) as store:
        runs = store.list_runs()
        assert len(runs) == 1
        run = store.get_run(runs[0]["id"])
        evaluations = [e for _, e, _ in store.load_evaluations(runs[0]["id"])]
    return run, evaluations


@pytest.mark.slow
def test_a_new_users_c_kernel_is_tuned_by_the_kernelswarm_command(tmp_path):
    goal = _write(tmp_path)
    assert len(GOAL_TOML.strip().splitlines()) <= 15  # "a goal file of about fifteen lines"
    proc = _kernelswarm(tmp_path, "run", "goal.toml", "--db", "h.sqlite", "--quiet", "--max-evals", "6")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "6 evaluations (6 ok, 0 failed)" in proc.stdout, proc.stdout
    assert "BLOCK=" in proc.stdout and "UNROLL=" in proc.stdout
    run, evaluations = _stored(tmp_path / "h.sqlite")
    assert run["status"] == "finished" and run["backend"] == "cpu"
    assert len(evaluations) == 6 and all(e.ok and e.time_ms > 0 for e in evaluations)
    assert {tuple(sorted(e.config)) for e in evaluations} == {("BLOCK", "UNROLL")}
    assert goal.read_text() == GOAL_TOML  # the user's file is left as written


@pytest.mark.slow
def test_every_agent_works_on_the_users_kernel(tmp_path):
    """All agents in one real run. Which of them measures which of the nine configurations is a
    race, so: most search agents, the LLM agents asked with the user's kernel as the current
    source, nothing failed. (The LLM's rewrite verified against the user's reference:
    test_custom_kernel.test_llm_agent_rewrites_the_users_c_kernel and the LLM-only run below.)"""
    from llm_server import ChatServer, Reply

    _write(tmp_path)
    with ChatServer(default=Reply(f"Idea: pair the outer taps\n```c\n{REWRITE}```"), lifetime_s=200) as server:
        proc = _kernelswarm(tmp_path, "run", "goal.toml", "--db", "h.sqlite", "--quiet",
                            "--max-evals", "12", "--agents", ",".join(AGENTS + ["llm"]),
                            "--llm-base-url", server.base_url, "--llm-model", "scripted",
                            "--trace", "trace.jsonl", env=LLM_KEY)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    started = next(json.loads(ln) for ln in (tmp_path / "trace.jsonl").read_text().splitlines()
                   if '"RunStarted"' in ln)
    assert set(AGENTS) <= set(started["agents"]) and any(a.startswith("llm-") for a in started["agents"])
    prompts = " ".join(str(m.get("content", "")) for body in server.requests for m in body["messages"])
    assert "void smooth(float *out, const float *x, int n)" in prompts  # the current source
    run, evaluations = _stored(tmp_path / "h.sqlite")
    assert run["status"] == "finished" and len(evaluations) >= 9 and all(e.ok for e in evaluations)
    assert len({e.agent for e in evaluations} & set(AGENTS)) >= 2, [e.agent for e in evaluations]


@pytest.mark.slow
def test_the_llm_agents_rewrite_of_the_users_kernel_is_verified(tmp_path):
    from llm_server import ChatServer, Reply

    _write(tmp_path)
    with ChatServer(default=Reply(f"Idea: pair the outer taps\n```c\n{REWRITE}```"), lifetime_s=200) as server:
        proc = _kernelswarm(tmp_path, "run", "goal.toml", "--db", "h.sqlite", "--quiet",
                            "--max-evals", "16", "--agents", "llm", "--llm-base-url", server.base_url,
                            "--llm-model", "scripted", env=LLM_KEY)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _, evaluations = _stored(tmp_path / "h.sqlite")
    rewritten = [e for e in evaluations if e.source and "0.25f * (x[i + u] + x[i + u + 2])" in e.source]
    assert rewritten and all(e.ok for e in rewritten), [(e.agent, e.reason, e.detail) for e in evaluations]
    assert all(e.agent.startswith("llm-") for e in rewritten)
