"""Transfer across devices, on real recorded spaces and a real SQLite history: a run of a
kernel on one GPU makes the next run of the same kernel on another GPU start from its ranking,
names the run it learned from, and can be switched off per goal."""

from __future__ import annotations

from project_paths import SPACES

from app.core.events import RunStarted
from app.core.types import Evaluation
from app.goal import Goal
from app.gpu.replay import ReplayEvaluator, load_cache_file
from app.session import RunSession
from app.store import Store
from app.swarm.coordinator import Coordinator
from app.swarm.plan import RunPlan
from app.swarm.transfer import SourceRun, rank_transfer

OLD_GPU = SPACES / "pnpoly_RTX_2080_Ti.json.gz"
NEW_GPU = SPACES / "pnpoly_RTX_3090.json.gz"


def _recorded_run(path) -> SourceRun:
    """A recorded space as the history of one brute-force run on its device."""
    rec = load_cache_file(path)
    names = list(rec.params)
    evals = [Evaluation(key=str(values), config=dict(zip(names, values)),
                        ok=isinstance(r["time"], float), value=r["time"] if isinstance(r["time"], float)
                        else None) for values, r in rec.records.items()]
    return SourceRun(run_id=None, device=rec.device_name, evaluations=evals)


def _goal(tmp_path, space, name, *, budget=30, transfer=True):
    path = tmp_path / f"{name}.toml"
    path.write_text(f'name = "{name}"\nspace = "{space}"\nbackend = "replay"\n'
                    f"[stop]\nmax_evals = {budget}\n[swarm]\nworkers = 1\nseed = 1\n"
                    f"transfer = {'true' if transfer else 'false'}\n", encoding="utf-8")
    return Goal.load(path)


def test_rank_transfer_puts_the_other_devices_best_first():
    source = _recorded_run(OLD_GPU)
    space = load_cache_file(NEW_GPU).space()
    evidence = rank_transfer(space, [source])
    best_there = min((e for e in source.evaluations if e.ok), key=lambda e: e.value)
    assert evidence.ranked[0] == best_there.config
    assert all(space.is_valid(c) for c in evidence.ranked)
    assert evidence.sources == [{"run_id": None, "device": source.device,
                                 "evaluations": len(source.evaluations)}]


def test_rank_transfer_ignores_runs_with_other_parameter_names():
    other = SourceRun(run_id=7, device="x", evaluations=[
        Evaluation(key="a", config={"unrelated": 1}, ok=True, value=1.0)])
    assert not rank_transfer(load_cache_file(NEW_GPU).space(), [other])


def test_warm_start_beats_cold_start_within_twenty_evaluations():
    rec = load_cache_file(NEW_GPU)
    optimum = min(rec.valid_times())
    found = {}
    for warm in (False, True):
        bests = []
        for seed in range(3):
            evaluator = ReplayEvaluator(load_cache_file(NEW_GPU), simulate_time=False)
            transfer = rank_transfer(evaluator.space, [_recorded_run(OLD_GPU)]) if warm else None
            result = Coordinator(evaluator.space, evaluator, RunPlan(agents=["explorer", "local",
                                 "model"], max_evals=20, workers=1, seed=seed, transfer=transfer)).run()
            bests.append(result.best.value)
        found[warm] = sum(optimum / b for b in bests) / len(bests)
    assert found[True] >= 0.95
    assert found[True] > found[False]


def test_a_run_on_another_device_learns_from_the_history_and_says_so(tmp_path, tmp_db):
    with Store(tmp_db) as store:
        first = RunSession(_goal(tmp_path, OLD_GPU, "pnpoly on the 2080 Ti"), store=store)
        first.run()
        again = RunSession(_goal(tmp_path, OLD_GPU, "pnpoly on the 2080 Ti again"), store=store)
        # the same device: the earlier run is evidence too (warm start), re-measured here
        assert [s["run_id"] for s in again.coordinator.learned_from] == [first.run_id]
        started = []
        second = RunSession(_goal(tmp_path, NEW_GPU, "pnpoly on the 3090"), store=store)
        second.bus.subscribe(lambda ev: started.append(ev) if isinstance(ev, RunStarted) else None)
        result = second.run()
        learned = store.get_run(second.run_id)["device"]["learned_from"]
        off = RunSession(_goal(tmp_path, NEW_GPU, "pnpoly, no transfer", transfer=False), store=store)
    assert [s["run_id"] for s in learned] == [first.run_id]  # `again` never ran: no evaluations
    assert started[0].learned_from == learned
    assert "transfer" in result.credits and result.credits["transfer"]["evaluated"] > 0
    assert off.coordinator.learned_from == [] and "transfer" not in off.coordinator.agents


def test_a_repeated_goal_warm_starts_from_its_earlier_run_here(tmp_path, tmp_db):
    """The same goal again on the same device: its first evaluations are the earlier run's
    best configurations, measured again (not copied), so it reaches that best sooner."""
    with Store(tmp_db) as store:
        first = RunSession(_goal(tmp_path, OLD_GPU, "pnpoly", budget=40), store=store)
        cold = first.run()
        second = RunSession(_goal(tmp_path, OLD_GPU, "pnpoly", budget=10), store=store)
        warm = second.run()
        rows = store.load_evaluations(second.run_id)
    assert [s["run_id"] for s in second.coordinator.learned_from] == [first.run_id]
    first_keys = [e.key for _, e, _ in rows[:3]]
    assert cold.best.key in first_keys  # the earlier best is among the first proposals
    assert warm.best.value <= cold.best.value  # re-measured here: the replay's figure, not copied
    assert "transfer" in warm.credits


def test_runs_elsewhere_matches_the_kernel_not_the_device(tmp_path, tmp_db):
    with Store(tmp_db) as store:
        RunSession(_goal(tmp_path, OLD_GPU, "old", budget=5), store=store).run()
        other_kernel = SPACES / "convolution_A100.json.gz"
        goal = _goal(tmp_path, other_kernel, "conv", budget=5)
        assert store.runs_elsewhere(goal, "convolution_kernel", "replay: NVIDIA A100") == []
        new = _goal(tmp_path, NEW_GPU, "new", budget=5)
        kernel = load_cache_file(NEW_GPU).kernel_name
        runs = store.runs_elsewhere(new, kernel, "replay: some other GPU")
        assert len(runs) == 1 and runs[0]["minimize"]
        old_device = runs[0]["device"]["name"]
        assert store.runs_elsewhere(new, kernel, old_device) == []


def test_live_view_names_the_runs_a_run_learned_from(qtbot):
    from app.ui.live_view import LiveView

    live = LiveView()
    qtbot.addWidget(live)
    live.on_run_started(RunStarted(
        goal_name="pnpoly", backend="replay", agents=["local", "transfer"], max_evals=20,
        time_budget_s=None, learned_from=[{"run_id": 4, "device": "replay: RTX 2080 Ti",
                                           "evaluations": 30}]))
    assert live.title.text().endswith("; learned from run 4 (replay: RTX 2080 Ti)")
