"""End to end on the CPU backend: LLM agents talk to a real loopback chat server, their kernels
go through the real cascade (policy, gcc, verification, timing), an LLM kernel beats the
template, a cheating one is rejected before compiling, a reply with no code is recorded, and a
second run of the same goal starts from the first one's best kernel and lessons. The API key
never reaches the database file or the logs."""

from __future__ import annotations

import logging
import shutil
import sqlite3

import pytest
from llm_server import ChatServer, Reply

from app.core.events import EventBus
from app.goal import Goal, StopRules
from app.gpu.cpu import CpuEvaluator
from app.llm import LLMSettings, make_llm_team
from app.llm.usage import run_usage
from app.store import Store
from app.swarm.coordinator import Coordinator
from app.swarm.plan import RunPlan

pytestmark = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                                reason="needs a C compiler")

KEY = "sk-e2e-SECRET-abcdef0123456789"

# The template is held to slow configurations (two libm expf per element, one accumulator,
# one thread; CHUNK is left free so the space is not used up at once); the LLM's kernel does
# one expf per element.
SLOW_TEMPLATE = ["ONLINE == 1", "ACC == 1", "VEC == 4", "THREADS == 1", "EXP_IMPL == 0"]

GOOD = """Idea: one exp per element, three simple passes
```c
#include <math.h>
#include <stddef.h>
#ifndef THREADS
#define THREADS 1
#endif
static void row(float *restrict y, const float *restrict x, long n) {
    float m = -INFINITY;
    for (long j = 0; j < n; ++j) m = x[j] > m ? x[j] : m;
    float s = 0.0f;
    for (long j = 0; j < n; ++j) { const float e = expf(x[j] - m); y[j] = e; s += e; }
    const float inv = 1.0f / s;
    for (long j = 0; j < n; ++j) y[j] *= inv;
}
void ks_kernel(float *restrict y, const float *restrict x, long rows, long cols) {
#pragma omp parallel for num_threads(THREADS) schedule(static)
    for (long r = 0; r < rows; ++r) row(y + r * cols, x + r * cols, cols);
}
```"""

# Remembers the last input pointer and skips the work when it comes again.
CHEAT = GOOD.replace("Idea: one exp per element, three simple passes",
                     "Idea: skip recomputation").replace(
    "void ks_kernel(float *restrict y, const float *restrict x, long rows, long cols) {\n",
    "static const float *last_x = 0;\n"
    "void ks_kernel(float *restrict y, const float *restrict x, long rows, long cols) {\n"
    "    if (x == last_x) return;\n    last_x = x;\n")

NO_CODE = "You could try fusing the passes and using SIMD; that should be faster."

BROKEN = GOOD.replace("Idea: one exp per element, three simple passes", "Idea: typo").replace(
    "const float inv = 1.0f / s;", "const float inv = 1.0f / s")


def _goal(max_evals: int) -> Goal:
    return Goal(name="softmax llm", operator="softmax", backend="cpu", shapes=[[64, 1500]],
                stop=StopRules(max_evals=max_evals),
                constraints=Goal().constraints.__class__(restrictions=list(SLOW_TEMPLATE))).validate()


def _run(goal: Goal, store: Store, server: ChatServer):
    evaluator = CpuEvaluator(goal)
    bus = EventBus()
    run_id = store.create_run(goal, {"kind": "cpu"})
    unsubscribe = bus.subscribe(store.subscriber(run_id), critical=True)
    settings = LLMSettings(base_url=server.base_url, model="scripted", timeout_s=8,
                           backoff_s=0.05, max_retries=1, roles=["memory"],
                           price_prompt_per_mtok=1.0, price_completion_per_mtok=2.0)
    team = make_llm_team(goal, evaluator, settings=settings, bus=bus, run_id=run_id,
                         db_path=store.path)
    coordinator = Coordinator(team.evaluator.space, team.evaluator, RunPlan(agents=team.agents,
                              max_evals=goal.stop.max_evals, run_id=run_id, goal_name=goal.name,
                              backend="cpu"), bus=bus)
    try:
        result = coordinator.run()
    finally:
        evaluator.close()
        unsubscribe()
    return run_id, result, team


