"""LLM kernels keep their identity across runs: the warm start brings back an
LLM kernel's source with its declared tunables and tuned values and tunes them again; transfer
never replays a configuration measured with an LLM kernel's source on the template."""

from __future__ import annotations

import random
import shutil

import pytest

from app.core.space import SearchSpace
from app.core.types import Evaluation
from app.goal import Goal, StopRules
from app.llm.lessons import load_prior
from app.llm.tunables import declared_tunables
from app.store import Store
from app.swarm.transfer import SourceRun, rank_transfer

PARAMS = ["ACC", "CHUNK", "EXP_IMPL", "ONLINE", "THREADS", "VEC"]
LLM_SOURCE = """#include <math.h>
#ifndef UNROLL
#define UNROLL 2
#endif
void ks_kernel(float *restrict y, const float *restrict x, long rows, long cols) {
#pragma GCC unroll UNROLL
    for (long i = 0; i < rows * cols; ++i) y[i] = x[i];
}
"""
OP_CONFIG = {"ACC": 1, "CHUNK": 256, "EXP_IMPL": 0, "ONLINE": 1, "THREADS": 1, "VEC": 4}
GOAL = Goal(name="warm", operator="softmax", backend="cpu", shapes=[[64, 1500]])


def test_the_warm_start_brings_back_the_tunables_and_the_tuned_values(tmp_path):
    with Store(tmp_path / "h.sqlite") as store:
        run = store.create_run(GOAL, {"name": "cpu0"})
        tuned = Evaluation("k-tuned", {**OP_CONFIG, "UNROLL": 8}, True, 6.7, time_ms=6.7,
                           source=LLM_SOURCE, agent="llm-memory+local")
        store.record_evaluation(run, 1, tuned, 1.0, 6.7)
        prior = load_prior(store, GOAL, params=PARAMS)
    k = prior.kernels[0]
    assert k["config"] == OP_CONFIG  # valid in this run's space: not swapped for another
    assert k["tuned"] == {"UNROLL": 8} and 8 in k["tunables"]["UNROLL"]
    assert "#define UNROLL 8" in k["source"]  # runs as it was measured
    d = declared_tunables(k["source"], k["source"], set(PARAMS))
    assert d.problems == [] and d.defaults == {"UNROLL": 8} and len(d.params["UNROLL"]) >= 3


def test_transfer_never_replays_an_llm_kernels_configuration_on_the_template():
    space = SearchSpace({"BLOCK": [16, 32, 64, 128], "VEC": [1, 2, 4]})
    evals = []
    for i, (b, v) in enumerate((b, v) for b in (16, 32, 64, 128) for v in (1, 2, 4)):
        # the template: BLOCK=64, VEC=4 is its best
        evals.append(Evaluation(f"t{i}", {"BLOCK": b, "VEC": v}, True,
                                10.0 + abs(b - 64) / 8 + (4 - v)))
    # LLM kernels measured at two other configurations: 6.7-7.8 ms with their own source
    evals += [Evaluation("l1", {"BLOCK": 16, "VEC": 1}, True, 6.7, source=LLM_SOURCE),
              Evaluation("l2", {"BLOCK": 128, "VEC": 2}, True, 7.8, source=LLM_SOURCE)]
    ev = rank_transfer(space, [SourceRun(1, "cpu0", evals)])
    assert ev.ranked[0] == {"BLOCK": 64, "VEC": 4}
    assert ev.sources[0]["evaluations"] == 12  # the LLM kernels' figures are not evidence
    # BLOCK=16, VEC=1 is the template's third worst (9 of 11): an LLM kernel's 6.7 ms there
    # does not lift it
    assert ev.scores[space.key({"BLOCK": 16, "VEC": 1})] == 9 / 11


