"""Structure from the model, numbers from the swarm: an LLM kernel declares a tunable, the
declaration is validated, and in the same run a classical agent searches it with the LLM source
as its template (CPU backend, real gcc, real loopback chat server); the tuned LLM structure beats
its untuned self and the template, and the credit goes to both agents."""

from __future__ import annotations

import shutil

import pytest

from app.goal import Goal, StopRules
from app.llm.tunables import declared_tunables

GUARDED = "#ifndef EXTRA\n#define EXTRA 32\n#endif\nvoid f(float *y) { for (int k = 0; k < EXTRA; ++k) y[0] += 1; }\n"


@pytest.mark.parametrize("line, problem", [
    ("// tunable: VEC = [4, 8]", "already a tuning parameter"),
    ("// tunable: extra = [1, 2]", "upper case"),
    ("// tunable: KS_X = [1, 2]", "upper case"),
    ("// tunable: EXTRA = [1.5, 2]", "integers"),
    ("// tunable: EXTRA = [7]", "2 to 8 distinct values"),
    ("// tunable: EXTRA = [1, 2, 3, 4, 5, 6, 7, 8, 9]", "2 to 8 distinct values"),
    ("// tunable: OTHER = [1, 2]", "#ifndef OTHER"),
])
def test_invalid_declarations_are_dropped_with_a_reason(line, problem):
    got = declared_tunables(line, GUARDED + "#ifndef OTHER_X\n#endif\n", ["VEC"])
    assert not got.params and problem in got.problems[0]


def test_a_valid_declaration_keeps_the_default_among_its_values():
    got = declared_tunables("// tunable: EXTRA = [8, 0]", GUARDED, ["VEC"])
    assert got.params == {"EXTRA": [0, 8, 32]} and got.defaults == {"EXTRA": 32}
    unused = "#ifndef EXTRA\n#define EXTRA 4\n#endif\nvoid f(void) {}\n"
    assert "never uses it" in declared_tunables("// tunable: EXTRA = [1, 2]", unused, []).problems[0]


# A correct softmax whose declared tunable EXTRA adds EXTRA exact-enough round trips per element
# (x * 3 / 3: not folded without fast-math); its default (32) is the slow end of the list.
TUNABLE_REPLY = """Idea: one exp per element, with a tunable amount of refinement
```c
#include <math.h>
// tunable: EXTRA = [0, 8, 32]
#ifndef EXTRA
#define EXTRA 32
#endif
static void row(float *restrict y, const float *restrict x, long n) {
    float m = -INFINITY;
    for (long j = 0; j < n; ++j) m = x[j] > m ? x[j] : m;
    float s = 0.0f;
    for (long j = 0; j < n; ++j) {
        float e = expf(x[j] - m);
        for (int k = 0; k < EXTRA; ++k) e = (e * 3.0f) / 3.0f;
        y[j] = e;
        s += e;
    }
    const float inv = 1.0f / s;
    for (long j = 0; j < n; ++j) y[j] *= inv;
}
void ks_kernel(float *restrict y, const float *restrict x, long rows, long cols) {
    for (long r = 0; r < rows; ++r) row(y + r * cols, x + r * cols, cols);
}
```"""

