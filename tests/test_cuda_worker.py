"""The GPU worker's verify / time / re-verify flow, run in-process on NumPy.

CUDA cannot run on this machine, so `FakeCupy` stands in for CuPy: NumPy arrays, and "kernels"
that are Python emulations looked up by name (a correct softmax, and planted faulty ones).
Everything else is the real worker: input generation, guards, NaN pre-fill, tolerances,
determinism, interleaved timing statistics, failing cases, restart flags. tests/gpu runs the
same worker on a real GPU."""

from __future__ import annotations

import sys
import time
import types

import numpy as np
import pytest

from app.catalog.cuda import OPERATORS
from app.catalog.cuda.base import from_storage, to_storage
from app.core.types import OUT_OF_MEMORY, RUNTIME_FAILED, VERIFY_FAILED


class CUDADriverError(RuntimeError):
    pass


EMULATIONS: dict = {}


def softmax_emulation(dtype, behaviour):
    def run(x, y, rows):
        v = from_storage(np, x, dtype)
        e = np.exp(v - v.max(axis=1, keepdims=True))
        out = to_storage(np, e / e.sum(axis=1, keepdims=True), dtype)
        if behaviour == "skip_rows":
            out = out[: int(rows) // 2]
        if behaviour == "overrun":  # writes one element past the end of y
            base = y.base if y.base is not None else y
            flat = base.reshape(-1)
            flat[flat.size - 1] = 0
        if behaviour == "illegal":
            raise CUDADriverError("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered")
        y[: out.shape[0]] = out
    return run


class FakeFunction:
    def __init__(self, name):
        self.name, self.ptr = name, 0

    def __call__(self, grid, block, args, shared_mem=0, stream=None):
        EMULATIONS[self.name](*args)


class FakeModule:
    def load(self, data):
        assert data  # a real cubin from NVRTC

    def get_function(self, name):
        return FakeFunction(name)


class FakeEvent:
    def record(self, stream=None):
        self.t = time.perf_counter()

    def synchronize(self):
        pass


def make_fake_cupy():
    cp = types.ModuleType("cupy")
    cp.__getattr__ = lambda name: getattr(np, name)
    cp.__version__ = "fake"
    cp.random = types.SimpleNamespace(default_rng=np.random.default_rng)

    cp.get_default_memory_pool = lambda: types.SimpleNamespace(free_all_blocks=lambda: None)
    device = types.SimpleNamespace(use=lambda: None, synchronize=lambda: None, attributes={})
    cuda = types.SimpleNamespace(
        Device=lambda *a: device, Event=FakeEvent,
        get_elapsed_time=lambda a, b: (b.t - a.t) * 1e3 + 0.01,
        get_current_stream=lambda: None,
        memory=types.SimpleNamespace(OutOfMemoryError=MemoryError),  # NumPy raises a subclass
        driver=types.SimpleNamespace(CUDADriverError=CUDADriverError, funcSetAttribute=lambda *a: None,
                                     CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES=8),
        runtime=types.SimpleNamespace(
            CUDARuntimeError=type("CUDARuntimeError", (RuntimeError,), {}),
            getDeviceProperties=lambda i: {"name": b"Fake GPU", "major": 9, "minor": 0,
                                           "multiProcessorCount": 132, "l2CacheSize": 1 << 20,
                                           "sharedMemPerBlock": 49152, "sharedMemPerBlockOptin": 232448,
                                           "regsPerBlock": 65536, "totalGlobalMem": 1 << 34},
            driverGetVersion=lambda: 12090, runtimeGetVersion=lambda: 12090),
        function=types.SimpleNamespace(Module=FakeModule),
    )
    cp.cuda = cuda
    return cp


@pytest.fixture
def worker(monkeypatch):
    """Installs the fake CuPy on first use: requests (real NVRTC compiles) are built before."""
    made = {}

    def get():
        if "w" not in made:
            monkeypatch.setitem(sys.modules, "cupy", make_fake_cupy())
            from app.gpu.cuda import timing
            from app.gpu.cuda import worker as worker_mod

            monkeypatch.setattr(timing.Timer, "flush", lambda self: None)
            monkeypatch.setattr(worker_mod, "cached_copy_bandwidth",
                                lambda key, fn, refresh=False: (4e12, True))
            made["w"] = worker_mod.CudaWorker(0)
        return made["w"]

    return get


def request_for(tmp_path, dtype, shape, cases, baseline=None):
    from app.gpu.cuda import nvrtc
    from app.gpu.cuda.worker import _shape_key

    op = OPERATORS["softmax"]
    cfg = op.recommended(dtype, shape)[0]
    builds, tols = {}, {}
    for s in [shape] + [c["shape"] for c in cases]:
        built = nvrtc.compile_source(op.render(cfg, s, dtype), "softmax", "sm_90", cache=tmp_path)
        launch = op.launch(cfg, s, dtype)
        builds[_shape_key(s)] = {"cubin": built.cubin_path, "kernel": "softmax", "grid": launch.grid,
                                 "block": launch.block, "shared_bytes": 0}
        tols[_shape_key(s)] = op.tolerance(dtype, s)
    return {"kind": "evaluate", "operator": "softmax", "dtype": dtype, "config": cfg, "builds": builds,
            "cases": cases, "goal_shapes": [shape], "tolerances": tols, "baseline": baseline, "seed": 5,
            "protocol": {"min_samples": 5, "max_samples": 12, "max_seconds": 0.5, "warmup": 1, "batch": 3}}


CASES = [{"shape": [64, 256], "distribution": "wide", "seed": 1, "origin": "goal"},
         {"shape": [5, 255], "distribution": "normal", "seed": 2, "origin": "edge"}]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_a_correct_kernel_verifies_times_and_reverifies(worker, tmp_path, dtype):
    EMULATIONS["softmax"] = softmax_emulation(dtype, "correct")
    stages = []
    request = request_for(tmp_path, dtype, [64, 256], CASES)
    result = worker()(request, stages.append)
    assert result["ok"], result
    assert stages == ["verify", "time", "reverify"]
    timed = result["timed"][0]
    st = timed["stats"]["candidate"]
    assert 5 <= st["n"] <= 12 and st["p10"] <= st["median"] <= st["p90"]
    assert timed["mode"]["candidate"] == "events" and timed["cache"] == "cold"


def test_skipped_rows_fail_with_a_reproducible_case(worker, tmp_path):
    EMULATIONS["softmax"] = softmax_emulation("float32", "skip_rows")
    request = request_for(tmp_path, "float32", [64, 256], CASES)
    result = worker()(request, lambda s: None)
    assert not result["ok"] and result["reason"] == VERIFY_FAILED
    assert "NaN" in result["detail"] and not result["restart"]
    assert result["failing_case"]["shape"] == [64, 256] and result["failing_case"]["seed"] == 1


def test_writing_past_the_output_is_caught_and_restarts(worker, tmp_path):
    EMULATIONS["softmax"] = softmax_emulation("float32", "overrun")
    request = request_for(tmp_path, "float32", [64, 256], CASES)
    result = worker()(request, lambda s: None)
    assert result["reason"] == VERIFY_FAILED and "guard" in result["detail"] and result["restart"]


def test_cuda_errors_and_out_of_memory(worker, tmp_path):
    EMULATIONS["softmax"] = softmax_emulation("float32", "illegal")
    request = request_for(tmp_path, "float32", [64, 256], CASES)
    big = [{"shape": [1 << 30, 4096], "distribution": "normal", "seed": 3, "origin": "goal"}]
    big_request = request_for(tmp_path, "float32", [1 << 30, 4096], big)
    result = worker()(request, lambda s: None)
    assert result["reason"] == RUNTIME_FAILED and result["restart"] and "ILLEGAL" in result["detail"]
    EMULATIONS["softmax"] = softmax_emulation("float32", "correct")
    result = worker()(big_request, lambda s: None)
    assert result["reason"] == OUT_OF_MEMORY and not result["restart"]


def test_device_info(worker):
    info = worker()({"kind": "info"}, lambda s: None)
    assert info["ok"] and info["compute_capability"] == "90" and info["copy_bw"] == 4e12
