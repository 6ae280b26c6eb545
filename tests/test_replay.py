"""Replay backend: recorded measurements, Kernel Tuner failure markers, restricted (absent)
configurations, and clear messages for missing or corrupt cache files."""

from __future__ import annotations

import gzip
import json

import pytest
from project_paths import SPACES

from app.core.types import COMPILE_FAILED, INVALID, RUNTIME_FAILED, Candidate
from app.gpu.replay import CacheFileError, ReplayEvaluator, load_cache_file


def _cache(entries: dict[tuple[int, int], object]) -> dict:
    cache = {}
    for (x, y), t in entries.items():
        rec = {"x": x, "y": y, "time": t, "compile_time": 100.0, "verification_time": 20.0,
               "benchmark_time": 30.0}
        if not isinstance(t, str):
            rec["times"] = [t * 0.9, t, t * 1.1, t]
        cache[f"{x},{y}"] = rec
    return {"device_name": "Test GPU", "kernel_name": "k", "problem_size": [16],
            "tune_params_keys": ["x", "y"], "tune_params": {"x": [1, 2], "y": [1, 2]},
            "objective": "time", "cache": cache}


@pytest.fixture
def cache_file(tmp_path):
    data = _cache({(1, 1): 2.0, (1, 2): "CompilationFailedConfig", (2, 1): "RuntimeFailedConfig",
                   (2, 2): "InvalidConfig"})
    path = tmp_path / "k.json.gz"
    path.write_bytes(gzip.compress(json.dumps(data).encode()))
    return path


def _evaluate(evaluator, x, y):
    cfg = {"x": x, "y": y}
    return evaluator.evaluate(Candidate(config=cfg, key=evaluator.space.key(cfg), agent="t"))


def test_recorded_time_is_the_measurement(cache_file):
    ev = ReplayEvaluator(load_cache_file(cache_file), simulate_time=True)
    e = _evaluate(ev, 1, 1)
    assert e.ok and e.value == 2.0 and e.time_ms == 2.0
    assert e.samples_ms == [1.8, 2.0, 2.2, 2.0]
    assert e.p10_ms <= e.value <= e.p90_ms
    assert e.sim_seconds == pytest.approx(0.15)  # compile + verify + benchmark, in seconds
    assert ReplayEvaluator(load_cache_file(cache_file), simulate_time=False) \
        .evaluate(Candidate(config={"x": 1, "y": 1}, key="k")).sim_seconds == 0.0


@pytest.mark.parametrize("xy, reason", [((1, 2), COMPILE_FAILED), ((2, 1), RUNTIME_FAILED),
                                        ((2, 2), INVALID)])
def test_failure_markers_become_failed_evaluations(cache_file, xy, reason):
    e = _evaluate(ReplayEvaluator(load_cache_file(cache_file)), *xy)
    assert not e.ok and e.value is None and e.reason == reason


def test_configs_absent_from_the_file_are_restricted():
    recorded = load_cache_file(SPACES / "convolution_A100.json.gz")
    space = recorded.space()
    assert recorded.n_configs < space.cardinality  # the file omits restricted configurations
    present = next(iter(recorded.records))
    absent = next(t for t in _product(recorded.params) if t not in recorded.records)
    assert space.is_valid(space.as_config(present))
    assert not space.is_valid(space.as_config(absent))


def _product(params):
    import itertools

    return itertools.product(*params.values())


def test_goal_restrictions_narrow_a_recorded_space(cache_file):
    space = load_cache_file(cache_file).space(["x * y <= 2"])
    assert space.is_valid({"x": 1, "y": 2}) and not space.is_valid({"x": 2, "y": 2})


def test_missing_file_is_named(tmp_path):
    with pytest.raises(CacheFileError, match="does not exist") as err:
        load_cache_file(tmp_path / "gone.json.gz")
    assert "gone.json.gz" in str(err.value)


@pytest.mark.parametrize("content, problem", [
    (b"\x1f\x8b\x08\x00garbage", "corrupt"),
    (b"{not json", "not valid JSON"),
    (b'{"hello": 1}', "not a Kernel Tuner cache"),
    (b'{"tune_params": {"x": [1]}, "cache": {}}', "no configurations"),
    (b'{"tune_params": {"x": [1]}, "cache": {"1": {"x": 1}}}', "has no 'time'"),
])
def test_corrupt_files_are_named(tmp_path, content, problem):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(CacheFileError, match=problem) as err:
        load_cache_file(path)
    assert "bad.json" in str(err.value)


def test_unterminated_file_written_during_tuning_still_loads(tmp_path):
    text = json.dumps(_cache({(1, 1): 2.0, (2, 2): 3.0}))
    cut = text[: text.rindex("}}")] + ",\n"  # as Kernel Tuner leaves it mid-run
    path = tmp_path / "live.json"
    path.write_text(cut)
    assert load_cache_file(path).n_configs == 2