SLOW_TEMPLATE = ["ONLINE == 1", "ACC == 1", "VEC == 4", "THREADS == 1", "EXP_IMPL == 0"]


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None, reason="no cc")
@pytest.mark.slow
def test_a_declared_tunable_is_searched_in_the_same_run_and_the_tuned_structure_wins(monkeypatch):
    from llm_server import ChatServer, Reply

    from app.core.events import EventBus
    from app.gpu.cpu import CpuEvaluator
    from app.llm import LLMSettings, make_llm_team
    from app.swarm.coordinator import Coordinator
    from app.swarm.plan import RunPlan

    monkeypatch.setenv("KERNELSWARM_LLM_API_KEY", "sk-test")
    goal = Goal(name="softmax tunables", operator="softmax", backend="cpu", shapes=[[64, 1500]],
                stop=StopRules(max_evals=7),
                constraints=Goal().constraints.__class__(restrictions=list(SLOW_TEMPLATE))).validate()
    evaluator = CpuEvaluator(goal)
    with ChatServer([Reply(TUNABLE_REPLY)], default=Reply("no code this time")) as srv:
        settings = LLMSettings(base_url=srv.base_url, model="scripted", timeout_s=8,
                               backoff_s=0.05, max_retries=0, roles=["memory"])
        team = make_llm_team(goal, evaluator, settings=settings, bus=EventBus())
        coordinator = Coordinator(team.evaluator.space, team.evaluator,
                                  RunPlan(agents=[*team.agents, "local"],
                                  max_evals=goal.stop.max_evals, seed=3))
        try:
            result = coordinator.run()
        finally:
            evaluator.close()
    evals = coordinator.board.evaluations
    llm = team.agents[0]
    assert llm.stats["tunables_declared"] == 1 and llm.tunings
    untuned = [e for e in evals if e.agent == "llm-memory" and e.source and "EXTRA" in e.source]
    tuned = [e for e in evals if e.agent == "llm-memory+local"]
    assert len(untuned) == 1 and untuned[0].ok, [(e.agent, e.reason, e.detail) for e in evals]
    assert tuned and all(e.ok for e in tuned), [(e.config, e.reason, e.detail) for e in tuned]
    assert all(e.source == untuned[0].source and "EXTRA" in e.config for e in tuned)
    assert {e.config["EXTRA"] for e in tuned} <= {0, 8} and "EXTRA" not in untuned[0].config
    best_tuned = min(tuned, key=lambda e: e.value)
    # 4 template configurations (CHUNK is the only free parameter), the LLM kernel, 2 tunings
    # beats its untuned self outside the timing spread, and every template configuration
    assert best_tuned.p90_ms < untuned[0].p10_ms, (best_tuned.value, untuned[0].value)
    templates = [e for e in evals if e.ok and e.source is None]
    assert templates and best_tuned.value < min(e.value for e in templates)
    assert result.best.key == best_tuned.key
    # the credit goes to both: the LLM agent and the classical agent that tuned it
    assert result.credits["llm-memory"]["improvements"] >= 1
    assert result.credits["local"]["improvements"] >= 1


def test_a_tuned_cuda_candidate_reaches_nvrtc_with_its_tunables_as_defines(tmp_path):
    """The guard turns tunables outside the backend's space into #define lines before the
    source; after the harness prefix that compiles with NVRTC (no GPU needed)."""
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from app.catalog import get_operator
    from app.core.types import Candidate
    from app.gpu.cuda import nvrtc
    from app.llm.guard import PolicyEvaluator
    from app.llm.spec import kernel_spec

    class Space:  # the backend's space is all the guard reads of its inner evaluator here
        params = get_operator("cuda", "softmax").space("float32").params

    class Backend:
        space = Space()
        max_parallel = 1

    op = get_operator("cuda", "softmax")
    shape = [64, 1024]
    goal = Goal(name="t", operator="softmax", backend="cuda", shapes=[shape])
    spec = kernel_spec(goal)
    source = ("#ifndef UNROLL_ROWS\n#define UNROLL_ROWS 1\n#endif\n"
              "static_assert(UNROLL_ROWS == 4, \"the tuned value arrives\");\n" + spec.template)
    config = {**op.recommended("float32", shape)[0], "UNROLL_ROWS": 4}
    guard = PolicyEvaluator(Backend(), spec)
    form = guard._backend_form(Candidate(config=config, key="k", source=source))
    assert "UNROLL_ROWS" not in form.config and form.source.startswith("#define UNROLL_ROWS 4\n")
    built = nvrtc.compile_source(op.render(form.config, shape, "float32", source=form.source),
                                 spec.entry, "sm_90", cache=tmp_path)
    assert built.resource(spec.entry).registers > 0
