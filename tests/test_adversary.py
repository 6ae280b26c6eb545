"""The adversary, through the real CPU backend: a planted kernel that passes
verification (wrong only on a few prime row counts) becomes the run's best, the adversary finds
an input that breaks it inside the sandboxed worker, shrinks it, keeps it with its origin, and
the kernel is dethroned ("broken by case N"); the best moves to the next correct kernel."""

from __future__ import annotations

import math
import random

import pytest
from test_cheats import FAST, HONEST, KERNELS

from app.cli import main
from app.core.events import BestRevoked, CaseFound, EventBus
from app.core.types import Candidate
from app.goal import Goal
from app.gpu.cpu import CpuEvaluator, find_compiler
from app.store import Store, goal_key
from app.swarm.agents.adversary import Adversary, primes_upto
from app.swarm.agents.base import Agent
from app.swarm.coordinator import Coordinator
from app.swarm.plan import RunPlan

needs_cc = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")
CHEAT = "prime_rows_transpose.c"
SLOW = "honest_slow_transpose.c"


class Planted(Agent):
    """Proposes the planted kernel first, then honest slower ones (distinct keys)."""

    name = "planted"

    def __init__(self, sources: list[tuple[str, str]]) -> None:
        self.queue = list(sources)

    def propose(self, board, n=1):
        out = []
        while self.queue and len(out) < n:
            key, source = self.queue.pop(0)
            out.append(Candidate(config=dict(HONEST["transpose"]), key=key, agent=self.name,
                                 source=source))
        return out


def goal() -> Goal:
    return Goal(name="adversary transpose", backend="cpu", operator="transpose", shapes=[[64, 96]])


def sources(n_slow: int = 5) -> list[tuple[str, str]]:
    slow = (KERNELS / SLOW).read_text()
    return [("cheat", (KERNELS / CHEAT).read_text())] + [
        (f"slow-{i}", slow + f"\n/* variant {i} */\n") for i in range(n_slow)]


@needs_cc
@pytest.mark.slow
def test_the_adversary_dethrones_a_kernel_wrong_only_on_prime_rows(tmp_path, capsys):
    g = goal()
    store = Store(tmp_path / "history.sqlite")
    run_id = store.create_run(g, {"kind": "cpu"})
    bus, events = EventBus(), []
    bus.subscribe(store.subscriber(run_id), critical=True)
    bus.subscribe(events.append)
    with CpuEvaluator(g, settings=FAST) as ev:
        coord = Coordinator(ev.space, ev, RunPlan(agents=[Planted(sources())], seed=3,
                            run_id=run_id, max_evals=6, adversary_share=1.0), bus=bus)
        result = coord.run()
    firsts = {e.evaluation.key: e for e in events if type(e).__name__ == "Evaluated"}
    assert firsts["cheat"].evaluation.ok  # the fixed verification let it through
    found = [e for e in events if isinstance(e, CaseFound) and e.origin.startswith("adversary")]
    assert found and found[0].broke == "cheat"
    case = found[0].case
    assert case["shape"][0] in (23, 29, 31, 37)
    assert math.prod(case["shape"]) <= 37 * 2  # shrunk: the other dimension went to 1 or 2
    revoked = [e for e in events if isinstance(e, BestRevoked) and e.key == "cheat"]
    assert revoked and revoked[0].was_best
    assert revoked[0].case_id == found[0].case_id is not None
    assert revoked[0].evaluation.detail.startswith(f"broken by case {found[0].case_id}: ")
    assert result.best is not None and result.best.key.startswith("slow-")
    # kept with the goal, with where it came from; the stored row of the cheat is a failure
    rows = store.validation_case_rows(goal_key(g))
    mine = [r for r in rows if r["id"] == found[0].case_id]
    assert mine and mine[0]["origin"] == "adversary (broke candidate cheat)"
    stored = {r["key"]: r for r in store.evaluation_rows(run_id)}
    assert not stored["cheat"]["ok"] and "broken by case" in stored["cheat"]["detail"]
    credits = result.credits["adversary"]
    assert credits["cases"] >= 1 and credits["dethroned"] >= 1 and credits["share"] == 1.0
    # `show` and the HTML report say so too
    db = str(tmp_path / "history.sqlite")
    assert main(["show", str(run_id), "--db", db]) == 0
    out = capsys.readouterr().out
    assert f"dethroned #1 (planted): broken by case {found[0].case_id}" in out
    assert "adversary: " in out and "% of the run's time (share 100 %)" in out
    report = tmp_path / "report.html"
    assert main(["export", str(run_id), "--format", "html", "-o", str(report), "--db", db]) == 0
    assert f"broken by case {found[0].case_id}" in report.read_text()


@needs_cc
@pytest.mark.slow
def test_the_adversary_leaves_honest_kernels_alone():
    """No false alarm: rounds of crafted inputs against the honest template and a plain loop."""
    g = goal()
    with CpuEvaluator(g, settings=FAST) as ev:
        honest = Candidate(config=dict(HONEST["transpose"]), key="template", agent="x")
        slow = Candidate(config=dict(HONEST["transpose"]), key="slow", agent="x",
                         source=(KERNELS / SLOW).read_text())
        adversary = Adversary(ev.probe_plan(), random.Random(7))
        for target in (honest, slow):
            for _ in range(4):
                assert adversary.round(lambda cases, t=target: ev.probe(t, cases)) is None
        assert adversary.stats.inputs >= 40


def test_shrinking_keeps_a_failure_and_makes_it_smaller():
    """Shrinking without a backend: 'fails' when a dimension is 29 and a special step stays."""
    plan = {"shapes": [[64, 96]], "dtype": "float32", "distributions": ["normal", "sparse"]}
    adversary = Adversary(plan, random.Random(1))

    def probe(cases):
        return [{"score": 2.0 if c["shape"][0] == 29 and c.get("craft") else 0.1,
                 "problem": "bad" if c["shape"][0] == 29 and c.get("craft") else ""}
                for c in cases]

    start = {"shape": [29, 90], "distribution": "sparse", "seed": 5, "dtype": "float32",
             "craft": [{"op": "sort", "dir": 1, "run": 0},
                       {"op": "special", "value": "denormal", "density": 1.0, "seed": 2}]}
    case, _ = adversary.shrink(probe, start, {"problem": "bad"})
    assert case["shape"] == [29, 1] and len(case["craft"]) == 1
    assert case["distribution"] == "normal"
    assert 29 in primes_upto(64)
