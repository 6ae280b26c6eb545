"""Theoretical occupancy (app.gpu.cuda.occupancy) against figures NVIDIA's CUDA Occupancy
Calculator gives, the device limits the worker reads, occupancy in a CUDA evaluation's
resources through the real worker cascade on the fake CuPy, and the line the LLM sees."""

from __future__ import annotations

import fake_cupy
import pytest

from app.core.types import Evaluation
from app.gpu.cuda.occupancy import (
    BLOCKS,
    REGISTERS,
    SHARED,
    TABLE,
    WARPS,
    device_limits,
    occupancy,
    occupancy_problem,
    table_limits,
)

KIB = 1024
SM80, SM86, SM75, SM90 = TABLE["80"], TABLE["86"], TABLE["75"], TABLE["90"]


def test_a_small_register_footprint_fills_the_sm():
    occ = occupancy(32, 256, limits=SM80)  # 8 warps x 1024 registers: 8 blocks, 64 warps
    assert (occ.active_blocks_per_sm, occ.active_warps_per_sm, occ.occupancy) == (8, 64, 1.0)
    assert occ.limit == WARPS  # tied with registers: the hardware ceiling is named
    assert occ.block_limits[REGISTERS] == 8


def test_64_registers_halve_occupancy():
    occ = occupancy(64, 256, limits=SM80)
    assert (occ.active_blocks_per_sm, occ.active_warps_per_sm, occ.occupancy) == (4, 32, 0.5)
    assert occ.limit == REGISTERS


def test_a_1024_thread_block_with_64_registers_is_alone_on_the_sm():
    occ = occupancy(64, 1024, limits=SM80)
    assert (occ.active_blocks_per_sm, occ.occupancy, occ.limit) == (1, 0.5, REGISTERS)
    assert occ.registers_per_block == 65536


def test_tiny_blocks_hit_the_block_slots():
    occ = occupancy(32, 32, limits=SM80)  # 32 one-warp blocks of 64 warp slots
    assert (occ.active_blocks_per_sm, occ.occupancy, occ.limit) == (32, 0.5, BLOCKS)
    occ = occupancy(32, 32, limits=SM75)  # Turing: 16 blocks, 32 warp slots
    assert (occ.active_blocks_per_sm, occ.occupancy, occ.limit) == (16, 0.5, BLOCKS)


def test_registers_are_allocated_per_warp_in_units_of_256():
    occ = occupancy(33, 256, limits=SM80)
    # 33 x 32 = 1056 -> 1280 per warp; 16384 per sub-partition / 1280 = 12 warps, x4 = 48
    assert occ.registers_per_block == 8 * 1280
    assert (occ.active_blocks_per_sm, occ.active_warps_per_sm, occ.occupancy) == (6, 48, 0.75)
    assert occ.limit == REGISTERS
    assert occupancy(40, 256, limits=SM80).active_blocks_per_sm == 6  # 1280 too: same as 33


def test_a_block_the_register_file_cannot_take_does_not_launch():
    # 65 x 992 = 64480 < 65536, but 65 registers round to 2304 per warp, and the hardware
    # rounds 31 warps up to 32 (four sub-partitions): 73728 > 65536
    occ = occupancy(65, 992, limits=SM80)
    assert occ.active_blocks_per_sm == 0 and occ.limit == REGISTERS
    assert "per warp" in occupancy_problem(occ, SM80)
    assert occupancy_problem(occupancy(64, 992, limits=SM80), SM80) is None


def test_shared_memory_counts_the_driver_reservation_and_granularity():
    # 100 KiB + the 1 KiB reserved per block on sm_80 = 101 KiB: one block in 164 KiB
    occ = occupancy(32, 256, 0, 100 * KIB, limits=SM80)
    assert (occ.active_blocks_per_sm, occ.occupancy, occ.limit) == (1, 0.125, SHARED)
    occ = occupancy(32, 256, 0, 80 * KIB, limits=SM80)  # 81 KiB: two fit
    assert (occ.active_blocks_per_sm, occ.occupancy, occ.limit) == (2, 0.25, SHARED)
    # static and dynamic add up: 40 + 41 + 1 reserved = 82 KiB, two blocks exactly; one byte
    # more rounds up to the next 128-byte unit and only one fits
    occ = occupancy(32, 256, 40 * KIB, 41 * KIB, limits=SM80)
    assert occ.shared_per_block == 82 * KIB and occ.active_blocks_per_sm == 2
    occ = occupancy(32, 256, 40 * KIB, 41 * KIB + 1, limits=SM80)
    assert occ.shared_per_block == 82 * KIB + 128 and occ.active_blocks_per_sm == 1
    # Volta: no reservation, 256-byte unit
    assert occupancy(32, 256, 0, 1, limits=TABLE["70"]).shared_per_block == 256
    # the opt-in maximum fits exactly once; a byte more cannot launch
    assert occupancy(32, 256, 0, 227 * KIB, limits=SM90).active_blocks_per_sm == 1
    over = occupancy(32, 256, 0, 227 * KIB + 1, limits=SM90)
    assert over.active_blocks_per_sm == 0 and "shared memory" in occupancy_problem(over, SM90)


