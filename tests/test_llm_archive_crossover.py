"""The crossover prompt: every third rewrite request combines CURRENT with a good
kernel of another structural niche, shown whole as SECOND PARENT with its structure and
measured figure; the other requests are plain rewrites."""

from __future__ import annotations

import random
import re
import time

from llm_server import ChatServer, Reply

from app.core.types import Evaluation
from app.goal import Goal
from app.llm.agent import CROSSOVER_EVERY, LLMAgent, candidate_key
from app.llm.client import LLMClient
from app.llm.lessons import LessonBook
from app.llm.normal import normalise
from app.llm.settings import LLMSettings
from app.llm.spec import kernel_spec
from app.swarm.blackboard import Blackboard


def test_every_third_rewrite_combines_current_with_another_niche():
    goal = Goal(name="x", operator="softmax", backend="cpu", shapes=[[8, 100]])
    spec = kernel_spec(goal)
    space = spec.operator.space("float32")
    cfg = space.sample(random.Random(0))
    serial = normalise(re.sub(r"^#pragma omp parallel[^\n]*\n", "", spec.template,
                              flags=re.MULTILINE))
    with ChatServer(default=Reply("no code here")) as srv:
        s = LLMSettings(base_url=srv.base_url, model="scripted", timeout_s=5, backoff_s=0.01,
                        max_retries=0)
        agent = LLMAgent(space, random.Random(0), role="memory", client=LLMClient(s, api_key="k"),
                         spec=spec, goal=goal, book=LessonBook(goal, "cpu", generation=1),
                         device="Test CPU", exhausted_wait_s=0.2)
        board = Blackboard(space)
        for e in (Evaluation(key=space.key(cfg), config=cfg, ok=True, value=1.0),
                  Evaluation(key=candidate_key(cfg, serial), config=cfg, ok=True, value=3.5,
                             source=serial, agent="llm-tiling")):
            board.claim(e.key)
            board.record(e)
            agent.observe(e)
        t_end = time.monotonic() + 10
        while len(srv.requests) < CROSSOVER_EVERY + 1 and time.monotonic() < t_end:
            agent.propose(board, 1)
            time.sleep(0.05)
        agent.close()
    prompts = [r["messages"][1]["content"] for r in srv.requests[:CROSSOVER_EVERY + 1]]
    crossed = [i for i, p in enumerate(prompts) if "SECOND PARENT (" in p]
    assert crossed == [CROSSOVER_EVERY - 1]
    p = prompts[crossed[0]]
    assert "TASK: Combine CURRENT and SECOND PARENT" in p
    block = re.search(r"SECOND PARENT \((.*?)\):\n```c\n(.*?)\n```", p, re.DOTALL)
    assert block and "time 3.5 ms" in block.group(1) and "structure: serial" in block.group(1)
    assert block.group(2).strip() == serial.strip()  # whole, not cut
    assert "ANOTHER GOOD KERNEL" not in p  # the same kernel is not shown twice
    assert "TASK: Write a faster correct version of CURRENT." in prompts[0]
