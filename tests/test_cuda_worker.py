"""The GPU worker's cascade (compile, resources, load, verify, time, re-verify) run in-process
on NumPy.

CUDA cannot run on this machine, so tests/fake_cupy.py stands in for CuPy: NumPy arrays, and
"kernels" that are Python emulations looked up by name (a correct softmax, and planted faulty
ones). Everything else is the real worker and THE cascade: real NVRTC compiles, ptxas resources,
input generation, guards, NaN pre-fill, tolerances, determinism, the CUDA timer's statistics,
failing cases, restart flags. tests/gpu runs the same worker on a real GPU."""

from __future__ import annotations

import re

import cuda_worker_fixtures
import fake_cupy
import pytest
from cuda_worker_fixtures import softmax_request as request_for

from app.core.types import OUT_OF_MEMORY, RUNTIME_FAILED, VERIFY_FAILED, Evaluation
from app.gpu.cascade import CascadeRequest

worker = cuda_worker_fixtures.worker


def evaluate(worker, request, stages=None):
    reply = worker(("evaluate", request), (stages if stages is not None else []).append)
    return Evaluation.from_dict(reply["evaluation"]), reply["restart"]


CASES = [{"shape": [64, 256], "distribution": "wide", "seed": 1},
         {"shape": [5, 255], "distribution": "normal", "seed": 2}]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_a_correct_kernel_compiles_verifies_times_and_reverifies(worker, tmp_path, dtype):
    fake_cupy.EMULATIONS["softmax"] = fake_cupy.softmax_emulation(dtype, "correct")
    stages = []
    ev, restart = evaluate(worker, request_for(tmp_path, dtype, [64, 256], CASES), stages)
    assert ev.ok, (ev.reason, ev.detail, ev.log[-2000:])
    assert stages == ["static_check", "compile", "resources", "verify", "time", "reverify"]
    assert [s.name for s in ev.stages] == stages and not restart
    assert ev.resources["registers"] > 0 and ev.resources["arch"] == "sm_90"
    assert ev.resources["timing_mode"] == "events" and ev.resources["cache"] == "cold"
    assert 5 <= len(ev.samples_ms) <= 12 and ev.p10_ms <= ev.time_ms <= ev.p90_ms


def test_skipped_rows_fail_with_a_reproducible_case(worker, tmp_path):
    fake_cupy.EMULATIONS["softmax"] = fake_cupy.softmax_emulation("float32", "skip_rows")
    ev, restart = evaluate(worker, request_for(tmp_path, "float32", [64, 256], CASES))
    assert not ev.ok and ev.reason == VERIFY_FAILED
    assert "NaN" in ev.detail and not restart
    assert ev.failing_case["shape"] == [64, 256] and ev.failing_case["seed"] == 1
    assert ev.stages[-1].name == "verify" and not ev.stages[-1].ok


def test_writing_past_the_output_is_caught_and_restarts(worker, tmp_path):
    fake_cupy.EMULATIONS["softmax"] = fake_cupy.softmax_emulation("float32", "overrun")
    ev, restart = evaluate(worker, request_for(tmp_path, "float32", [64, 256], CASES))
    assert ev.reason == VERIFY_FAILED and "guard" in ev.detail and restart


def test_cuda_errors_and_out_of_memory(worker, tmp_path):
    fake_cupy.EMULATIONS["softmax"] = fake_cupy.softmax_emulation("float32", "illegal")
    ev, restart = evaluate(worker, request_for(tmp_path, "float32", [64, 256], CASES))
    assert ev.reason == RUNTIME_FAILED and restart and "ILLEGAL" in ev.detail
    fake_cupy.EMULATIONS["softmax"] = fake_cupy.softmax_emulation("float32", "correct")
    big = [{"shape": [1 << 30, 4096], "distribution": "normal", "seed": 3}]
    ev, restart = evaluate(worker, request_for(tmp_path, "float32", [1 << 30, 4096], big))
    assert ev.reason == OUT_OF_MEMORY and not restart