def test_consumer_ampere_has_fewer_warp_slots():
    occ = occupancy(32, 256, limits=SM86)  # 48 warp slots: 6 blocks, full
    assert (occ.active_blocks_per_sm, occ.active_warps_per_sm, occ.occupancy) == (6, 48, 1.0)
    occ = occupancy(64, 256, limits=SM86)  # registers: 32 warps of 48
    assert (occ.active_warps_per_sm, occ.limit) == (32, REGISTERS)
    assert occ.occupancy == pytest.approx(2 / 3)


def test_too_many_threads_per_block_never_fit():
    occ = occupancy(16, 2048, limits=SM80)
    assert occ.active_blocks_per_sm == 0 and occ.limit == WARPS


def test_device_limits_prefer_what_the_device_reports():
    info = {"compute_capability": "86", "max_blocks_per_sm": 24, "shared_per_sm": 0}
    lim = device_limits(info)
    assert lim.max_blocks_per_sm == 24  # reported
    assert lim.shared_per_sm == 100 * KIB  # 0 is "not reported": the table's
    assert lim.max_threads_per_sm == 1536
    assert table_limits("100") == SM90 and table_limits("8.9") == TABLE["89"]
    assert table_limits("61") == TABLE["70"]
    assert device_limits({"compute_capability": "90"}) == SM90


@pytest.fixture
def worker(monkeypatch, tmp_path):
    yield fake_cupy.fake_cuda_worker(monkeypatch)
    fake_cupy.EMULATIONS.clear()


def test_the_worker_reads_the_per_sm_limits_of_the_device(worker):
    info = worker.info
    assert info["max_threads_per_sm"] == 2048 and info["regs_per_sm"] == 65536
    assert info["shared_per_sm"] == 233472 and info["max_blocks_per_sm"] == 32
    assert info["reserved_shared_per_block"] == 1024 and info["warp_size"] == 32
    assert device_limits(info) == SM90  # the fake H200 says what the table says for sm_90


def test_occupancy_lands_in_a_cuda_evaluations_resources(worker, tmp_path):
    ev = _evaluate(worker, tmp_path)
    assert ev.ok, (ev.reason, ev.detail)
    r = ev.resources
    expected = occupancy(r["registers"], r["threads_per_block"], r["static_shared_bytes"],
                         r["dynamic_shared_bytes"], SM90)
    assert 0 < r["occupancy"] <= 1
    assert r["occupancy"] == pytest.approx(expected.occupancy, abs=1e-4)
    assert r["active_warps_per_sm"] == expected.active_warps_per_sm
    assert r["occupancy_limit"] == expected.limit in (WARPS, BLOCKS, REGISTERS, SHARED)


def _evaluate(worker, tmp_path) -> Evaluation:
    """The softmax template's recommended configuration (256 threads) through the cascade."""
    from app.catalog.cuda import OPERATORS
    from app.gpu.cascade import CascadeRequest
    from app.gpu.cuda.timing import Protocol

    op, dtype, shape = OPERATORS["softmax"], "float32", [64, 256]
    fake_cupy.EMULATIONS["softmax"] = fake_cupy.softmax_emulation(dtype, "correct")
    request = CascadeRequest(
        key="k", config=op.recommended(dtype, shape)[0], source=None,
        template=op.template_source(dtype), goal_shapes=[shape], params=op.space(dtype).params,
        dtype=dtype, validation_cases=[], seed=5,
        timing=Protocol(min_samples=5, max_samples=8, max_seconds=0.5, warmup=1, batch=3),
        options={"operator": "softmax", "compile_cache": str(tmp_path)})
    reply = worker(("evaluate", request), lambda s: None)
    return Evaluation.from_dict(reply["evaluation"])


def test_a_block_no_sm_can_hold_is_a_resource_failure(worker, tmp_path):
    """What the launch would refuse is refused before loading: here an SM of one warp slot."""
    from app.core.types import RESOURCE_LIMIT

    worker.info["max_threads_per_sm"] = 32
    ev = _evaluate(worker, tmp_path)
    assert not ev.ok and ev.reason == RESOURCE_LIMIT, (ev.reason, ev.detail)
    assert "no block of this size fits on an SM (warps/threads)" in ev.detail
    assert [s.name for s in ev.stages][-1] == "resources"


