"""bench/search_efficiency.py --leave-one-out: a choice is judged only on spaces it was not made
on (one space, or one GPU vendor's spaces, held out), the worst space is named, and a space
whose P falls as the budget grows or below an earlier report is listed."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest
from project_paths import ROOT, SMALL_SPACE


def _load(name: str):
    bench_dir = str(ROOT / "bench")
    if bench_dir not in sys.path:
        sys.path.insert(0, bench_dir)
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def loo():
    return _load("leave_one_out")


def _cell(p, se=0.01):
    return {"P": p, "se": se}


def _report():
    """Three spaces. The swarm is 0.5 everywhere. Agent 'a' is great on the NVIDIA spaces
    (0.9) and bad on the AMD one (0.1); 'b' is 0.6 on the AMD space, 0.2 elsewhere. Hindsight
    picks the best agent on each space; held out, each space gets the others' choice."""
    def row(p50, p100):
        return {"50": _cell(p50), "100": _cell(p100)}

    return {"budgets": [50, 100], "spaces": {
        "conv_A100": {"strategies": {"swarm": row(0.5, 0.5), "swarm-a": row(0.9, 0.9),
                                     "swarm-b": row(0.2, 0.2), "swarm@new": row(0.7, 0.7)}},
        "conv_RTX_3090": {"strategies": {"swarm": row(0.5, 0.5), "swarm-a": row(0.9, 0.9),
                                         "swarm-b": row(0.2, 0.2), "swarm@new": row(0.7, 0.7)}},
        "conv_MI250X": {"strategies": {"swarm": row(0.5, 0.2), "swarm-a": row(0.1, 0.1),
                                       "swarm-b": row(0.6, 0.6), "swarm@new": row(0.2, 0.2)}}}}


def test_vendor_is_read_from_the_device_in_the_name(loo):
    assert loo.vendor("convolution_MI250X") == "AMD"
    assert loo.vendor("dedispersion_W6600") == "AMD"
    assert loo.vendor("gemm_RTX_2080_Ti") == "NVIDIA"
    assert loo.vendor("convolution_A4000") == "NVIDIA"
    assert loo.vendor("pnpoly_A100") == "NVIDIA"
    assert loo.vendor("mystery_kernel") == "other"


def test_the_held_out_space_gets_the_choice_of_the_others(loo):
    rows = {r["space"]: r for r in loo.judge(_report(), "swarm", ["swarm-a", "swarm-b"], "space")}
    # The AMD space held out: the two NVIDIA spaces choose 'a', which is bad there.
    amd = rows["conv_MI250X"]
    assert amd["chosen"] == "swarm-a"
    assert amd["budgets"]["50"]["margin"] == pytest.approx(0.5 - 0.1)
    assert amd["budgets"]["50"]["se"] == pytest.approx((0.01**2 + 0.01**2) ** 0.5)
    # An NVIDIA space held out: the other NVIDIA space and the AMD one still choose 'a'
    # (0.9 + 0.1 against 0.2 + 0.6): the swarm loses 0.4 there.
    assert rows["conv_A100"]["chosen"] == "swarm-a"
    assert rows["conv_A100"]["budgets"]["100"]["margin"] == pytest.approx(-0.4)
    assert loo.worst(list(rows.values()))["space"] in ("conv_A100", "conv_RTX_3090")


def test_vendor_held_out_judges_amd_on_nvidia_choices_and_back(loo):
    rows = loo.judge(_report(), "swarm", ["swarm-a", "swarm-b"], "vendor")
    by = {r["space"]: r for r in rows}
    assert by["conv_MI250X"]["held_out"] == "AMD" and by["conv_MI250X"]["chosen"] == "swarm-a"
    # NVIDIA held out: the AMD space alone chooses 'b'; the swarm beats it there by 0.3
    assert by["conv_A100"]["chosen"] == "swarm-b"
    assert by["conv_A100"]["budgets"]["50"]["margin"] == pytest.approx(0.3)
    # one vendor only: nothing to hold out
    one = {"budgets": [50], "spaces": {k: v for k, v in _report()["spaces"].items()
                                       if "MI" not in k}}
    assert loo.judge(one, "swarm", ["swarm-a"], "vendor") == []


