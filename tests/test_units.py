"""Units in one place: the objective's unit from metric and operator, decided once per run and
shown the same everywhere: CLI summary and `show`, JSON and T4 exports, the live plot's axis
and the HTML report. A memory-bound throughput goal (cpu softmax) is in GB/s, never GFLOP/s."""

from __future__ import annotations

import json

import pytest

from app.cli import main
from app.core.units import (
    format_gain,
    format_percent,
    format_value,
    fraction_of_limit,
    gain,
    objective_unit,
    run_unit,
)
from app.goal import Goal
from app.gpu.registry import backend_spec


def test_objective_unit_follows_metric_and_boundedness():
    assert objective_unit("time") == "ms"
    assert objective_unit("energy") == "mJ"
    assert objective_unit("throughput") == "GFLOP/s"
    assert objective_unit("throughput", memory_bound=True) == "GB/s"
    assert objective_unit("time", memory_bound=True) == "ms"


def test_format_value_has_three_to_four_significant_digits_and_the_unit():
    assert format_value(12.3456, "GB/s") == "12.35 GB/s"
    assert format_value(0.0123456, "ms") == "0.01235 ms"
    assert format_value(123456.7, "GFLOP/s") == "123,457 GFLOP/s"
    assert format_value(None, "ms") == "—" and format_value(float("nan"), "ms") == "—"
    assert format_value(2.0, "") == "2"


def test_gain_and_fraction_of_limit_respect_direction():
    assert gain(2.0, 4.0, minimize=True) == 2.0  # time halved: 2x
    assert gain(300.0, 100.0, minimize=False) == 3.0  # throughput tripled
    assert gain(None, 4.0, True) is None and format_gain(None) == "—"
    assert format_gain(2.0) == "2.00×"
    assert fraction_of_limit(2.0, 1.0, minimize=True) == 0.5  # twice the time floor
    assert fraction_of_limit(450.0, 900.0, minimize=False) == 0.5  # half the bandwidth roof
    assert format_percent(0.5) == "50 %" and format_percent(None) == "—"


def test_run_unit_reads_the_stored_unit_and_falls_back_to_the_metric():
    assert run_unit({"device": {"name": "x", "unit": "GB/s"}}, "throughput") == "GB/s"
    assert run_unit({"device": {"name": "x"}}, "throughput") == "GFLOP/s"  # older runs
    assert run_unit(None, "time") == "ms"


@pytest.mark.parametrize("backend, operator, shape, unit", [
    ("cpu", "softmax", [64, 256], "GB/s"), ("cpu", "gemm", [64, 64, 64], "GFLOP/s"),
    ("cuda", "rmsnorm", [64, 256], "GB/s"), ("cuda", "gemm", [64, 64, 64], "GFLOP/s"),
])
def test_backend_unit_rule_reads_the_operator(backend, operator, shape, unit):
    goal = Goal(name="g", backend=backend, operator=operator, shapes=[shape])
    goal.objective.metric = "throughput"
    assert backend_spec(backend).unit(goal) == unit
    goal.objective.metric = "time"
    assert backend_spec(backend).unit(goal) == "ms"


# ---- one real CPU run, memory-bound throughput: GB/s everywhere -----------------------------
@pytest.fixture(scope="module")
def softmax_throughput_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("units")
    goal = tmp / "softmax_gbs.toml"
    goal.write_text('name = "softmax GB/s"\nbackend = "cpu"\noperator = "softmax"\n'
                    'shapes = [[64, 256]]\n[objective]\nmetric = "throughput"\n'
                    '[stop]\nmax_evals = 3\n[swarm]\nagents = ["explorer"]\nworkers = 1\n',
                    encoding="utf-8")
    db = tmp / "history.sqlite"
    trace = tmp / "trace.jsonl"
    return goal, db, trace


@pytest.mark.slow
def test_memory_bound_throughput_is_gb_per_s_in_cli_export_and_trace(
        capsys, softmax_throughput_run, tmp_path):
    goal, db, trace = softmax_throughput_run
    rc = main(["run", str(goal), "--db", str(db), "--trace", str(trace)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "best throughput:" in out and " GB/s by " in out
    assert "GFLOP/s" not in out + err
    started = json.loads(trace.read_text().splitlines()[0])
    assert started["event"] == "RunStarted" and started["unit"] == "GB/s"

    assert main(["show", "1", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "GB/s" in out and "GFLOP/s" not in out

    assert main(["export", "1", "--format", "json", "--db", str(db)]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert exported["run"]["unit"] == "GB/s"
    assert exported["run"]["device"]["unit"] == "GB/s"  # stored with the run, not re-derived
    assert main(["export", "1", "--format", "t4", "--db", str(db)]) == 0
    t4 = json.loads(capsys.readouterr().out)
    units = {m["unit"] for r in t4["results"] for m in r["measurements"]
             if m["name"] == "throughput" and m["unit"]}
    assert units == {"GB/s"}


# ---- the same through a session whose evaluator is a recorded space (no compiler needed) ----
def test_the_unit_is_decided_once_stored_and_exported(tmp_path, small_space, capsys):
    """A memory-bound throughput goal (cpu softmax) run with a recorded space standing in for
    its evaluator: the session decides GB/s from the goal, publishes it, and stores it with the
    run, so `show` and every export read it back without re-deriving it from the metric."""
    from app.core.events import EventBus, RunStarted
    from app.gpu.replay import ReplayEvaluator, load_cache_file
    from app.session import RunSession
    from app.store import Store

    goal = Goal(name="softmax GB/s", backend="cpu", operator="softmax", shapes=[[64, 256]])
    goal.objective.metric = "throughput"
    goal.stop.max_evals = 5
    goal.swarm.agents, goal.swarm.workers = ["explorer"], 1
    bus = EventBus()
    started: list[RunStarted] = []
    bus.subscribe(lambda e: started.append(e) if isinstance(e, RunStarted) else None)
    db = tmp_path / "h.sqlite"
    with Store(db) as store:
        session = RunSession(goal, store=store, bus=bus,
                             evaluator=ReplayEvaluator(load_cache_file(small_space)))
        assert session.unit == "GB/s"
        session.run()
        assert store.get_run(session.run_id)["device"]["unit"] == "GB/s"
    assert [e.unit for e in started] == ["GB/s"]
    assert main(["show", str(session.run_id), "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert " GB/s" in out and "GFLOP/s" not in out
    assert main(["export", str(session.run_id), "--format", "json", "--db", str(db)]) == 0
    assert json.loads(capsys.readouterr().out)["run"]["unit"] == "GB/s"
