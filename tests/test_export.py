"""Exports: T4 validated against the vendored TuningSchema, CSV with parameters as columns,
JSON with every evaluation."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import jsonschema
import pytest

from app.core.types import Evaluation, Stage
from app.export import T4_SCHEMA_PATH, export_csv, export_json, export_t4, render, t4_schema
from app.goal import Goal
from app.session import RunSession
from app.store import Store


@pytest.fixture
def recorded_run(tmp_db, small_goal_file):
    with Store(tmp_db) as store:
        session = RunSession(Goal.load(small_goal_file), store=store)
        session.run()
        yield store, session.run_id


def test_vendored_schema_is_kernel_tuners_t4_schema():
    schema = t4_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert "T4" in schema["$id"]
    kernel_tuner = pytest.importorskip("kernel_tuner")
    theirs = Path(kernel_tuner.__file__).parent / "schema" / "T4" / "1.0.0" / "results-schema.json"
    if theirs.exists():
        assert json.loads(theirs.read_text()) == json.loads(T4_SCHEMA_PATH.read_text())


def test_t4_export_of_a_run_validates(recorded_run):
    store, run_id = recorded_run
    doc = export_t4(store, run_id)
    jsonschema.validate(doc, t4_schema())
    assert doc["schema_version"] == "1.0.0"
    assert len(doc["results"]) == store.get_run(run_id)["evaluations"]
    first = doc["results"][0]
    assert set(first["configuration"]) == {"between_method", "block_size_x", "tile_size", "use_method"}
    ok = [r for r in doc["results"] if r["invalidity"] == "correct"]
    assert ok and all(isinstance(r["measurements"][0]["value"], float) for r in ok)
    assert all(r["times"]["runtimes"] for r in ok)  # recorded samples travel along


def test_t4_maps_our_failure_reasons(tmp_db):
    goal = Goal(name="g", space="pnpoly_RTX_3090.json.gz")
    reasons = {"compile_failed": "compile", "runtime_failed": "runtime", "timeout": "timeout",
               "verification_failed": "correctness", "invalid_config": "constraints"}
    with Store(tmp_db) as store:
        run_id = store.create_run(goal, {"name": "test"})
        for i, reason in enumerate(reasons, start=1):
            store.record_evaluation(run_id, i, Evaluation(
                key=f"k{i}", config={"x": i}, ok=False, reason=reason,
                stages=[Stage("compile", reason != "compile_failed", 0.25)]), float(i), None)
        doc = export_t4(store, run_id)
    jsonschema.validate(doc, t4_schema())
    assert [r["invalidity"] for r in doc["results"]] == list(reasons.values())
    assert [r["correctness"] for r in doc["results"]] == [1, 1, 1, 0, 1]
    assert doc["results"][0]["times"]["compilation_time"] == pytest.approx(250.0)


def test_csv_has_one_row_per_evaluation_and_params_as_columns(recorded_run):
    store, run_id = recorded_run
    rows = list(csv.DictReader(io.StringIO(export_csv(store, run_id))))
    stored = store.evaluation_rows(run_id)
    assert len(rows) == len(stored)
    for row, ev in zip(rows, stored):
        assert row["key"] == ev["key"]
        assert int(row["block_size_x"]) == ev["config"]["block_size_x"]
        assert (row["value"] == "") == (ev["value"] is None)


def test_csv_param_named_like_a_column_is_prefixed(tmp_db):
    with Store(tmp_db) as store:
        run_id = store.create_run(Goal(name="g", space="s.json"), {})
        store.record_evaluation(run_id, 1, Evaluation(key="k", config={"value": 3}, ok=True,
                                                      value=1.0), 0.1, 1.0)
        row = next(csv.DictReader(io.StringIO(export_csv(store, run_id))))
    assert row["value"] == "1.0" and row["param_value"] == "3"


def test_json_export_holds_run_goal_and_every_evaluation(recorded_run):
    store, run_id = recorded_run
    doc = json.loads(render(store, run_id, "json"))
    assert doc["run"]["id"] == run_id and doc["goal"]["name"] == "pnpoly test"
    assert [e["index"] for e in doc["evaluations"]] == list(range(1, 41))
    assert export_json(store, run_id)["evaluations"][0]["config"] == doc["evaluations"][0]["config"]


def test_json_export_carries_the_runs_one_summary(recorded_run):
    """The same speedup, basis and failure kinds as `show`, the report and the window."""
    from app.run_summary import summarize_store

    store, run_id = recorded_run
    doc = json.loads(render(store, run_id, "json"))
    expected = summarize_store(store, run_id)
    assert doc["summary"]["speedup"] == pytest.approx(expected.speedup)
    assert doc["summary"]["speedup_basis"] == expected.speedup_basis
    assert doc["summary"]["speedup_basis"].startswith("over the first successful evaluation")
    assert [f["reason"] for f in doc["summary"]["failures"]] == [f.reason for f in expected.failures]
