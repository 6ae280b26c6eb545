"""Backends and agents register themselves; a run checks its goal once, through them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from app.cli import main
from app.goal import Goal, GoalError
from app.gpu import registry
from app.gpu.registry import BackendSpec, backend_names, backend_spec, register_backend
from app.session import RunSession, check_goal


def test_builtin_backends_describe_themselves():
    assert backend_names()[:3] == ("replay", "cpu", "cuda")
    replay, cpu, cuda = (backend_spec(n) for n in ("replay", "cpu", "cuda"))
    assert not replay.compiles and replay.simulated_clock and replay.language == ""
    assert (cpu.compiles, cpu.language, cpu.source_suffix) == (True, "c", ".c")
    assert (cuda.compiles, cuda.language, cuda.source_suffix, cuda.selects_device) == (
        True, "cuda", ".cu", True)
    with pytest.raises(GoalError) as err:
        backend_spec("opencl")
    assert err.value.field == "backend" and "replay, cpu, cuda" in err.value.problem


def test_devices_lists_registered_backends_with_their_probe(capsys):
    calls = []

    def probe():
        calls.append(1)
        return False, "no such accelerator on this test machine"

    register_backend(BackendSpec(
        name="testaccel", label="test", make_evaluator=lambda g, c: None, probe=probe,
        check_goal=lambda g: None, unit=lambda g: "ms"))
    try:
        assert main(["devices"]) == 0
    finally:
        registry._BACKENDS.pop("testaccel")
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["replay", "cpu", "cuda", "testaccel"]
    assert lines[-1].split()[1] == "no" and "no such accelerator on this test machine" in lines[-1]
    assert calls == [1]


class CountingGoal(Goal):
    """A goal that counts how often it is validated."""

    validations = 0

    def validate(self) -> Goal:
        type(self).validations += 1
        return super().validate()


def test_a_run_validates_its_goal_once(tmp_path, small_space):
    from app.store import Store

    CountingGoal.validations = 0
    goal = CountingGoal(name="once", space=str(small_space), backend="replay")
    goal.stop.max_evals, goal.swarm.workers = 5, 1
    with Store(tmp_path / "h.sqlite") as store:
        result = RunSession(goal, store=store).run()
    assert result.evaluations == 5
    assert CountingGoal.validations == 1


def test_the_operator_check_runs_once_per_run(tmp_path, small_space):
    """The backend's goal check (operator known, shapes given) runs once in a run's setup."""
    from app.gpu.replay import ReplayEvaluator, load_cache_file

    seen: list[str] = []
    cpu = backend_spec("cpu")
    register_backend(BackendSpec(
        name="cpu-counted", label=cpu.label, make_evaluator=cpu.make_evaluator, probe=cpu.probe,
        check_goal=lambda g: (seen.append(g.operator), cpu.check_goal(g))[-1],
        unit=cpu.unit, language="c", compiles=True))
    try:
        goal = Goal(name="g", backend="cpu-counted", operator="softmax", shapes=[[64, 256]])
        goal.stop.max_evals, goal.swarm.workers, goal.swarm.agents = 3, 1, ["explorer"]
        RunSession(goal, evaluator=ReplayEvaluator(load_cache_file(small_space))).run()
        assert seen == ["softmax"]
        goal.operator = "no_such_op"
        with pytest.raises(GoalError, match="^operator: unknown operator 'no_such_op' for backend"):
            check_goal(goal)
    finally:
        registry._BACKENDS.pop("cpu-counted")


def test_agents_register_themselves_and_the_swarm_never_imports_llm():
    code = ("import sys, app.session, app.swarm.coordinator, app.swarm.agents as a; "
            "print(sorted(a.AGENT_NAMES)); print('app.llm' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["['evolution', 'explorer', 'local', 'model']", "False"]
    import app.llm  # noqa: F401 - registers "llm"
    from app.swarm.agents import agent_names, agent_spec, check_agents

    assert "llm" in agent_names() and agent_spec("llm").make is None
    goal = Goal(name="g", space="x", swarm=Goal().swarm)
    goal.swarm.agents = ["explorer", "oracle"]
    with pytest.raises(GoalError) as err:
        check_agents(goal)
    assert err.value.field == "swarm.agents" and "'oracle'" in err.value.problem
    goal.swarm.agents = ["explorer", "llm"]
    goal.llm = {"max_concurrent": 0}
    with pytest.raises(GoalError) as err:
        check_agents(goal)
    assert err.value.field == "llm.max_concurrent"
