"""Agent-side handling of two kinds of refusal, through the real loopback
chat server: an empty reply at the length cap is fed back in the next prompt and backed off
(not asked again at once, the same way), and a refusal because ANOTHER request's token
reservation holds the run's budget does not stop the agent for the run: it waits, asks again
and gets its kernel once the other request settles."""

from __future__ import annotations

import random
import threading
import time

from llm_server import ChatServer, Reply, Stall
from test_llm_repair import GOAL, TEMPLATE

from app.core.space import SearchSpace
from app.core.types import Evaluation
from app.llm.agent import LLMAgent
from app.llm.client import BUDGET, LLMClient
from app.llm.lessons import LessonBook
from app.llm.settings import LLMSettings
from app.llm.spec import KernelSpec
from app.swarm.blackboard import Blackboard

GOOD = "Idea: unroll\n```c\n" + TEMPLATE.replace("2.0f * x[i]", "x[i] * 2.0f") + "```\n"


def _agent(client: LLMClient, role: str, space: SearchSpace) -> LLMAgent:
    return LLMAgent(space, random.Random(0), role=role, client=client,
                    spec=KernelSpec("c", "ks_kernel", TEMPLATE, ["VEC"], "contract", unit="ms"),
                    goal=GOAL, book=LessonBook(GOAL, "test cpu", generation=1),
                    device="Test CPU", exhausted_wait_s=0.2)


def _board(space: SearchSpace, agents: list[LLMAgent]) -> Blackboard:
    board = Blackboard(space)
    e = Evaluation(key="t", config={"VEC": 4}, ok=True, value=3.0)
    board.claim(e.key)
    board.record(e)
    for a in agents:
        a.observe(e)
    return board


def test_an_empty_reply_at_the_length_cap_is_fed_back_and_backed_off():
    space = SearchSpace({"VEC": [4, 8, 16]})
    with ChatServer(default=Reply("", finish_reason="length", completion_tokens=512)) as srv:
        s = LLMSettings(base_url=srv.base_url, model="scripted", timeout_s=5, backoff_s=0.01,
                        max_retries=0, max_tokens=512)
        agent = _agent(LLMClient(s, api_key="k"), "memory", space)
        board = _board(space, [agent])
        t_end = time.monotonic() + 1.5
        while time.monotonic() < t_end:
            agent.propose(board, 1)
            time.sleep(0.01)
        agent.close()
    # backed off: a handful of requests in 1.5 s, not one per propose call
    assert 2 <= len(srv.requests) <= 4, len(srv.requests)
    second = srv.requests[1]["messages"][1]["content"]
    problems = second.split("PROBLEMS WITH YOUR RECENT REPLIES", 1)[1]
    assert "your reply was empty: it reached the max_tokens limit (512 tokens)" in problems
    assert not agent.stopped_reason


def test_a_refusal_by_another_requests_reservation_does_not_stop_the_agent():
    space = SearchSpace({"VEC": [4, 8, 16]})
    first_in = threading.Event()

    def respond(body: dict):
        if "memory-access" in body["messages"][0]["content"] and not first_in.is_set():
            first_in.set()
            return Stall(1.0, Reply(GOOD))  # holds its reservation for a second
        return Reply(GOOD.replace("x[i] * 2.0f", "x[i] + x[i]"))

    with ChatServer(responder=respond) as srv:
        # one request's worst case (prompt + 20k max_tokens) fits, two at once do not
        s = LLMSettings(base_url=srv.base_url, model="scripted", timeout_s=10, backoff_s=0.01,
                        max_retries=0, max_tokens=20_000, run_token_budget=30_000,
                        max_concurrent=2)
        client = LLMClient(s, api_key="k")
        holder = _agent(client, "memory", space)
        waiter = _agent(client, "tiling", space)
        board = _board(space, [holder, waiter])
        holder.propose(board, 1)
        assert first_in.wait(5)
        got = []
        t_end = time.monotonic() + 8
        # only the waiter asks again: more of the holder's requests would spend the budget
        # for real (on a busy machine they got in first and the waiter was rightly refused)
        while not got and time.monotonic() < t_end:
            got = waiter.propose(board, 1)
            time.sleep(0.02)
        holder.close()
        waiter.close()
    assert not waiter.stopped_reason
    assert got and "x[i] + x[i]" in got[0].source
    assert client.totals()["by_status"].get(BUDGET, 0) >= 1  # it was refused at first
