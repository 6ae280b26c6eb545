"""A NumPy stand-in for CuPy, so the real GPU worker (app.gpu.cuda.worker.CudaWorker) and THE
cascade run on a machine without a GPU.

Arrays are NumPy arrays; a "kernel" loaded from a real NVRTC cubin is a Python emulation looked
up by kernel name (`EMULATIONS`), which may misbehave on purpose by block size (`BEHAVIOUR`).
Everything else is real: NVRTC compiles, ptxas resources, input generation, guards, NaN
pre-fill, tolerances, determinism, the CUDA timer's protocol (events are host clocks here).

Worker factories for app.gpu.worker (importable from a spawned process with tests/ on the path):
`fake_worker` (kernels misbehave by THREADS, see BY_THREADS), `slow_compile_worker` (NVRTC
hangs), `slow_512_worker` (kernels of 512 threads per block are correct and SLOW_S slower).
"""

from __future__ import annotations

import os
import signal
import sys
import time
import types

import numpy as np

from app.catalog.protocol import from_storage, to_storage


class CUDADriverError(RuntimeError):
    pass


class CUDARuntimeError(RuntimeError):
    pass


def softmax_emulation(dtype, behaviour="correct"):
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
        if behaviour == "slow":  # correct, and slower: host "events" see the extra time
            time.sleep(SLOW_S)
        if behaviour == "illegal":
            raise CUDADriverError("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered")
        y[: out.shape[0]] = out
    return run


EMULATIONS: dict = {}
# block size -> behaviour, for workers in other processes (the evaluator tests): the candidate's
# THREADS picks how its "kernel" misbehaves.
BY_THREADS = {64: "skip_rows", 128: "illegal", 1024: "hang_when_timed"}
TIMING = {"on": False}
SLOW_S = 0.005  # what the "slow" behaviour adds to every call


class FakeFunction:
    def __init__(self, name):
        self.name, self.ptr = name, 0

    def __call__(self, grid, block, args, shared_mem=0, stream=None):
        emulate = EMULATIONS.get(self.name)
        if emulate is None:  # the softmax family by block size (see BY_THREADS)
            x = args[0]
            dtype = "bfloat16" if x.dtype == np.uint16 else str(x.dtype)
            behaviour = BY_THREADS.get(int(block[0]), "correct")
            if behaviour == "hang_when_timed":
                if TIMING["on"]:
                    time.sleep(3600)
                behaviour = "correct"
            emulate = softmax_emulation(dtype, behaviour)
        emulate(*args)


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


# What CuPy's getDeviceProperties says on an H200 (sm_90; the per-SM limits are the CUDA
# Programming Guide's for compute capability 9.0), except a small L2 (1 MiB) so the timer's
# flush buffer stays small on the host.
H200_PROPERTIES = {"name": b"NVIDIA H200", "major": 9, "minor": 0, "multiProcessorCount": 132,
                   "l2CacheSize": 1 << 20, "sharedMemPerBlock": 49152, "sharedMemPerBlockOptin": 232448,
                   "regsPerBlock": 65536, "totalGlobalMem": 141 << 30, "warpSize": 32,
                   "maxThreadsPerBlock": 1024, "maxThreadsPerMultiProcessor": 2048,
                   "regsPerMultiprocessor": 65536, "sharedMemPerMultiprocessor": 233472,
                   "maxBlocksPerMultiProcessor": 32, "reservedSharedMemPerBlock": 1024}


def fake_cuda_worker(monkeypatch):
    """A CudaWorker for device 0 on this fake CuPy (in this process), with the L2 flush off and
    a fixed copy bandwidth; the caller clears EMULATIONS when done."""
    monkeypatch.setitem(sys.modules, "cupy", make_fake_cupy())
    from app.gpu.cuda import timing
    from app.gpu.cuda import worker as worker_mod

    monkeypatch.setattr(timing.Timer, "flush", lambda self: None)
    monkeypatch.setattr(worker_mod, "cached_copy_bandwidth", lambda key, fn, refresh=False: (4e12, True))
    return worker_mod.CudaWorker(0)


def make_fake_cupy():
    # NVRTC is real: load it (and CuPy's include paths) before "cupy" becomes the fake.
    from app.gpu.cuda import nvrtc

    nvrtc.nvrtc_module()
    nvrtc.include_options()
    nvrtc.nvrtc_version()
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
            CUDARuntimeError=CUDARuntimeError,
            getDeviceProperties=lambda i: dict(H200_PROPERTIES),
            driverGetVersion=lambda: 12090, runtimeGetVersion=lambda: 12090),
        function=types.SimpleNamespace(Module=FakeModule),
    )
    cp.cuda = cuda
    return cp


