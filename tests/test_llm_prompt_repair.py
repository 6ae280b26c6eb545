"""The repair turn: asked for as soon as the near miss is observed (not when
the allocator next picks the fixer), and labelled truthfully: CURRENT is the kernel the failed
attempt started from, and the run's best (a different, faster kernel) is named as such."""

from __future__ import annotations

import time

from llm_server import ChatServer, Reply
from test_llm_repair import FIRST, FIX, _agent, _record, _until

from app.core.space import SearchSpace
from app.core.types import Evaluation
from app.swarm.blackboard import Blackboard


def test_the_repair_is_requested_at_once_and_labels_the_parent_and_the_best():
    space = SearchSpace({"VEC": [4, 8, 16]})
    board = Blackboard(space)
    asked: list[float] = []

    def respond(body: dict) -> Reply:
        if "repair engineer" in body["messages"][0]["content"]:
            asked.append(time.monotonic())
            return Reply(FIX)
        return Reply(FIRST)

    with ChatServer(responder=respond) as srv:
        memory = _agent(srv, "memory", space)
        fixer = _agent(srv, "fixer", space)
        parent = Evaluation(key="slow", config={"VEC": 8}, ok=True, value=11.9)
        _record(board, [memory, fixer], parent)
        assert fixer.propose(board, 1) == []  # nothing to repair yet: no request
        attempt = _until(memory, board)[0]
        # a faster kernel arrives meanwhile: the run's best is no longer the attempt's parent
        _record(board, [memory, fixer], Evaluation(key="fast", config={"VEC": 4}, ok=True,
                                                   value=5.5))
        failed_at = time.monotonic()
        _record(board, [memory, fixer], Evaluation(
            key=attempt.key, config=attempt.config, ok=False, reason="compile_failed",
            source=attempt.source, agent=memory.name, parent_key="slow",
            log="kernel.c:7:52: error: expected ';' before '}' token"))
        # the fixer is not asked to propose again: the request goes out by itself
        t_end = time.monotonic() + 5
        while not asked and time.monotonic() < t_end:
            time.sleep(0.02)
        assert asked and asked[0] - failed_at < 2.0
        t_end = time.monotonic() + 5
        while not fixer.ready() and time.monotonic() < t_end:
            time.sleep(0.02)
        assert fixer.ready()  # a coordinator can see the paid reply waiting
        repaired = fixer.propose(board, 1)
        memory.close()
        fixer.close()
    assert len(repaired) == 1 and repaired[0].parent_key == attempt.key
    request = next(r for r in srv.requests if "repair engineer" in r["messages"][0]["content"])
    task = request["messages"][1]["content"]
    assert "CURRENT (the correct kernel the failed attempt started from; config {'VEC': 8}, time 11.9 ms" in task
    assert "The best correct kernel so far (not shown): config {'VEC': 4}, time 5.5 ms" in task
    assert "CURRENT (the best correct kernel so far" not in task
