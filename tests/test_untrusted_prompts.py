"""Candidate output never reaches a prompt: a candidate's stderr, its log
and the compiler's messages about it carry the home directory hex-, base64- and reversed-
encoded plus a canary; the fixer and the other agents ask the real loopback endpoint about
these failures, and no request it receives holds any of it. What the fixer needs (reason,
stage, line and kind of a compiler error, the wrong output's name and shape) is still there."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from llm_server import ChatServer, Reply
from test_llm_attacks import TEMPLATE, _agent, _record, _until

from app.core.types import Evaluation, Stage

HOME = str(Path.home())
CANARY = "CANARY-stderr-5e1d"
ENCODED = (HOME.encode().hex(), base64.b64encode(HOME.encode()).decode(), HOME[::-1],
           HOME.encode().hex().upper(), CANARY, CANARY[::-1])
BLOB = " ".join(ENCODED)


def _failures() -> list[Evaluation]:
    stages = [Stage("static_check", True, 0.0), Stage("compile", True, 0.1)]
    return [
        Evaluation(key="crash", config={"VEC": 8}, ok=False, reason="crash", source=TEMPLATE,
                   detail=f"the candidate's process died with SIGSEGV: {BLOB}",
                   log=f"stderr: {BLOB}\n{BLOB[::-1]}", agent="llm-memory",
                   stages=[*stages, Stage("verify", False, 0.2, BLOB)]),
        Evaluation(key="cc", config={"VEC": 4}, ok=False, reason="compile_failed", source=TEMPLATE,
                   detail=f"compile error: kernel.c:3:5: error: #error {BLOB}",
                   log=(f"$ cc kernel.c\nkernel.c:3:5: error: #error {BLOB}\n"
                        f"kernel.c:5:1: error: expected ';' before '}}' token\n"
                        f"kernel.c:4:9: error: '{ENCODED[0][:30]}' undeclared\n"),
                   agent="llm-memory", stages=[Stage("compile", False, 0.1, BLOB)]),
        Evaluation(key="wrong", config={"VEC": 16}, ok=False, reason="verification_failed",
                   source=TEMPLATE, agent="llm-memory",
                   detail=(f"verify: output 'y' has 12 of 800 values off ({BLOB}) "
                           f"(shape [8, 100], normal inputs, seed 3)"),
                   log=BLOB, stages=[*stages, Stage("verify", False, 0.2, BLOB)]),
    ]


@pytest.mark.slow
def test_no_candidate_output_reaches_the_endpoint():
    sent = []
    for role in ("memory", "fixer"):  # failures listed; a near miss repaired
        with ChatServer(default=Reply("no code")) as srv:
            agent, board, _ = _agent(srv, role=role)
            for failure in _failures():
                _record(board, agent, failure)
            _until(agent, board, seconds=2.0)
            agent.close()
        assert srv.requests, role
        sent.append(" ".join(m["content"] for r in srv.requests for m in r["messages"]))
    everything = "\n".join(sent)
    for leak in (*ENCODED, HOME):
        assert leak not in everything, leak
    assert "signal SIGSEGV" in everything  # the product's own words are still there
    assert "line 3: error: #error directive" in everything
    assert "line 5: error: syntax error" in everything
    assert "output y, values outside the tolerance, shape [8, 100], normal inputs" in everything