# ---- end to end: two real runs on the CPU backend with a scripted model ------------------
TUNABLE = """```c
#include <math.h>
#include <stddef.h>
// tunable: UNROLL = [1, 2]
#ifndef UNROLL
#define UNROLL 1
#endif
#ifndef THREADS
#define THREADS 1
#endif
static void row(float *restrict y, const float *restrict x, long n) {
    float m = -INFINITY;
    for (long j = 0; j < n; ++j) m = x[j] > m ? x[j] : m;
    float s = 0.0f;
    long j0 = 0;
#if UNROLL == 2
    for (; j0 + 1 < n; j0 += 2) {
        const float e0 = expf(x[j0] - m), e1 = expf(x[j0 + 1] - m);
        y[j0] = e0; y[j0 + 1] = e1; s += e0 + e1;
    }
#endif
    for (long j = j0; j < n; ++j) { const float e = expf(x[j] - m); y[j] = e; s += e; }
    const float inv = 1.0f / s;
    for (long j = 0; j < n; ++j) y[j] *= inv;
}
void ks_kernel(float *restrict y, const float *restrict x, long rows, long cols) {
#pragma omp parallel for num_threads(THREADS) schedule(static)
    for (long r = 0; r < rows; ++r) row(y + r * cols, x + r * cols, cols);
}
```"""


def _goal(max_evals: int) -> Goal:
    slow = ["ONLINE == 1", "ACC == 1", "VEC == 4", "THREADS == 1", "EXP_IMPL == 0"]
    return Goal(name="softmax warm", operator="softmax", backend="cpu", shapes=[[64, 1500]],
                stop=StopRules(max_evals=max_evals),
                constraints=Goal().constraints.__class__(restrictions=slow)).validate()


def _run(goal: Goal, store: Store, server):
    from app.core.events import EventBus
    from app.gpu.cpu import CpuEvaluator
    from app.llm import LLMSettings, make_llm_team
    from app.swarm.coordinator import Coordinator
    from app.swarm.plan import RunPlan

    evaluator = CpuEvaluator(goal)
    bus = EventBus()
    run_id = store.create_run(goal, {"kind": "cpu"})
    unsubscribe = bus.subscribe(store.subscriber(run_id), critical=True)
    settings = LLMSettings(base_url=server.base_url, model="scripted", timeout_s=8,
                           backoff_s=0.05, max_retries=1, roles=["memory"])
    team = make_llm_team(goal, evaluator, settings=settings, bus=bus, run_id=run_id,
                         db_path=store.path, seed=1)
    coordinator = Coordinator(team.evaluator.space, team.evaluator, RunPlan(agents=team.agents,
                              max_evals=goal.stop.max_evals, run_id=run_id, goal_name=goal.name,
                              backend="cpu", seed=1), bus=bus)
    try:
        result = coordinator.run()
    finally:
        evaluator.close()
        unsubscribe()
    return run_id, result, team


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="needs a C compiler")
def test_a_second_run_warm_starts_the_llm_kernel_with_its_tunables_and_retunes_it(
        tmp_path, monkeypatch):
    from llm_server import ChatServer, Reply

    monkeypatch.setenv("KERNELSWARM_LLM_API_KEY", "sk-warm")
    random.seed(0)
    with Store(tmp_path / "history.sqlite") as store:
        with ChatServer([Reply(TUNABLE)], default=Reply("no code here"), lifetime_s=120) as srv:
            run1, _, _ = _run(_goal(8), store, srv)
        rows1 = store.evaluation_rows(run1)
        tuned1 = [r for r in rows1 if r["ok"] and r["source"] and "UNROLL" in r["config"]]
        assert tuned1, "run 1 tuned the LLM kernel's declared tunable"
        with ChatServer(default=Reply("no code here"), lifetime_s=120) as srv2:
            run2, _, team2 = _run(_goal(6), store, srv2)
        rows2 = store.evaluation_rows(run2)
    warm = team2.warm_start[0]
    assert warm["tunables"].get("UNROLL") and "UNROLL" in warm["tuned"]
    first = next(r for r in rows2 if r["agent"] == "llm-memory")
    assert f"#define UNROLL {warm['tuned']['UNROLL']}" in first["source"]
    retuned = [r for r in rows2 if r["agent"] == "llm-memory+local"]
    assert retuned and all("UNROLL" in r["config"] for r in retuned)  # tuned again in run 2