def _cuda_eval_line(resources: dict) -> str:
    from app.goal import Goal
    from app.llm.prompts import PromptContext, build_messages
    from app.llm.spec import kernel_spec

    goal = Goal(name="occ", operator="softmax", backend="cuda", shapes=[[64, 256]], dtype="float32")
    spec = kernel_spec(goal)
    ev = Evaluation(key="k", config={}, ok=True, value=0.02, resources=resources)
    messages = build_messages("tiling", PromptContext(goal=goal, spec=spec, device="NVIDIA H200",
                                                      current_source=spec.template, current=ev))
    return messages[1]["content"]


def test_the_prompt_states_occupancy_and_its_limit():
    text = _cuda_eval_line({"registers": 64, "spill_stores": 0, "threads_per_block": 256,
                            "occupancy": 0.5, "active_warps_per_sm": 32,
                            "occupancy_limit": "registers"})
    assert "registers 64" in text and "threads_per_block 256" in text
    assert "occupancy 50% (limited by registers), 32 active warps/SM" in text
    assert "occupancy" not in _cuda_eval_line({"registers": 64})  # not recorded: not invented


def test_the_candidate_table_explains_registers_with_occupancy(qtbot):
    from PySide6.QtCore import Qt

    from app.ui.candidates import CandidateTable

    table = CandidateTable()
    qtbot.addWidget(table)
    ev = Evaluation(key="k1", config={}, ok=True, value=1.5, agent="local",
                    resources={"registers": 64, "occupancy": 0.5, "active_warps_per_sm": 32,
                               "occupancy_limit": "registers"})
    table.add([(1, ev, 0.1)])
    table.flush()
    model = table.model
    headers = [model.headerData(c, Qt.Horizontal) for c in range(model.columnCount())]
    tip = model.data(model.index(0, headers.index("registers")), Qt.ToolTipRole)
    assert tip == "occupancy 50% (limited by registers), 32 active warps/SM"


PROBE = r"""
extern "C" __global__ void occ_probe(float *y, const float *x) {
    __shared__ float s[STATIC_FLOATS];
    extern __shared__ float d[];
    int i = threadIdx.x;
    s[i % STATIC_FLOATS] = x[i];
    d[i] = x[i];
    __syncthreads();
    y[i] = s[(i + 1) % STATIC_FLOATS] + d[(i + 1) % blockDim.x];
}
"""


def _real_gpu() -> bool:
    try:
        from cupy.cuda import runtime

        return runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no CuPy, driver or device
        return False


@pytest.mark.parametrize("threads,static_floats,dynamic", [
    (32, 64, 0), (256, 64, 0), (1024, 64, 0), (256, 8192, 0), (128, 64, 48 * KIB - 256), (128, 64, 48 * KIB),
    (256, 1024, 100 * KIB), (512, 64, 200 * KIB)])
def test_the_model_agrees_with_the_driver(threads, static_floats, dynamic, tmp_path):
    """On a real GPU: active blocks per SM as cuOccupancyMaxActiveBlocksPerMultiprocessor says."""
    if not _real_gpu():
        pytest.skip("no NVIDIA GPU with a working driver")
    import cupy as cp

    from app.gpu.cuda import nvrtc
    from app.gpu.cuda.worker import sm_limits

    props = cp.cuda.runtime.getDeviceProperties(0)
    info = {"compute_capability": f"{props['major']}{props['minor']}",
            "shared_per_block_optin": int(props["sharedMemPerBlockOptin"]),
            "regs_per_block": int(props["regsPerBlock"]), **sm_limits(props)}
    limits = device_limits(info)
    if dynamic + 4 * static_floats > limits.shared_per_block_optin:
        pytest.skip("more shared memory than this device gives a block")
    source = f"#define STATIC_FLOATS {static_floats}\n" + PROBE
    built = nvrtc.compile_source(source, "occ_probe", f"sm_{info['compute_capability']}", cache=tmp_path)
    res = built.resource("occ_probe")
    mod = cp.cuda.function.Module()
    with open(built.cubin_path, "rb") as fh:
        mod.load(fh.read())
    fn = mod.get_function("occ_probe")
    if dynamic + res.shared_bytes > limits.shared_per_block:  # opt in, as the model assumes
        cp.cuda.driver.funcSetAttribute(
            fn.ptr, cp.cuda.driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, dynamic)
    driver = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(fn.ptr, threads, dynamic)
    ours = occupancy(res.registers, threads, res.shared_bytes, dynamic, limits)
    assert ours.active_blocks_per_sm == driver, (res, ours)
