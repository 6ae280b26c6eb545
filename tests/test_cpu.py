"""The CPU backend end to end with the real compiler and worker processes: every operator's
template compiles and verifies, bad input gets a clear message, faults cost one worker, the
validation set grows in SQLite and is reused, and a swarm run works on a CPU goal."""

from __future__ import annotations

import dataclasses
import os
import random
import signal
import tempfile
import time
from pathlib import Path

import pytest

from app.core.evaluator import BackendUnavailable
from app.core.types import (
    COMPILE_FAILED,
    CRASH,
    OUT_OF_MEMORY,
    RESOURCE_LIMIT,
    STATIC_CHECK,
    TIMEOUT,
    VERIFY_FAILED,
    Candidate,
)
from app.goal import Goal, GoalError
from app.gpu import cpu as cpu_backend
from app.gpu.cascade import ENGINE_STAGES
from app.gpu.cpu import CpuEvaluator, CpuSettings, find_compiler
from app.gpu.timing import TimingSettings
from app.gpu.worker import Deadlines

KERNELS = Path(__file__).parent / "kernels"
GOALS = Path(__file__).resolve().parent.parent / "resources" / "goals"
pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")

# the machine's cache roofs, measured once (~10 s) and shared by every test that needs them
ROOF_FILE = Path(tempfile.gettempdir()) / f"kernelswarm-test-cpu-roofs-{os.getuid()}.json"
FAST = CpuSettings(
    timing=TimingSettings(warmup=1, min_samples=3, max_samples=5, max_seconds=0.2),
    baseline_timing=TimingSettings(warmup=1, min_samples=3, max_samples=3, max_seconds=0.2),
    deadlines=Deadlines(compile_s=60.0, run_s=2.0), flush_bytes=0, memory_limit_bytes=1 << 30,
    roof_file=ROOF_FILE)
TINY = {"gemm": [24, 40, 56], "softmax": [16, 80], "rmsnorm": [16, 80], "transpose": [40, 24]}
TRANSPOSE_CFG = {"TILE": 16, "WRITE_MAJOR": 1, "VEC": 8, "THREADS": 1}


def goal(operator: str, shape=None, **kw) -> Goal:
    return Goal(name=f"test {operator}", backend="cpu", operator=operator,
                shapes=[shape or TINY[operator]], **kw)


@pytest.fixture(scope="module")
def transpose():
    ev = CpuEvaluator(goal("transpose", [64, 96]), settings=FAST)
    yield ev
    ev.close()


def source(ev, text: str, key: str, config=None):
    return ev.evaluate(Candidate(config=config or TRANSPOSE_CFG, key=key, source=text))


@pytest.mark.parametrize("operator", sorted(TINY))
@pytest.mark.slow
def test_every_operator_compiles_verifies_and_is_timed(operator):
    with CpuEvaluator(goal(operator), settings=FAST) as ev:
        rng = random.Random(1)
        configs = [ev.space.sample(rng) for _ in range(2)]
        results = [ev.evaluate(Candidate(config=c, key=f"k{i}")) for i, c in enumerate(configs)]
        baselines = ev.baselines()
    for r in results:
        assert r.ok, (r.reason, r.detail, r.log[-500:])
        assert [s.name for s in r.stages if s.name not in ENGINE_STAGES] == [
            "static_check", "compile", "resources", "verify", "time", "reverify"]
        assert sum(s.seconds for s in r.stages) == pytest.approx(r.sim_seconds)
        assert r.value == r.time_ms and r.time_ms > 0 and r.p10_ms <= r.time_ms <= r.p90_ms
        assert len(r.samples_ms) >= 3
        assert r.metrics["speedup_vs_numpy"] > 0 and r.metrics.get("speedup_vs_c_reference", 0) > 0, \
            (r.metrics, baselines, ev.baseline_log)
        assert ("gflops" if operator == "gemm" else "gbs") in r.metrics
        assert r.resources["build_key"]
    assert baselines["numpy_ms"] > 0 and baselines["c_reference_ms"] > 0 and baselines["copy_gbs"] > 0


def test_throughput_objective_reports_gb_per_second():
    g = goal("transpose")
    g.objective.metric = "throughput"
    with CpuEvaluator(g, settings=FAST) as ev:
        r = ev.evaluate(Candidate(config=TRANSPOSE_CFG, key="t"))
        assert ev.baseline() > 0 and ev.limit() > 0, ev.baseline_log
    assert r.ok
    expected = 8.0 * 40 * 24 / (r.time_ms / 1000) / 1e9
    assert r.value == pytest.approx(expected, rel=1e-9) == pytest.approx(r.metrics["gbs"])


