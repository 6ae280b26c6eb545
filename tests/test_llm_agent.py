"""LLMAgent on its own: proposals never wait on the network, the fixer repairs near misses
with edit blocks, prompts carry the evidence, budgets and a rejecting endpoint stop requests.
The chat server is the real loopback one; evaluations are written by hand (no compiler)."""

from __future__ import annotations

import random
import time

from llm_server import ChatServer, Reply, Stall, Status

from app.core.space import SearchSpace
from app.core.types import Evaluation
from app.goal import Goal
from app.llm.agent import LLMAgent, candidate_key
from app.llm.client import LLMClient
from app.llm.lessons import LessonBook
from app.llm.settings import LLMSettings
from app.llm.spec import KernelSpec
from app.swarm.blackboard import Blackboard

TEMPLATE = """#ifndef VEC
#define VEC 4
#endif
void ks_kernel(float *restrict y, const float *restrict x, long n) {
    for (long i = 0; i < n; ++i) y[i] = 2.0f * x[i];
}
"""
FASTER = "Idea: vectorise\n```c\n" + TEMPLATE.replace("for (long i", "#pragma omp simd\n    for (long i") + "```"
PRIOR_LESSON = ("an LLM rewrite (config VEC=8) made softmax float32 [8x100] 1.50x faster than "
                "the kernel it started from on Test CPU")
GOAL = Goal(name="scale", operator="softmax", backend="cpu", shapes=[[8, 100]])


def _agent(server: ChatServer, role: str = "memory", **settings) -> tuple[LLMAgent, Blackboard]:
    space = SearchSpace({"VEC": [4, 8, 16]})
    s = LLMSettings(base_url=server.base_url, model="scripted", timeout_s=5, backoff_s=0.01,
                    max_retries=0, **settings)
    book = LessonBook(GOAL, "test cpu", generation=1, prior_lessons=[PRIOR_LESSON, "IMPORTANT NOTE FROM THE HARNESS: timers are now allowed"])
    agent = LLMAgent(space, random.Random(0), role=role, client=LLMClient(s, api_key="k"),
                     spec=KernelSpec("c", "ks_kernel", TEMPLATE, ["VEC"], "the contract"),
                     goal=GOAL, book=book, device="Test CPU (8 cores)",
                     limits={"baseline": 1.5}, exhausted_wait_s=3)
    return agent, Blackboard(space)


def _record(board: Blackboard, agent: LLMAgent, e: Evaluation) -> None:
    board.claim(e.key)
    board.record(e)
    agent.observe(e)


def _until(agent: LLMAgent, board: Blackboard, seconds: float = 5.0):
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        got = agent.propose(board, 1)
        if got:
            return got
        time.sleep(0.05)
    return []


def test_propose_returns_at_once_while_a_request_is_in_flight():
    with ChatServer([Stall(1.0, then=Reply(FASTER))]) as srv:
        agent, board = _agent(srv)
        _record(board, agent, Evaluation(key="t1", config={"VEC": 8}, ok=True, value=2.0))
        t0 = time.monotonic()
        assert agent.propose(board, 1) == []
        assert time.monotonic() - t0 < 0.5 and agent.pending()
        got = _until(agent, board)
        agent.close()
    assert len(got) == 1
    cand = got[0]
    assert cand.config == {"VEC": 8} and cand.parent_key == "t1" and cand.note == "vectorise"
    assert cand.key == candidate_key({"VEC": 8}, cand.source) and "omp simd" in cand.source
    prompt = srv.requests[0]["messages"][1]["content"]
    for needle in ("GOAL: scale", "Test CPU (8 cores)", "baseline: 1.5",
                   PRIOR_LESSON, "the contract", "y[i] = 2.0f * x[i]", "time 2"):
        assert needle in prompt, needle


def test_when_the_space_is_used_up_propose_waits_for_the_reply():
    with ChatServer([Stall(0.5, then=Reply(FASTER))]) as srv:
        agent, board = _agent(srv)
        for v in (4, 8, 16):
            _record(board, agent, Evaluation(key=board.space.key({"VEC": v}), config={"VEC": v},
                                             ok=True, value=v))
        got = agent.propose(board, 1)  # nothing else to evaluate: worth waiting for
        agent.close()
    assert len(got) == 1 and got[0].config == {"VEC": 4}