def test_compile_errors_come_back_with_the_log(worker, tmp_path):
    ev, _ = evaluate(worker, request_for(tmp_path, "float32", [64, 256], source="this is not CUDA"))
    assert ev.reason == "compile_failed" and "error" in ev.log
    assert [s.name for s in ev.stages] == ["static_check", "compile"]


def test_device_info(worker):
    info = worker(("info", False), lambda s: None)
    assert info["ok"] and info["compute_capability"] == "90" and info["copy_bw"] == 4e12


HALF_ROWS_C = r"""
#include <math.h>
void ks_kernel(float *restrict y, const float *restrict x, long rows, long cols) {
    for (long r = 0; r < rows / 2; ++r) {  /* "optimised": does half the rows */
        float m = x[r * cols], s = 0.0f;
        for (long c = 1; c < cols; ++c) m = fmaxf(m, x[r * cols + c]);
        for (long c = 0; c < cols; ++c) s += expf(x[r * cols + c] - m);
        for (long c = 0; c < cols; ++c) y[r * cols + c] = expf(x[r * cols + c] - m) / s;
    }
}
"""
FAILURE_FORMAT = re.compile(r"^verify: \d+ of \d+ outputs of '\w+' are NaN \(never written, or invalid "
                            r"arithmetic\); first at \(\d+, \d+\) \(shape \[\d+, \d+\], \w+ inputs, seed \d+\)$")


def test_cpu_and_cuda_share_the_cascade_stages_and_failure_format(worker, tmp_path):
    """The same planted bug (half the rows skipped) in a C kernel on the CPU worker and in a
    "CUDA" kernel on the GPU worker: the same stages, the same verification message."""
    from app.catalog import get_operator
    from app.gpu.cpu import CpuWorker, find_compiler
    from app.gpu.timing import TimingSettings

    if not find_compiler():
        pytest.skip("no C compiler")
    cpu_op = get_operator("cpu", "softmax")
    cpu_request = CascadeRequest(key="c", config={"VEC": 4, "ACC": 1, "ONLINE": 0, "CHUNK": 1,
                                                   "EXP_IMPL": 0, "THREADS": 1},
                                 source=HALF_ROWS_C, template=cpu_op.template(), goal_shapes=[[64, 256]],
                                 params=cpu_op.params(1), seed=5,
                                 timing=TimingSettings(min_samples=3, max_samples=5))
    cpu_stages, gpu_stages = [], []
    cpu_reply = CpuWorker("softmax", find_compiler(), 60.0, 0)(("evaluate", cpu_request), cpu_stages.append)
    cpu_ev = Evaluation.from_dict(cpu_reply["evaluation"])
    fake_cupy.EMULATIONS["softmax"] = fake_cupy.softmax_emulation("float32", "skip_rows")
    gpu_ev, _ = evaluate(worker, request_for(tmp_path, "float32", [64, 256]), gpu_stages)
    for ev in (cpu_ev, gpu_ev):
        assert ev.reason == VERIFY_FAILED and FAILURE_FORMAT.match(ev.detail), ev.detail
        assert ev.failing_case["check"] == "verify" and ev.failing_case["shape"] == [64, 256]
    assert cpu_stages == gpu_stages == ["static_check", "compile", "resources", "verify"]
    assert [s.name for s in cpu_ev.stages] == [s.name for s in gpu_ev.stages] == cpu_stages


def test_the_baseline_handler_serves_baselines_only(worker):
    """The baseline cell is not sealed: whatever reaches it, it never compiles or runs a
    candidate (evaluate, retime), it only answers info and baselines."""
    worker.compiled_baselines = True  # as make_baseline_handler builds it
    for request in (("evaluate", None), ("retime", None, None)):
        reply = worker(request, lambda stage: None)
        assert not reply["ok"] and "baselines only" in reply["detail"], reply
    assert worker(("info", False), lambda stage: None)["ok"]