def test_compile_cache_is_keyed_by_what_runs(transpose):
    first = source(transpose, transpose.template, "c1")
    second = source(transpose, transpose.template, "c2")
    edited = source(transpose, transpose.template + "\n/* edited */\n", "c3")
    compile_stage = {r.key: next(s for s in r.stages if s.name == "compile") for r in (first, second, edited)}
    assert compile_stage["c2"].detail == "cached"
    assert compile_stage["c3"].detail != "cached"
    assert first.resources["build_key"] == second.resources["build_key"] != edited.resources["build_key"]
    assert transpose.candidate_key(TRANSPOSE_CFG) == first.resources["build_key"]


def test_compile_errors_are_kept_with_the_candidate(transpose):
    r = source(transpose, "void ks_kernel(float *y, const float *x, long rows, long cols) { oops }\n", "bad")
    assert r.reason == COMPILE_FAILED
    assert "compile error" in r.detail and "oops" in r.log


def test_static_check_refuses_forbidden_calls(transpose):
    text = '#include <stdlib.h>\nvoid ks_kernel(float *y, const float *x, long r, long c) { system("ls"); }\n'
    r = source(transpose, text, "static")
    assert r.reason == STATIC_CHECK and "system" in r.detail
    assert [s.name for s in r.stages if s.name not in ENGINE_STAGES] == ["static_check"]


def test_library_importing_foreign_symbols_hits_the_resource_stage(transpose):
    # a function no text check names, resolved by the dynamic linker: refused by the ELF's imports
    text = ("double strtod(const char *, char **);\n"
            "void ks_kernel(float *y, const float *x, long r, long c) { y[0] = (float)strtod(\"1\", 0) * x[0]; }\n")
    r = source(transpose, text, "symbols")
    assert r.reason == RESOURCE_LIMIT and "strtod" in r.detail, (r.reason, r.detail)


def test_invalid_configuration_is_refused_without_running(transpose):
    r = transpose.evaluate(Candidate(config={**TRANSPOSE_CFG, "TILE": 7}, key="invalid"))
    assert not r.ok and r.reason == "invalid_config"


@pytest.mark.slow
def test_crash_and_hang_mid_run_then_successful_evaluations(transpose):
    outcomes = []
    for i, kernel in enumerate([None, "crash_transpose.c", None, "hang_transpose.c", None, None]):
        text = (KERNELS / kernel).read_text() if kernel else None
        outcomes.append(transpose.evaluate(Candidate(config=TRANSPOSE_CFG, key=f"run{i}", source=text)))
    assert [o.ok for o in outcomes] == [True, False, True, False, True, True]
    assert outcomes[1].reason == CRASH and outcomes[3].reason == TIMEOUT


def test_a_killed_worker_is_restarted(transpose):
    assert source(transpose, transpose.template, "alive").ok
    pid = transpose.pool.workers[0].pid
    os.kill(pid, signal.SIGKILL)
    time.sleep(0.1)
    r = source(transpose, transpose.template, "after-kill")
    assert r.ok and transpose.pool.workers[0].pid != pid


@pytest.mark.slow
def test_workers_are_recycled():
    settings = dataclasses.replace(FAST, recycle_after=2)
    with CpuEvaluator(goal("transpose"), settings=settings) as ev:
        pids = []
        for i in range(4):
            assert ev.evaluate(Candidate(config=TRANSPOSE_CFG, key=f"r{i}")).ok
            pids.append(ev.pool.workers[0].pid)
    assert len(set(pids)) >= 2


def test_memory_hog_is_out_of_memory_and_the_run_goes_on():
    settings = dataclasses.replace(FAST, memory_limit_bytes=400 << 20)
    with CpuEvaluator(goal("transpose"), settings=settings) as ev:
        hog = ev.evaluate(Candidate(config=TRANSPOSE_CFG, key="hog",
                                    source=(KERNELS / "memory_hog_transpose.c").read_text()))
        after = ev.evaluate(Candidate(config=TRANSPOSE_CFG, key="after"))
    assert hog.reason == OUT_OF_MEMORY and "400 MiB" in hog.detail
    assert after.ok


def test_off_by_one_is_caught_at_an_edge_shape():
    # goal shapes are multiples of the kernel's tile: only the edge shapes expose the bug
    with CpuEvaluator(goal("transpose", [64, 128]), settings=FAST) as ev:
        r = ev.evaluate(Candidate(config={**TRANSPOSE_CFG, "TILE": 32}, key="obo",
                                  source=(KERNELS / "off_by_one_transpose.c").read_text()))
    assert r.reason == VERIFY_FAILED
    case = r.failing_case
    assert case["origin"] == "edge" and case["shape"] != [64, 128]
    assert any(d % 32 for d in case["shape"])
    assert "NaN" in case["problem"]


