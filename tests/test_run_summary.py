"""The read model every display shares (app.run_summary): one speedup with its basis, failures
by kind with their first message, the one hardware fraction, the stage profile. Rows are the
plain dicts `store.evaluation_rows` returns, written out here."""

from __future__ import annotations

import pytest

from app.core.types import Evaluation, Stage
from app.run_summary import (
    RunSummary,
    failure_kinds,
    hardware_fraction,
    stage_profile,
    summarize,
)

COMPILER_LOG = ("$ cc -O3 -DCHUNK=1 kernel.c -o kernel.so\nkernel.c: In function 'pnpoly':\n"
                "kernel.c:17:9: error: expected ';' before 'int'\n   17 |   int odd[CHUNK];\n"
                "kernel.c:18:41: error: 'odd' undeclared\n")


def _row(index, ok, value=None, reason=None, detail="", log="", key=None, **extra):
    return {"index": index, "key": key or f"k{index}", "ok": ok, "value": value,
            "reason": reason, "detail": detail, "log": log, "agent": "explorer",
            "config": {"X": index}, "metrics": {}, "resources": {}, "stages": [],
            "sim_seconds": 0.0, **extra}


def _run(start=None, **device):
    return {"id": 7, "minimize": 1, "baseline_value": start, "limit_value": None,
            "device": {"unit": "ms", **device}}


ROWS = [_row(1, True, 8.0), _row(2, True, 2.0), _row(3, True, 4.0)]


def test_the_speedup_stands_on_the_start_baseline_and_says_so():
    s = summarize(_run(10.0, baseline="numpy"), ROWS)
    assert s.speedup == pytest.approx(5.0) and s.basis_kind == "start"
    assert s.speedup_text() == "5.00× vs numpy 10 ms measured at the start of the run"
    assert s.row_reference == 10.0 and s.best["key"] == "k2"


def test_the_end_of_run_re_timing_is_the_basis_only_for_the_best_it_timed():
    final = {"key": "k2", "best_value": 2.5, "baseline_value": 12.5, "baseline_name": "numpy"}
    s = summarize(_run(10.0, baseline="numpy", final_comparison=final), ROWS)
    assert s.speedup == pytest.approx(5.0) and s.basis_kind == "final"
    assert s.speedup_basis.startswith("vs numpy 12.5 ms, both re-timed interleaved at the end")
    assert s.row_reference == 10.0  # the rows stay compared to the start baseline
    # a resumed run found a better candidate and was stopped before re-timing it
    stale = summarize(_run(10.0, baseline="numpy", final_comparison=final),
                      [*ROWS, _row(4, True, 1.0)])
    assert stale.basis_kind == "start" and stale.speedup == pytest.approx(10.0)
    assert stale.notes and "another candidate" in stale.notes[0]


def test_a_resumed_run_keeps_its_basis_explicit():
    resumes = [{"at": 1.0, "baseline_value": 6.0, "baseline_name": "numpy"}]
    kept = summarize(_run(10.0, baseline="numpy", resumes=resumes), ROWS)
    assert kept.speedup == pytest.approx(5.0)  # not rescaled by the 6 ms measured at the resume
    assert kept.speedup_basis.endswith("measured at the start of the run, before it was resumed")
    assert kept.notes == [("resumed 1×; the baseline measured then (6 ms) is kept beside the "
                           "start's, never applied to stored rows")]
    late = summarize(_run(6.0, baseline="numpy", baseline_at="resume", resumes=resumes), ROWS)
    assert late.basis_kind == "resume" and late.speedup_basis.endswith("when the run was resumed")
    assert late.notes == []  # that measurement is the baseline, not one beside it


def test_without_a_baseline_the_first_success_is_the_basis():
    s = summarize(_run(None), [_row(1, False, reason="compile_failed"), *ROWS])
    assert s.basis_kind == "first" and s.speedup == pytest.approx(4.0)
    assert s.speedup_basis == "over the first successful evaluation (#1, 8 ms)"


def test_failures_by_kind_with_the_compilers_own_first_error_line():
    rows = [_row(1, False, reason="compile_failed", log=COMPILER_LOG,
                 detail="compile error: kernel.c:17:9: error: expected ';' before 'int'"),
            _row(2, False, reason="compile_failed", log=COMPILER_LOG),
            _row(3, False, reason="verification_failed",
                 detail="verify: 5 of 9 outputs of 'y' outside tolerance (rtol 1.00e-04, atol 0)"),
            _row(4, True, 3.0)]
    kinds = failure_kinds(rows)
    assert [(k.reason, k.count) for k in kinds] == [("compile_failed", 2), ("verification_failed", 1)]
    assert kinds[0].first_message == "kernel.c:17:9: error: expected ';' before 'int'"
    assert kinds[0].first_index == 1
    assert kinds[1].first_message.startswith("5 of 9 outputs of 'y' outside tolerance")
    s = summarize(_run(None), rows)
    assert s.failure_lines()[0] == "2 did not compile: kernel.c:17:9: error: expected ';' before 'int'"


def test_a_roof_refusal_is_its_own_kind_with_both_figures():
    refused = _row(1, False, reason="suspect_measurement", detail="measured 47.63 ms, ...",
                   metrics={"measured_ms": 47.63, "roof_ms": 127.9},
                   resources={"roof": "DRAM roof 12.1 GB/s at 2 threads"})
    s = summarize(_run(None), [refused, _row(2, True, 50.0)])
    assert s.refused == 1
    assert s.failure_lines() == [("1 refused as beyond the hardware roof: measured 47.63 ms; the "
                                  "roof allows at least 127.9 ms (DRAM roof 12.1 GB/s at 2 threads)")]


def test_one_hardware_fraction_named_by_its_roof():
    assert hardware_fraction({"fraction_of_roof": 0.208, "fraction_of_copy_bandwidth": 0.54},
                             {"roof": "DRAM roof 12.1 GB/s at 4 threads"}) == \
        (0.208, "DRAM roof 12.1 GB/s at 4 threads")
    # rows stored by older versions: their level and figure, then the copy bandwidth
    assert hardware_fraction({"fraction_of_roof": 0.3, "roof_gbs": 28.79},
                             {"roof_level": "L3"}) == (0.3, "L3 roof 28.79 GB/s")
    assert hardware_fraction({"fraction_of_copy_bandwidth": 0.5}, {}) == \
        (0.5, "measured copy bandwidth")
    assert hardware_fraction({}, {}) is None


def test_the_stage_profile_accounts_for_the_evaluation():
    ev = Evaluation(key="k", config={}, ok=True, sim_seconds=3.0, stages=[
        Stage("compile", True, 0.5), Stage("time", True, 1.0), Stage("time", True, 0.5)])
    assert stage_profile(ev) == [("compile", 0.5), ("time", 1.5), ("other", 1.0)]
    stored = {"sim_seconds": 1.52, "stages": [{"name": "verify", "ok": True, "seconds": 1.5}]}
    assert stage_profile(stored) == [("verify", 1.5)]  # a rounding's worth is no line


def test_the_summary_travels_as_a_plain_dict():
    rows = [_row(1, False, reason="timeout", detail="timeout: over 60 s"), *ROWS]
    s = summarize(_run(10.0, baseline="numpy"), rows)
    again = RunSummary.from_dict(s.to_dict())
    assert again == s and again.failures[0].first_message == "over 60 s"
