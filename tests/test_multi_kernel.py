"""Multi-kernel operators through the real CUDA worker and THE cascade on the fake CuPy
(tests/fake_cupy.py), with the KDA pipeline's kernels emulated in NumPy by name (tests/fake_kda.py,
registered here into the test's own emulation table): real NVRTC builds of every entry, per-kernel
resources, workspaces allocated by the harness and passed between the steps, verification of the
final outputs only (by the per-head Frobenius norm), and one timed call covering every launch."""

from __future__ import annotations

import fake_cupy
import fake_kda
import numpy as np
import pytest

from app.catalog import get_operator
from app.core.types import RESOURCE_LIMIT, VERIFY_FAILED, Evaluation
from app.gpu.cascade import CascadeRequest
from app.gpu.cuda.timing import Protocol

QUICK = Protocol(min_samples=5, max_samples=8, max_seconds=0.5, warmup=1, batch=2)
SHAPE = [1, 100, 2, 128]


@pytest.fixture
def worker(monkeypatch):
    yield fake_cupy.fake_cuda_worker(monkeypatch)
    fake_cupy.EMULATIONS.clear()
    fake_kda.CALLS.clear()


def request(tmp_path, config, shape=SHAPE, **options):
    op = get_operator("cuda", "kda")
    return CascadeRequest(key="kda", config=config, source=None, template=op.template_source("bfloat16"),
                          goal_shapes=[shape], params=op.space("bfloat16").params, dtype="bfloat16",
                          seed=3, timing=QUICK,
                          options={"operator": "kda", "compile_cache": str(tmp_path), **options})


def evaluate(worker, req):
    stages: list[str] = []
    reply = worker(("evaluate", req), stages.append)
    return Evaluation.from_dict(reply["evaluation"]), stages


UNFUSED = {"BT": 32, "NT": 128, "VT": 32, "FUSE_GATE": 0, "FUSE_OUTPUT": 0}
FUSED = {"BT": 32, "NT": 256, "VT": 64, "FUSE_GATE": 1, "FUSE_OUTPUT": 1}


@pytest.mark.parametrize("config", [UNFUSED, FUSED], ids=["four-kernels", "two-kernels"])
def test_the_kda_pipeline_verifies_and_times_as_one_call(worker, tmp_path, config):
    fake_cupy.EMULATIONS.update(fake_kda.emulations())
    fake_kda.CALLS.clear()
    ev, stages = evaluate(worker, request(tmp_path, config))
    assert ev.ok, (ev.reason, ev.detail, ev.log[-1500:])
    assert stages == ["static_check", "compile", "resources", "verify", "time", "reverify"]
    kernels = ev.resources["kernels"]
    names = ["kda_gate_cumsum", "kda_wy", "kda_state", "kda_output"] if config is UNFUSED \
        else ["kda_wy", "kda_state"]
    assert [part.split(":")[0] for part in kernels.split("; ")] == names
    assert "0 B spills" in kernels and ev.resources["arch"] == "sm_90"
    # every launch, in order, on every call: the pipeline is one call
    calls = fake_kda.CALLS
    assert calls[:len(names)] == names and len(calls) % len(names) == 0
    print(f"\n{config}: {kernels}")


def test_a_workspace_the_next_kernel_reads_is_the_one_the_harness_allocated(worker, tmp_path):
    """kda_wy leaves u unwritten: the harness poisoned the workspace with NaN (bf16 0xFFFF), the
    state kernel reads it, and NaN reaches the final outputs."""
    fake_cupy.EMULATIONS.update(fake_kda.emulations("no_u"))
    ev, _ = evaluate(worker, request(tmp_path, UNFUSED))
    assert not ev.ok and ev.reason == VERIFY_FAILED and "NaN" in ev.detail, ev.detail


def test_a_wrong_intermediate_is_caught_by_the_final_output_check_only(worker, tmp_path):
    """w without beta: every workspace holds finite values, only o and ht are wrong (by far more
    than the per-head Frobenius tolerance)."""
    fake_cupy.EMULATIONS.update(fake_kda.emulations("beta_w"))
    ev, _ = evaluate(worker, request(tmp_path, UNFUSED))
    assert not ev.ok and ev.reason == VERIFY_FAILED
    assert "Frobenius" in ev.detail and "over the tolerance" in ev.detail, ev.detail


def test_timing_covers_every_launch(worker, tmp_path):
    """Each emulated kernel sleeps SLOW_S: the timed call takes at least four of them."""
    fake_cupy.EMULATIONS.update(fake_kda.emulations("slow"))
    ev, _ = evaluate(worker, request(tmp_path, UNFUSED))
    assert ev.ok, ev.detail
    assert ev.time_ms >= 4 * fake_kda.SLOW_S * 1e3 * 0.95, ev.time_ms


def test_workspaces_are_allocated_from_the_shape_and_passed_between_steps(worker, tmp_path):
    from app.gpu.cuda.worker import CudaKernelBackend
    from app.gpu.verify import CheckCase, make_inputs, make_outputs

    fake_cupy.EMULATIONS.update(fake_kda.emulations())
    op = get_operator("cuda", "kda")
    shape = [1, 150, 2, 128, 3]  # three packed sequences: state resets inside the row
    req = request(tmp_path, UNFUSED, shape)
    backend = CudaKernelBackend(worker, op, req)
    run = backend.load(backend.build(req.template, UNFUSED, [shape]))
    inputs = make_inputs(np, op, CheckCase(shape, "normal", 1), "bfloat16")
    outputs = make_outputs(np, op, shape, "bfloat16")
    call = backend.launcher(inputs, outputs, tuple(shape))
    ws = call.workspaces
    assert set(ws) == {"chunks", "seqs", "gc", "w", "u", "dv", "hs"}
    assert ws["gc"].shape == (150, 2, 128) and ws["gc"].dtype == np.float32 and np.isnan(ws["gc"]).all()
    assert ws["seqs"].shape == (3, 4) and ws["chunks"][:, 1].max() <= 32
    call()
    assert np.isfinite(ws["gc"]).all() and not (ws["u"] == 0xFFFF).any()
    run(inputs, outputs, tuple(shape))  # the cascade's runner: the same steps, synchronised
    assert np.isfinite(outputs["ht"].view).all()


def test_per_kernel_resource_limits_name_the_kernel(worker, tmp_path):
    fake_cupy.EMULATIONS.update(fake_kda.emulations())
    ev, _ = evaluate(worker, request(tmp_path, UNFUSED, max_shared_memory_bytes=40000))
    assert not ev.ok and ev.reason == RESOURCE_LIMIT and "kernel kda_wy" in ev.detail, ev.detail


def test_single_kernel_operators_keep_their_one_launch(worker, tmp_path):
    from app.catalog.cuda import OPERATORS
    from app.gpu.cuda.worker import pipeline_steps

    op = OPERATORS["softmax"]
    cfg = op.recommended("float32", [64, 256])[0]
    steps = pipeline_steps(op, cfg, [64, 256], "float32")
    assert len(steps) == 1 and steps[0].kernel == "softmax"
    assert op.workspaces(cfg, [64, 256], "float32") == {}