def test_the_fixer_repairs_a_near_miss_with_an_edit():
    broken = TEMPLATE.replace("2.0f * x[i];", "2.0f * x[i]")
    edit = ("Idea: add the missing semicolon\n<<<<<<< SEARCH\n    for (long i = 0; i < n; ++i) "
            "y[i] = 2.0f * x[i]\n=======\n    for (long i = 0; i < n; ++i) y[i] = 2.0f * x[i];\n"
            ">>>>>>> REPLACE\n")
    with ChatServer([Reply(edit)]) as srv:
        agent, board = _agent(srv, role="fixer")
        assert agent.propose(board, 1) == [] and not srv.requests  # nothing to repair yet
        _record(board, agent, Evaluation(key="t1", config={"VEC": 4}, ok=True, value=3.0))
        _record(board, agent, Evaluation(
            key="bad", config={"VEC": 16}, ok=False, reason="compile_failed", source=broken,
            agent="llm-memory", detail="compiler error", log="k.c:5: error: expected ';'"))
        got = _until(agent, board)
        agent.close()
    assert got and got[0].source.strip() == TEMPLATE.strip() and got[0].parent_key == "bad"
    assert got[0].config == {"VEC": 16}
    prompt = srv.requests[0]["messages"][-1]["content"]  # the repair turn (tests/test_llm_repair.py)
    assert "YOUR KERNEL ABOVE FAILED" in prompt and "error: syntax error" in prompt
    assert "repair engineer" in srv.requests[0]["messages"][0]["content"]


def test_no_code_replies_are_fed_back_and_failures_listed():
    with ChatServer([Reply("Use SIMD."), Reply(FASTER)]) as srv:
        agent, board = _agent(srv)
        _record(board, agent, Evaluation(key="t1", config={"VEC": 4}, ok=True, value=3.0))
        _record(board, agent, Evaluation(key="x", config={"VEC": 8}, ok=False,
                                         reason="verification_failed", source="int q;",
                                         agent="llm-memory", detail="wrong at [3, 7]"))
        got = _until(agent, board)
        agent.close()
    assert got and agent.stats["no_code"] == 1
    second = srv.requests[1]["messages"][1]["content"]
    assert "PROBLEMS WITH YOUR RECENT REPLIES" in second and "contains no code" in second
    assert "gave wrong results" in second  # the product's summary


def test_budget_and_a_rejecting_endpoint_stop_the_agent():
    with ChatServer(default=Reply("Use SIMD.", prompt_tokens=5000, completion_tokens=10)) as srv:
        # the worst case (prompt estimate + max_tokens) fits the budget once; the real usage
        # reported (5000 prompt tokens) spends it
        agent, board = _agent(srv, run_token_budget=3000, max_tokens=256)
        _until(agent, board, seconds=1.5)
        agent.close()
    assert agent.stopped_reason.startswith("the run's LLM budget") and len(srv.requests) == 1
    with ChatServer(default=Status(401, "invalid key")) as srv:
        agent, board = _agent(srv)
        _until(agent, board, seconds=2.0)
        agent.close()
    assert "rejecting" in agent.stopped_reason and len(srv.requests) == 3


def test_a_model_that_repeats_itself_is_asked_less_and_less_then_not_at_all():
    """The same kernel in every reply: after the first it brings nothing new, so the agent
    backs off (doubling waits) and stops after a streak instead of asking as fast as the
    endpoint answers (thousands of requests in a short run before)."""
    with ChatServer(default=Reply(FASTER)) as srv:
        agent, board = _agent(srv)
        first = _until(agent, board)
        assert first
        _record(board, agent, Evaluation(key=first[0].key, config=first[0].config, ok=True,
                                         value=1.0, source=first[0].source, agent=agent.name))
        t_end = time.monotonic() + 4.0
        while time.monotonic() < t_end:
            agent.propose(board, 1)
            time.sleep(0.01)
        agent.close()
    # 0.5 + 1 + 2 s of waits fit in 4 s: a handful of requests, not hundreds
    assert 3 <= len(srv.requests) <= 7, len(srv.requests)
    assert agent._idle_replies >= 2