@pytest.mark.slow
def test_validation_set_grows_in_sqlite_and_is_reused(tmp_db):
    from app.store import Store

    g = goal("transpose", [64, 128])
    off_by_one = (KERNELS / "off_by_one_transpose.c").read_text()
    cand = Candidate(config={**TRANSPOSE_CFG, "TILE": 32}, key="obo", source=off_by_one)
    with Store(tmp_db) as store:
        assert store.validation_cases(g) == []
        with CpuEvaluator(g, store.validation_cases(g), settings=FAST) as ev:
            first = ev.evaluate(cand)
        store.add_validation_case(g, first.failing_case)  # what the run session does per failure
    with Store(tmp_db) as store:  # a later run of the same goal
        stored = store.validation_cases(g)
        assert [c["shape"] for c in stored] == [first.failing_case["shape"]]
        with CpuEvaluator(g, stored, settings=FAST) as ev:
            second = ev.evaluate(cand)
            honest = ev.evaluate(Candidate(config=TRANSPOSE_CFG, key="honest"))
    # the stored case is checked first, so it is what catches the bug this time
    assert second.failing_case["origin"] == "validation"
    assert second.failing_case["seed"] == first.failing_case["seed"]
    assert honest.ok and "checks passed" in next(s.detail for s in honest.stages if s.name == "verify")


@pytest.mark.slow
def test_a_swarm_run_on_a_cpu_goal(tmp_db):
    from app.session import RunSession
    from app.store import Store

    g = goal("softmax")
    g.stop.max_evals = 5
    g.swarm.workers = 1
    g.swarm.agents = ["explorer", "local"]
    with Store(tmp_db) as store:
        session = RunSession(g, store, evaluator=CpuEvaluator(g, settings=FAST))
        try:
            result = session.run()
        finally:
            session.evaluator.close()
        rows = store.load_evaluations(session.run_id)
    assert result.evaluations == 5 and len(rows) == 5
    assert result.best is not None and result.best.ok and result.best.time_ms > 0
    assert sum(c["evaluated"] for c in result.credits.values()) == 5


def test_bad_goals_get_one_clear_message():
    with pytest.raises(GoalError, match="dtype"):
        CpuEvaluator(goal("gemm", dtype="float16"), settings=FAST)
    with pytest.raises(GoalError, match=r"shapes\[0\].*\[M, N, K\]"):
        CpuEvaluator(goal("gemm", [64, 64]), settings=FAST)
    energy = goal("transpose")
    energy.objective.metric = "energy"
    with pytest.raises(GoalError, match="energy"):
        CpuEvaluator(energy, settings=FAST)


def test_no_c_compiler_says_so_plainly(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    cpu_backend.toolchain.cache_clear()
    try:
        with pytest.raises(BackendUnavailable, match="C compiler.*replay"):
            CpuEvaluator(goal("transpose"), settings=FAST)
    finally:
        cpu_backend.toolchain.cache_clear()


@pytest.mark.parametrize("path", sorted(GOALS.glob("cpu_*.toml")), ids=lambda p: p.stem)
def test_example_cpu_goals_load(path):
    g = Goal.load(path).validate()
    assert g.backend == "cpu" and g.dtype == "float32"


def test_compare_times_candidate_numpy_and_c_reference_together(transpose):
    best = source(transpose, transpose.template, "to-compare")
    result = transpose.compare(best)
    assert result["candidate_ms"] > 0 and result["numpy_ms"] > 0 and result["c_reference_ms"] > 0
    assert result["speedup_vs_c_reference"] == pytest.approx(
        result["c_reference_ms"] / result["candidate_ms"])


@pytest.mark.parametrize("own_process", [True, False])
def test_a_worker_runs_the_template_with_or_without_the_kernel_host(monkeypatch, own_process):
    """Linux runs each candidate in the kernel host; elsewhere (no memfd or seccomp) the
    candidate is loaded into the worker itself. Both verify and time the template."""
    from app.catalog import get_operator
    from app.gpu import cpu
    from app.gpu.cascade import CascadeRequest
    from app.gpu.cpu.kernel_host import InProcessHost, KernelHost

    monkeypatch.setattr(cpu.worker, "host_supported", lambda: own_process)
    op = get_operator("cpu", "transpose")
    request = CascadeRequest(key="t", config=TRANSPOSE_CFG, source=None, template=op.template(),
                             goal_shapes=[[64, 96]], params=op.params(1), seed=3,
                             timing=TimingSettings(min_samples=3, max_samples=5))
    worker = cpu.CpuWorker("transpose", cpu.find_compiler(), 60.0, 0)
    try:
        assert isinstance(worker.host, KernelHost if own_process else InProcessHost)
        reply = worker(("evaluate", request), lambda stage: None)
    finally:
        worker.host.close()
    from app.core.types import Evaluation

    ev = Evaluation.from_dict(reply["evaluation"])
    assert ev.ok and ev.time_ms > 0, (ev.reason, ev.detail)