def install() -> None:
    """Put the fake CuPy in sys.modules and make the GPU-only parts of the worker host-friendly
    (no L2 flush buffer writes, a fixed copy bandwidth, a timer that says when it is timing)."""
    sys.modules["cupy"] = make_fake_cupy()
    from app.gpu.cuda import timing
    from app.gpu.cuda import worker as worker_mod

    timing.Timer.flush = lambda self: None
    worker_mod.cached_copy_bandwidth = lambda key, fn, refresh=False: (4e12, True)
    if not getattr(timing.Timer, "_fake_flagged", False):
        measure = timing.Timer.measure

        def flagged(self, *a, **kw):
            TIMING["on"] = True
            try:
                return measure(self, *a, **kw)
            finally:
                TIMING["on"] = False

        timing.Timer.measure = flagged
        timing.Timer._fake_flagged = True


def fake_worker(index: int):
    install()
    from app.gpu.cuda.worker import CudaWorker

    return CudaWorker(index)


def slow_compile_worker(index: int):
    """NVRTC made to hang: the watchdog's compile deadline must kill it."""
    worker = fake_worker(index)

    def hang(*args, **kwargs):
        time.sleep(3600)

    worker.compile = hang
    return worker


def slow_512_worker(index: int):
    """fake_worker whose kernels of 512 threads per block are correct and SLOW_S slower per
    call (BY_THREADS is this worker process's own): two kernels whose timings differ."""
    BY_THREADS[512] = "slow"
    return fake_worker(index)


SLOW_LIBRARY_S = 0.003  # what the stand-in library baseline of fake_baseline_worker wastes per call


def _stand_in_softmax_baselines() -> None:
    """softmax's baselines in this process: one library baseline that sleeps SLOW_LIBRARY_S per
    call and one "compiled" baseline that does not (both the float64 reference, stored)."""
    from app.catalog.cuda.rows import Softmax

    def maker(delay: float):
        def make(inputs, shape, dtype):
            box = {}

            def run():
                if delay:
                    time.sleep(delay)
                x = from_storage(np, inputs["x"], dtype)
                box["y"] = to_storage(np, Softmax().reference(np, {"x": x}, shape)["y"], dtype)
            return run, lambda: dict(box)
        return make

    Softmax.baselines = lambda self, dtype: {"cupy:slow": maker(SLOW_LIBRARY_S)}
    Softmax.compiled_baselines = lambda self, dtype: {"triton:fast": maker(0.0)}


def fake_worker_with_stand_in_baselines(index: int):
    """fake_worker (the sealed cell) with softmax's stand-in library baseline."""
    worker = fake_worker(index)
    _stand_in_softmax_baselines()
    return worker


def fake_baseline_worker(index: int):
    """The trusted baseline cell (make_baseline_handler) on this fake CuPy, with softmax's
    stand-in baselines: the best is compiled and the anchor is not. Its replies say which kind
    of cell served them (`cell`), as the worker sees its own plan."""
    install()
    _stand_in_softmax_baselines()
    from app.gpu import sandbox
    from app.gpu.cuda.worker import CudaWorker

    worker = CudaWorker(index, compiled_baselines=True)
    baselines = worker.baselines

    def tagged(spec, progress):
        plan = sandbox.current_plan()
        return {**baselines(spec, progress), "cell": plan.kind if plan else None}

    worker.baselines = tagged
    return worker


def fake_failing_baseline_worker(index: int):
    """A baseline cell that dies while it measures (as a compiler crash would take it down)."""
    worker = fake_baseline_worker(index)

    def crash(spec, progress):
        os.kill(os.getpid(), signal.SIGSEGV)

    worker.baselines = crash
    return worker


def fake_empty_baseline_worker(index: int):
    """A baseline cell in which no baseline verifies (every one raised, as without torch)."""
    worker = fake_baseline_worker(index)

    def nothing(spec, progress):
        return {"ok": True, "best": None, "anchor": None, "baselines": {
            "triton:fast": {"ok": False, "ms": [], "error": "RuntimeError: torch is not importable",
                            "compiled": True}}}

    worker.baselines = nothing
    return worker