def test_a_change_is_adopted_only_where_the_other_spaces_choose_it(loo):
    rows = {r["space"]: r for r in loo.judge(_report(), "swarm", ["swarm@new"], "space",
                                             keep_baseline=True)}
    # held out, an NVIDIA space sees the change chosen (mean 0.45 against 0.425 on the
    # others): +0.2 there
    assert rows["conv_A100"]["chosen"] == "swarm@new"
    assert rows["conv_A100"]["budgets"]["50"]["margin"] == pytest.approx(0.2)
    # the AMD space held out: both others choose the change, which costs it 0.3 at 50
    assert rows["conv_MI250X"]["budgets"]["50"]["margin"] == pytest.approx(-0.3)
    assert loo.worst(list(rows.values()))["space"] == "conv_MI250X"
    summary = loo.summary(list(rows.values()))
    assert summary["50"]["margin"] == pytest.approx((0.2 + 0.2 - 0.3) / 3)
    # where the others keep the baseline the effect is exactly 0
    flat = _report()
    flat["spaces"]["conv_MI250X"]["strategies"]["swarm@new"] = {"50": _cell(0.0),
                                                                "100": _cell(0.0)}
    kept = {r["space"]: r for r in loo.judge(flat, "swarm", ["swarm@new"], "space",
                                             keep_baseline=True)}
    assert kept["conv_A100"]["chosen"] == "swarm"
    cell = kept["conv_A100"]["budgets"]["50"]
    assert (cell["chosen"], cell["margin"], cell["se"]) == ((0.5, 0.01), 0.0, 0.0)
    # the change's own effect there is still reported (+0.2), and names the worst space
    assert cell["raw"][0] == pytest.approx(0.2)
    assert loo.worst(list(kept.values()))["space"] == "conv_MI250X"


def test_falls_with_budget_and_against_previous(loo):
    report = _report()
    fell = loo.falls_with_budget(report, "swarm")
    assert len(fell) == 1 and fell[0].startswith("conv_MI250X P(50) 0.500 > P(100) 0.200")
    previous = _report()
    previous["spaces"]["conv_A100"]["strategies"]["swarm"]["100"] = _cell(0.6)
    rows = loo.against_previous(report, previous, "swarm")
    assert [(r["space"], r["budget"]) for r in rows if r["fell"]] == [("conv_A100", "100")]
    lines: list[str] = []
    result = loo.report_leave_one_out(report, "swarm", previous, out=lines.append)
    text = "\n".join(lines)
    assert "worst space: conv_" in text and "conv_A100 M=100 0.600 -> 0.500" in text
    assert set(result) >= {"agents_by_space", "agents_by_vendor", "swarm@new_by_space"}


def test_from_json_reports_without_running_and_bad_input_is_one_line(tmp_path, capsys):
    bench = _load("search_efficiency")
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps(_report()))
    assert bench.main(["--leave-one-out", "--from-json", str(saved)]) == 0
    out = capsys.readouterr().out
    assert "leave-one-space-out" in out and "worst space: conv_" in out
    assert "leave-one-GPU-vendor-out" in out
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SystemExit):
        bench.main(["--leave-one-out", "--from-json", str(bad)])
    err = capsys.readouterr().err.strip().splitlines()
    assert "not a readable JSON report" in err[-1] and "Traceback" not in "".join(err)


def test_a_swarm_variant_runs_with_another_allocation_policy(tmp_path):
    """`swarm@POLICY` swaps the coordinator's allocator: the same seed gives another run."""
    bench = _load("search_efficiency")
    space_dir = tmp_path / "spaces"
    space_dir.mkdir()
    (space_dir / SMALL_SPACE.name).write_bytes(SMALL_SPACE.read_bytes())
    out = tmp_path / "r.json"
    assert bench.main([str(space_dir), "--strategies", "swarm@decay,swarm@bandit", "--budgets",
                       "40", "--seeds", "2", "--jobs", "1", "--quiet", "--json", str(out)]) == 0
    (space,) = json.loads(out.read_text())["spaces"].values()
    runs = {s: r["40"]["P_runs"] for s, r in space["strategies"].items()}
    assert set(runs) == {"swarm@decay", "swarm@bandit"} and len(runs["swarm@bandit"]) == 2
    with pytest.raises(SystemExit):
        bench.parse_args(["--strategies", "swarm@nonsense"])