@pytest.mark.slow
def test_llm_kernel_wins_cheat_is_rejected_and_the_next_run_warm_starts(tmp_path, monkeypatch,
                                                                        caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("KERNELSWARM_LLM_API_KEY", KEY)
    db = tmp_path / "history.sqlite"
    store = Store(db)
    goal = _goal(max_evals=5)
    with ChatServer([Reply(CHEAT), Reply(NO_CODE), Reply(GOOD), Reply(BROKEN)],
                    default=Reply(NO_CODE), lifetime_s=120) as srv:
        run_id, result, _ = _run(goal, store, srv)
    assert srv.auth_headers and all(h == f"Bearer {KEY}" for h in srv.auth_headers)

    rows = store.evaluation_rows(run_id)
    by_agent = {}
    for r in rows:
        by_agent.setdefault(r["agent"], []).append(r)
    llm = by_agent["llm-memory"]
    reasons = {r["reason"] for r in llm}
    # the cheat never reached the compiler: rejected by the policy with its rule named
    cheat = next(r for r in llm if r["source"] and "last_x" in r["source"])
    assert cheat["reason"] == "static_check" and "static_state" in cheat["detail"]
    assert [s["name"] for s in cheat["stages"]] == ["static_check"]
    if any(r["source"] and "1.0f / s\n" in r["source"] for r in llm):
        assert "compile_failed" in reasons
    # the LLM's kernel is correct and beats the (slow) template configuration
    template = [r for r in rows if r["source"] is None and r["ok"]]
    assert template, "the template configuration was evaluated as well"
    assert result.best is not None and result.best.agent == "llm-memory"
    assert result.best.source and "one exp" not in result.best.source and "expf(x[j] - m)" in result.best.source
    assert result.best.value < min(r["value"] for r in template)

    # usage: every request recorded with tokens and cost; the reply without code too
    usage = run_usage(db, run_id)
    assert usage["requests"] >= 3 and usage["prompt_tokens"] > 0 and usage["cost"] > 0
    with sqlite3.connect(db) as conn:
        outcomes = [o for (o,) in conn.execute("SELECT outcome FROM llm_requests WHERE run_id = ?",
                                               (run_id,))]
    assert any(o.startswith("no_code:") for o in outcomes)
    assert sum(o.startswith("candidate ") for o in outcomes) >= 2

    # lessons of this run are in the store, and say what was measured: the rewrite against the
    # kernel it started from (which may already be a tuned configuration: then "no gain")
    lessons = store.lessons(run_id=run_id)
    kinds = {x["kind"] for x in lessons}
    assert "llm_failure" in kinds
    good = next(x for x in lessons if x["kind"] in ("llm_transformation", "llm_no_gain"))
    # a difference is claimed only outside the timing spreads (p10..p90) of both kernels
    (lo, hi), (plo, phi) = good["evidence"]["spread_ms"], good["evidence"]["parent_spread_ms"]
    assert good["kind"] == ("llm_transformation" if hi < plo else "llm_no_gain"), good
    expected_text = ("faster than the kernel it started from" if hi < plo else
                     "was correct but not faster" if lo > phi else "within the measurement spread")

    # a second run of the same goal: the earlier best kernel is proposed first, lessons in prompts
    goal2 = _goal(max_evals=2)
    with ChatServer(default=Reply(NO_CODE), lifetime_s=120) as srv2:
        _, result2, team2 = _run(goal2, store, srv2)
    assert team2.warm_start and team2.warm_start[0]["source"] == result.best.source
    assert result2.best is not None and result2.best.source == result.best.source
    prompts = " ".join(m["content"] for body in srv2.requests for m in body["messages"])
    assert "LESSONS" in prompts and expected_text in prompts

    # the key is nowhere in what was kept
    store.close()
    for path in tmp_path.glob("history.sqlite*"):
        data = path.read_bytes()
        assert KEY.encode() not in data and KEY[-8:].encode() not in data, path
    assert KEY not in caplog.text and KEY[-8:] not in caplog.text


@pytest.mark.slow
def test_the_cli_exits_promptly_when_the_endpoint_trickles(tmp_path):
    """The real CLI, a real CPU run, LLM agents talking to a server that trickles headers one
    byte a second: the run ends at its evaluation budget and the process exits at once (the
    request in flight is cut at the run's end, not waited for up to timeout_s)."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    from llm_server import TrickleHeaders

    root = Path(__file__).resolve().parents[1]
    goal = Goal(name="trickle", operator="softmax", backend="cpu", shapes=[[8, 100]],
                stop=StopRules(max_evals=3))
    goal.swarm.agents = ["explorer", "llm"]
    path = tmp_path / "goal.toml"
    path.write_text(goal.to_toml())
    with ChatServer(default=TrickleHeaders(max_s=120), lifetime_s=150) as srv:
        env = {**os.environ, "PYTHONPATH": str(root), "KERNELSWARM_LLM_BASE_URL": srv.base_url,
               "KERNELSWARM_LLM_TIMEOUT_S": "90", "KERNELSWARM_LLM_ROLES": "memory",
               "KERNELSWARM_LLM_API_KEY": KEY}
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "app", "run", str(path), "--db",
                               str(tmp_path / "h.sqlite"), "--quiet"], cwd=root, env=env,
                              capture_output=True, text=True, timeout=120, check=False)
        took = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert srv.connections >= 1 and all(h == f"Bearer {KEY}" for h in srv.auth_headers)
    assert took < 60, took  # far below the 90 s request timeout
