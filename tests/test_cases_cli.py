"""`kernelswarm cases GOAL`: a goal's validation set listed, exported and
added to from a file (a bad file gets one line and nothing stored is lost), and a stored case
applied to a resumed run's kernels before one of them can be the best again."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from test_adversary import Planted, sources
from test_cheats import FAST

from app.cli import main
from app.core.events import BestRevoked, Evaluated, EventBus
from app.goal import Goal
from app.gpu.cpu import CpuEvaluator, find_compiler
from app.session import RunSession
from app.store import Store, goal_key
from app.swarm.coordinator import Coordinator
from app.swarm.plan import RunPlan

GOAL_TOML = """name = "cases transpose"
backend = "cpu"
operator = "transpose"
shapes = [[64, 96]]

[stop]
max_evals = 3

[swarm]
agents = ["explorer"]
"""


@pytest.fixture
def setup(tmp_path):
    path = tmp_path / "goal.toml"
    path.write_text(GOAL_TOML)
    db = tmp_path / "history.sqlite"
    goal = Goal.load(path)
    with Store(db) as store:
        store.create_run(goal, {"kind": "cpu"})  # the goal is known by key too
        store.add_validation_case(goal, {"shape": [7, 3], "distribution": "normal", "seed": 4,
                                         "dtype": "float32"}, "verification failure of candidate x")
    return path, db, goal


def cases(*args: str) -> int:
    return main(["cases", *args])


def test_list_export_and_add(setup, tmp_path, capsys):
    path, db, goal = setup
    assert cases(str(path), "--db", str(db)) == 0
    out = capsys.readouterr().out
    assert "1 validation case(s)" in out and "[7, 3]" in out
    assert "verification failure of candidate x" in out
    new = tmp_path / "mine.json"
    new.write_text(json.dumps([{"shape": [23, 5], "seed": 9},
                               {"shape": [5, 5], "distribution": "sparse",
                                "craft": [{"op": "sort", "dir": -1}]}]))
    assert cases(str(path), "--add", str(new), "--db", str(db)) == 0
    assert "added 2 case(s)" in capsys.readouterr().out
    key = goal_key(goal)
    assert cases(key[:10], "--db", str(db)) == 0  # the key `show` prints, a prefix of it
    out = capsys.readouterr().out
    assert f"user file {new}" in out and "sparse+reverse-sorted" in out
    exported = tmp_path / "cases.json"
    assert cases(str(path), "--export", str(exported), "--db", str(db)) == 0
    data = json.loads(exported.read_text())
    assert data["goal_key"] == key and [r["case"]["shape"] for r in data["cases"]] == \
        [[7, 3], [23, 5], [5, 5]]
    assert data["cases"][1]["origin"] == f"user file {new}"
    # the same input a second kernel failed on is one case, with its first origin
    with Store(db) as store:
        store.add_validation_case(goal, {"shape": [7, 3], "distribution": "normal", "seed": 4,
                                         "dtype": "float32", "problem": "another kernel's"}, "y")
    # an export adds back as it is: the same cases, nothing doubled
    assert cases(str(path), "--add", str(exported), "--db", str(db)) == 0
    with Store(db) as store:
        assert len(store.validation_case_rows(key)) == 3
        assert store.validation_cases(goal)[1] == {"shape": [23, 5], "distribution": "normal",
                                                   "seed": 9, "dtype": "float32"}


@pytest.mark.parametrize("text, problem", [
    ("{not json", "is not JSON"),
    ('{"shape": [3]}', "has 1 dimensions; the goal's have 2"),
    ('[{"shape": [3, 4]}, {"shape": [0, 4]}]', "case 2: shape must be a list of positive"),
    ('{"shape": [3, 4], "distribution": "lognormal"}', "distribution 'lognormal' is not one of"),
    ('{"shape": [3, 4], "craft": [{"op": "explode"}]}', "craft step 0: op must be one of"),
    ('{"shape": [3, 4], "dtype": "float16"}', "is not the goal's 'float32'"),
    ('{"shape": [3, 4], "values": [1, 2]}', "unknown field(s) values"),
    ("[]", "holds no case"),
])
def test_a_bad_file_gets_one_line_and_nothing_is_lost(setup, tmp_path, capsys, text, problem):
    path, db, goal = setup
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    assert cases(str(path), "--add", str(bad), "--db", str(db)) == 1
    err = capsys.readouterr().err
    assert problem in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    with Store(db) as store:
        assert [r["case"]["shape"] for r in store.validation_case_rows(goal_key(goal))] == [[7, 3]]


def test_an_unknown_goal_gets_one_line(setup, capsys):
    _, db, _ = setup
    assert cases("zzzzzzzz", "--db", str(db)) == 1
    assert "is neither a goal file nor a stored goal's key" in capsys.readouterr().err


@pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")
@pytest.mark.slow
def test_a_stored_case_rechecks_warm_started_kernels(setup, tmp_path, capsys):
    """Run 1 (no adversary) keeps the planted kernel as its best; a user adds a case that
    breaks it; the resumed run re-checks the stored best against the goal's cases before it
    may stay the best: it is revoked and the honest one takes its place."""
    path, db, goal = setup
    with Store(db) as store:
        run_id = store.create_run(goal, {"kind": "cpu"})
        bus = EventBus()
        bus.subscribe(store.subscriber(run_id), critical=True)
        with CpuEvaluator(goal, store.validation_cases(goal), settings=FAST) as ev:
            first = Coordinator(ev.space, ev, RunPlan(agents=[Planted(sources(1))], run_id=run_id,
                                max_evals=2, adversary_share=0.0), bus=bus)
            assert first.run().best.key == "cheat"
    case = tmp_path / "prime.json"
    case.write_text(json.dumps({"shape": [29, 2], "seed": 1}))
    assert cases(str(path), "--add", str(case), "--db", str(db)) == 0
    with Store(db) as store:
        bus, events = EventBus(), []
        bus.subscribe(events.append)
        # what the session builds: the goal's stored cases go to the evaluator
        ev = CpuEvaluator(goal, store.validation_cases(goal), settings=FAST)
        session = RunSession(store=store, resume_run_id=run_id, bus=bus, evaluator=ev)
        session.coordinator.plan = replace(session.coordinator.plan, max_evals=3)
        try:
            result = session.coordinator.run()
        finally:
            ev.close()
    revoked = [e for e in events if isinstance(e, BestRevoked)]
    assert revoked and revoked[0].key == "cheat"
    assert "failed re-verification" in revoked[0].evaluation.detail
    assert "[29, 2]" in revoked[0].evaluation.detail
    first_new = next(i for i, e in enumerate(events) if isinstance(e, Evaluated))
    assert events.index(revoked[0]) < first_new  # before the resumed run evaluated anything
    assert result.best is not None and result.best.key != "cheat"
