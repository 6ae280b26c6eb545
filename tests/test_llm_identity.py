"""Normalised code is a candidate's identity (cosmetic variants are never evaluated twice) and
lessons state a measured difference only outside the timing spread (p10..p90)."""

from __future__ import annotations

import random
import shutil
import subprocess
import time

import pytest
from llm_server import ChatServer, Reply

from app.catalog import known_operators
from app.core.space import SearchSpace
from app.core.types import Evaluation
from app.goal import Goal
from app.llm.agent import LLMAgent
from app.llm.client import LLMClient
from app.llm.lessons import Attempt, LessonBook
from app.llm.normal import normalise, same_code
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
REWRITE = TEMPLATE.replace("    for (long i", "#pragma omp simd\n    for (long i")
COSMETIC = ("/* vectorised: now 1.34x faster! */\n" + REWRITE.replace("    for", "\t\tfor  ")
            .replace("y[i] = 2.0f", "y[i]   =   2.0f  /* times two */") + "\n\n// end\n")
GOAL = Goal(name="scale", operator="softmax", backend="cpu", shapes=[[8, 100]])


def test_cosmetic_variants_share_the_normal_form_and_real_changes_do_not():
    assert normalise(COSMETIC) == normalise(REWRITE) and same_code(COSMETIC, REWRITE)
    assert normalise(REWRITE) != normalise(TEMPLATE)
    assert normalise(REWRITE.replace("2.0f", "3.0f")) != normalise(REWRITE)
    # strings keep their blanks; a continued macro keeps its continuation
    src = '#define TWICE(a) \\\n    ((a) + (a))\nconst char *s = "a  b";\n'
    assert '"a  b"' in normalise(src) and "TWICE(a) \\\n((a) + (a))" in normalise(src)
    assert normalise(normalise(COSMETIC)) == normalise(COSMETIC)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_normal_forms_of_the_catalog_kernels_compile(tmp_path):
    for name, op in sorted(known_operators("cpu").items()):
        src = tmp_path / f"{name}.c"
        src.write_text(normalise(op.template()))
        proc = subprocess.run(["cc", "-O2", "-std=c11", "-fopenmp", "-shared", "-fPIC", str(src),
                               "-o", str(tmp_path / f"{name}.so")], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, (name, proc.stderr)


def _agent(server: ChatServer) -> tuple[LLMAgent, Blackboard]:
    space = SearchSpace({"VEC": [4, 8, 16]})
    s = LLMSettings(base_url=server.base_url, model="scripted", timeout_s=5, backoff_s=0.01,
                    max_retries=0)
    agent = LLMAgent(space, random.Random(0), role="memory", client=LLMClient(s, api_key="k"),
                     spec=KernelSpec("c", "ks_kernel", TEMPLATE, ["VEC"], "contract"), goal=GOAL,
                     book=LessonBook(GOAL, "cpu", generation=1), exhausted_wait_s=2)
    return agent, Blackboard(space)


def test_a_comment_only_variant_is_never_evaluated_again():
    replies = [Reply(f"Idea: simd\n```c\n{REWRITE}```"), Reply(f"Idea: simd, documented\n```c\n{COSMETIC}```")]
    with ChatServer(replies, default=Reply("no code")) as srv:
        agent, board = _agent(srv)
        base = Evaluation(key="t", config={"VEC": 8}, ok=True, value=2.0, p10_ms=1.9, p90_ms=2.1)
        board.claim("t")
        board.record(base)
        proposed = []
        t_end = time.monotonic() + 4
        while time.monotonic() < t_end and len(srv.requests) < 3:
            for cand in agent.propose(board, 1):
                proposed.append(cand)
                board.claim(cand.key)  # being evaluated: the board knows the key
            time.sleep(0.05)
        agent.close()
    assert len(proposed) == 1 and proposed[0].source == normalise(REWRITE)
    assert "1.34x" not in proposed[0].source and "/*" not in proposed[0].source


def _book_with(parent: tuple[float, float] | None, child: tuple[float, float] | None,
               value: float) -> list[str]:
    book = LessonBook(GOAL, "cpu", generation=1)
    p10, p90 = parent or (None, None)
    book.note_attempt(Attempt("c", "llm-memory", "idea", "p", 2.0, p10, p90))
    c10, c90 = child or (None, None)
    book.observe(Evaluation(key="c", config={"VEC": 8}, ok=True, value=value, p10_ms=c10, p90_ms=c90))
    return book.texts()


def test_lessons_claim_a_difference_only_outside_the_spread():
    assert any("2.00x faster" in t for t in _book_with((1.9, 2.1), (0.95, 1.05), 1.0))
    # a 1.34x 'gain' of two medians whose spreads overlap is noise
    noisy = _book_with((1.2, 2.8), (1.1, 2.5), 2.0 / 1.34)
    assert noisy and not any("faster" in t for t in noisy)
    assert any("within the measurement spread" in t for t in noisy)
    assert not any("faster" in t for t in _book_with(None, None, 1.0))  # no spread: no claim
    assert any("not faster" in t for t in _book_with((0.9, 1.1), (1.5, 1.7), 1.6))
