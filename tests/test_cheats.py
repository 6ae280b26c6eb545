"""Planted kernels (tests/kernels/) that cheat or break, run through the real CPU backend:
compiled by the system compiler, run in the worker process. Each is rejected with the right
reason, and the run goes on: the next honest candidate is evaluated normally."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path

import pytest

from app.core.types import CRASH, RESOURCE_LIMIT, TIMEOUT, VERIFY_FAILED, Candidate
from app.goal import Goal
from app.gpu.cascade import ENGINE_STAGES
from app.gpu.cpu import CpuEvaluator, CpuSettings, find_compiler
from app.gpu.timing import TimingSettings
from app.gpu.worker import Deadlines

KERNELS = Path(__file__).parent / "kernels"
pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")

# the machine's cache roofs, measured once (~10 s) and shared by every test that needs them
ROOF_FILE = Path(tempfile.gettempdir()) / f"kernelswarm-test-cpu-roofs-{os.getuid()}.json"
FAST = CpuSettings(
    timing=TimingSettings(warmup=1, min_samples=3, max_samples=5, max_seconds=0.2),
    baseline_timing=TimingSettings(warmup=1, min_samples=3, max_samples=3, max_seconds=0.2),
    deadlines=Deadlines(compile_s=60.0, run_s=2.0), flush_bytes=0, memory_limit_bytes=1 << 30,
    roof_file=ROOF_FILE)

HONEST = {"transpose": {"TILE": 16, "WRITE_MAJOR": 0, "VEC": 8, "THREADS": 1},
          "gemm": {"ISA": 0, "MR": 6, "NV": 2, "KC": 128, "MC": 96, "NC": 256, "UK": 4,
                   "ORDER": 0, "PAR": 0, "PF": 0, "SHARE_B": 1, "THREADS": 1}}


def evaluator(operator: str, shape: list[int]) -> CpuEvaluator:
    return CpuEvaluator(Goal(name=f"cheats {operator}", backend="cpu", operator=operator,
                             shapes=[shape]), settings=FAST)


@pytest.fixture(scope="module")
def transpose():
    ev = evaluator("transpose", [64, 96])
    yield ev
    ev.close()


@pytest.fixture(scope="module")
def gemm():
    ev = evaluator("gemm", [32, 64, 48])
    yield ev
    ev.close()


def checks(ev):
    """The cascade's stages (not the evaluator's own: waiting for the worker, the exchange)."""
    return [s for s in ev.stages if s.name not in ENGINE_STAGES]


def planted(ev: CpuEvaluator, kernel: str):
    name = ev.op.name
    return ev.evaluate(Candidate(config=HONEST[name], key=f"planted-{kernel}", agent="llm",
                                 source=(KERNELS / kernel).read_text()))


def honest(ev: CpuEvaluator, key: str):
    return ev.evaluate(Candidate(config=HONEST[ev.op.name], key=key, agent="explorer"))


@pytest.mark.parametrize("kernel, reason, evidence", [
    ("nonzero_only_transpose.c", VERIFY_FAILED, "NaN"),          # (b)
    ("cached_output_transpose.c", RESOURCE_LIMIT, "writable global data"),  # (c)
    ("out_of_bounds_transpose.c", VERIFY_FAILED, "guard canaries"),     # (e)
    ("hang_transpose.c", TIMEOUT, "2 s limit for the verify stage"),   # (f)
    ("crash_transpose.c", CRASH, "SIGSEGV"),                            # (g)
])
def test_transpose_cheats_are_rejected_and_the_run_goes_on(transpose, kernel, reason, evidence):
    ev = planted(transpose, kernel)
    assert not ev.ok and ev.value is None
    assert ev.reason == reason, (ev.reason, ev.detail)
    assert evidence in ev.detail, ev.detail
    assert ev.stages and not ev.stages[-1].ok
    assert honest(transpose, f"after-{kernel}").ok


@pytest.mark.parametrize("kernel, evidence", [
    ("skip_work_gemm.c", "outside tolerance"),  # (a)
    ("uninitialised_gemm.c", "NaN"),  # (d)
])
def test_gemm_cheats_are_rejected_and_the_run_goes_on(gemm, kernel, evidence):
    ev = planted(gemm, kernel)
    assert not ev.ok and ev.reason == VERIFY_FAILED
    assert evidence in ev.detail, ev.detail
    assert ev.failing_case and ev.failing_case["operator"] == "gemm"
    assert honest(gemm, f"after-{kernel}").ok


def test_crash_keeps_the_kernels_output_and_the_stage(transpose):
    ev = planted(transpose, "crash_transpose.c")
    assert "about to crash" in ev.log
    assert [s.name for s in ev.stages][-1] == "verify"
    assert [s.name for s in checks(ev) if s.ok] == ["static_check", "compile", "resources"]


def test_cached_output_is_refused_by_its_state_before_it_runs(transpose):
    ev = planted(transpose, "cached_output_transpose.c")
    assert ev.reason == RESOURCE_LIMIT  # its statics are in .bss: the built library is refused
    assert [s.name for s in checks(ev)] == ["static_check", "compile", "resources"]


def test_out_of_bounds_write_is_caught_and_harms_nothing_after(transpose):
    """The stray writes land in the candidate's own process (its copy of the output and its
    guards): the guard canaries, copied back, catch them; the next kernel is unaffected."""
    before = honest(transpose, "pid-probe-1")
    ev = planted(transpose, "out_of_bounds_transpose.c")
    assert not ev.ok and ev.reason == VERIFY_FAILED and "guard canaries" in ev.detail, ev.detail
    assert before.ok and honest(transpose, "pid-probe-2").ok


# ---- cheats aimed at the timed calls -----------------------------------------------------
# More timed calls than FAST: a one-entry cache hits when the same input slot comes twice in a
# row (1 in 3 per call), so 15+ calls make a miss of every hit vanishingly unlikely.
TIMED = dataclasses.replace(FAST, timing=TimingSettings(warmup=1, min_samples=15, max_samples=20,
                                                        max_seconds=2.0))


@pytest.fixture(scope="module")
def timed_transpose():
    ev = CpuEvaluator(Goal(name="timed cheats", backend="cpu", operator="transpose",
                           shapes=[[64, 96]]), settings=TIMED)
    yield ev
    ev.close()


def test_early_return_on_valid_output_never_fires_on_timed_calls(timed_transpose):
    """(a) Outputs are poisoned before every timed call, so the shortcut never fires. Here the
    shortcut is made to cost a busy loop of a fifth of a second instead of saving the work:
    one timed call that took it would stand out among samples of microseconds. (Comparing the
    cheat's median with an honest twin's was too noisy under CI's load: a twin once measured
    33x slower than a cheat whose shortcut, as this test shows, never fires.)"""
    source = (KERNELS / "early_return_valid_transpose.c").read_text()
    costly = source.replace("if (valid) return;", "if (valid) { volatile long spin = 0; "
                            "for (long i = 0; i < 200000000; ++i) spin += i; return; }")
    assert costly != source
    ev = timed_transpose.evaluate(Candidate(config=HONEST["transpose"], key="costly-shortcut",
                                            agent="llm", source=costly))
    assert ev.ok, (ev.reason, ev.detail)
    assert len(ev.samples_ms) >= 15
    assert max(ev.samples_ms) < 20.0, sorted(ev.samples_ms)[-3:]  # the loop alone: >= 50 ms


def test_early_return_on_written_output_is_not_deterministic(timed_transpose):
    ev = planted(timed_transpose, "early_return_written_transpose.c")
    assert ev.reason == VERIFY_FAILED and "not deterministic" in ev.detail, ev.detail


def test_statics_hidden_by_an_attribute_are_refused_in_the_built_library(timed_transpose):
    """(b) The text never matters: the library's .bss is larger than an empty kernel's."""
    ev = planted(timed_transpose, "attribute_static_transpose.c")
    assert ev.reason == RESOURCE_LIMIT and "writable global data" in ev.detail, ev.detail
    assert ".bss" in ev.detail


@pytest.mark.parametrize("kernel", ["pointer_cache_transpose.c", "hash_cache_transpose.c",
                                    "partial_when_timed_transpose.c"])
def test_state_kept_outside_the_library_is_caught_on_the_outputs(timed_transpose, kernel):
    """(c), (d), (e): state in OpenMP settings and the heap passes every static and ELF check;
    the rotated, perturbed inputs and the checked outputs of the timed calls catch it."""
    ev = planted(timed_transpose, kernel)
    assert not ev.ok and ev.reason == VERIFY_FAILED, (ev.reason, ev.detail)
    assert [s.name for s in checks(ev)][:3] == ["static_check", "compile", "resources"]
    assert all(s.ok for s in checks(ev)[:3])
    # a stale cache entry or a half-written output: wrong values or NaN, in whichever check
    # met it first (a freed input's address comes back in verification too)
    assert "outside tolerance" in ev.detail or "NaN" in ev.detail, ev.detail
    assert honest(timed_transpose, f"after-{kernel}").ok


def test_a_blas_resolved_by_the_loader_is_refused(gemm):
    """(g) through the dynamic linker: the import is not on the allow-list."""
    ev = planted(gemm, "runtime_blas_gemm.c")
    assert ev.reason == RESOURCE_LIMIT and "cblas_sgemm" in ev.detail, ev.detail


@pytest.mark.slow
def test_a_roof_cached_too_low_is_measured_again_before_anything_is_refused(tmp_path):
    """(f) A figure beyond the cached roof (here set absurdly low, as a roof cached on a loaded
    machine can be) is held to the roof measured again beside the candidate, and an honest
    kernel passes. A kernel that skips work is still refused beside the fresh roof:
    tests/test_honest_roof.py."""
    from app.gpu.cpu import memory_roof, toolchain

    tc = toolchain()
    levels = [{"name": "L1", "size_bytes": 1 << 15, "shared_by": 1},
              {"name": "DRAM", "size_bytes": 0, "shared_by": 1}]
    slow = {"L1": 1e-4, "DRAM": 1e-4}  # GB/s
    roofs = tmp_path / "roofs.json"
    roofs.write_text(json.dumps({"threads": 1, "one_thread": slow, "all_threads": slow,
                                 "levels": levels, "key": memory_roof.cache_key(tc.identity),
                                 "measured_at": time.time()}))
    settings = dataclasses.replace(FAST, roof_file=roofs)
    with CpuEvaluator(Goal(name="roof", backend="cpu", operator="transpose", shapes=[[64, 96]]),
                      settings=settings) as ev:
        r = ev.evaluate(Candidate(config=HONEST["transpose"], key="fast", agent="explorer"))
    assert r.ok, (r.reason, r.detail)
    assert "DRAM roof" in r.resources["roof"] and "measured again beside" in r.resources["roof"]
    assert r.resources["roof_level"] == "DRAM" and r.metrics["roof_gbs"] > 1e-3


def test_an_honest_evaluation_records_its_roof_and_noise(timed_transpose):
    r = honest(timed_transpose, "noise")
    assert r.ok
    assert r.resources["roof_level"] in ("L1", "L2", "L3", "DRAM") and r.metrics["roof_gbs"] > 0
    assert r.metrics["noisy"] in (0.0, 1.0) and r.metrics["cpu_count"] >= 1
    assert "load_before" in r.metrics and "load_after" in r.metrics
