"""bench/gpu_kernels.py end to end without a GPU: real NVRTC compiles, real worker processes and
the real swarm, with `BenchGpu` standing in for the GPU worker (it cannot run here) and
answering with a made-up time per configuration. Checks the report files and the last line."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.core.types import Evaluation, Stage
from app.gpu.cascade import STAGES

ROOT = Path(__file__).resolve().parent.parent

INFO = {"ok": True, "name": "NVIDIA H200", "compute_capability": "90", "sms": 132,
        "l2_bytes": 50 << 20, "shared_per_block_optin": 232448, "regs_per_block": 65536,
        "memory_bytes": 141 << 30, "driver": "570.00", "uuid": "GPU-fake", "copy_bw": 4.0e12,
        "cupy": "fake"}


class BenchGpu:
    """Stand-in GPU worker: every candidate verifies; its time is a hash of its configuration.
    It answers in the worker protocol every backend shares (a serialised Evaluation)."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __call__(self, request, progress):
        if request[0] == "info":
            return dict(INFO)
        if request[0] == "baselines":
            return {"ok": True, "best": "torch:x", "baselines": {"torch:x": {"ok": True, "ms": [0.2]}}}
        req = request[1]
        digest = hashlib.sha256(json.dumps(req.config, sort_keys=True).encode()).digest()
        ms = (0.1 + digest[0] / 255.0) * len(req.goal_shapes)
        ev = Evaluation(key=req.key, config=req.config, ok=True, value=ms, time_ms=ms, p10_ms=ms * 0.99,
                        p90_ms=ms * 1.01, samples_ms=[ms] * 10, agent=req.agent,
                        stages=[Stage(n, True, 0.0) for n in STAGES],
                        metrics={"samples": 10.0, "baseline_ms": 0.2 * len(req.goal_shapes)},
                        resources={"timing_mode": "events", "cache": "cold"})
        return {"evaluation": ev.to_dict(), "restart": False}


class BenchBaselineGpu(BenchGpu):
    """Stand-in trusted baseline cell: a compiled baseline ("triton:x", 0.15 ms per shape)
    beats the library one ("torch:x", the anchor the stand-in GPU worker times beside)."""

    def __call__(self, request, progress):
        if request[0] != "baselines":
            return super().__call__(request, progress)
        shapes = len(request[1]["goal_shapes"])
        return {"ok": True, "best": "triton:x", "anchor": "torch:x", "baselines": {
            "torch:x": {"ok": True, "ms": [0.2] * shapes, "compiled": False},
            "triton:x": {"ok": True, "ms": [0.15] * shapes, "compiled": True}}}


class BenchDeadBaselineGpu(BenchGpu):
    """Stand-in baseline cell that dies on its request (as a compiler crash would take it down)."""

    def __call__(self, request, progress):
        if request[0] == "baselines":
            os.kill(os.getpid(), signal.SIGSEGV)
        return super().__call__(request, progress)


def test_a_dead_baseline_cell_is_not_waited_for_again(tmp_path):
    env = {"PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "KERNELSWARM_CACHE": str(tmp_path / "cache"),
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_kernels.py"), "--out", str(tmp_path), "--budget-s", "8",
         "--only", "softmax:bfloat16,rmsnorm:bfloat16", "--no-faults", "--worker-factory",
         "test_cuda_bench:BenchGpu", "--baseline-factory", "test_cuda_bench:BenchDeadBaselineGpu"],
        check=False, capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {r["kernel"]: r for r in json.loads((tmp_path / "gpu_kernels.json").read_text())["rows"]}
    assert "baseline cell failed" in rows["softmax"]["compiled_error"]
    assert rows["rmsnorm"]["compiled_error"] == "" and rows["rmsnorm"]["best_baseline"] == "torch:x"
    assert "compiled baselines off for the rest of the run" in proc.stdout
    md = (tmp_path / "gpu_kernels.md").read_text()
    assert "softmax bfloat16: no compiled baselines: the baseline cell failed" in md


def test_benchmark_report_and_last_line(tmp_path):
    env = {"PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "KERNELSWARM_CACHE": str(tmp_path / "cache"),
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_kernels.py"), "--out", str(tmp_path), "--budget-s", "8",
         "--only", "softmax:bfloat16,gemm:bfloat16", "--no-faults", "--worker-factory", "test_cuda_bench:BenchGpu",
         "--baseline-factory", "test_cuda_bench:BenchBaselineGpu"],
        check=False, capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("memory-bound min ") and "% of copy bandwidth; GEMM bf16 " in last, last
    data = json.loads((tmp_path / "gpu_kernels.json").read_text())
    rows = {(r["kernel"], r["dtype"]): r for r in data["rows"]}
    soft = rows[("softmax", "bfloat16")]
    assert soft["evaluations"] >= 3 and soft["time_ms"] >= 0.1 and soft["pct_copy_bw"] > 0
    # a compiled best: the candidate was timed beside the anchor (0.2 ms), scaled to the best
    assert (soft["best_baseline"], soft["anchor_baseline"]) == ("triton:x", "torch:x")
    assert soft["baseline_ms"] == pytest.approx(0.15) and soft["speedup"] == pytest.approx(0.15 / soft["time_ms"])
    gemm = rows[("gemm", "bfloat16")]
    assert gemm["tflops"] > 0 and gemm["speedup"] == gemm["baseline_ms"] / gemm["time_ms"]
    assert f"GEMM bf16 {100 * 0.2 / gemm['time_ms']:.1f}% of cuBLAS" in last
    md = (tmp_path / "gpu_kernels.md").read_text()
    assert "| softmax | bfloat16 | 8192x8192 |" in md and md.strip().endswith(last)
    assert "softmax bfloat16 triton:x: 0.1500 ms [best, compiled]" in md
    assert "softmax bfloat16 torch:x: 0.2000 ms [anchor]" in md
    # gemm has no compiled baseline: no baseline cell, the library's best stands
    assert gemm["best_baseline"] == "torch:x" and gemm["baseline_ms"] == pytest.approx(0.2)


def test_benchmark_without_a_gpu_says_so(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_kernels.py"), "--out", str(tmp_path)],
                          check=False, capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                               "KERNELSWARM_CACHE": str(tmp_path / "c")})
    try:
        import cupy.cuda.runtime as rt

        if rt.getDeviceCount() > 0:
            return
    except Exception:  # noqa: BLE001, S110 - no CuPy or no driver: no GPU
        pass
    assert proc.returncode == 2 and "no usable NVIDIA GPU" in proc.stdout and not proc.stderr.strip()


class SlowBenchGpu(BenchGpu):
    """BenchGpu that takes 0.2 s per evaluation, so a run can be interrupted half way."""

    def __call__(self, request, progress):
        if request[0] == "evaluate":
            time.sleep(0.2)
        return super().__call__(request, progress)


def default_sigint() -> None:
    """SIGINT ignored by a background parent stays ignored across exec: restore the default."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _bench_env(tmp_path) -> dict:
    return {"PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "KERNELSWARM_CACHE": str(tmp_path / "cache"),
            "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}


@pytest.mark.slow
def test_an_interrupted_benchmark_writes_its_partial_report(tmp_path):
    """SIGINT to the whole process group (what `timeout -s INT` in scripts/gpu-check sends) in
    the middle of the second kernel: the first kernel's row, the device and the interruption are
    in gpu_kernels.md/.json, exit 130, no traceback."""
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "gpu_kernels.py"), "--out", str(tmp_path), "--budget-s", "300",
         "--only", "softmax:bfloat16,gemm:bfloat16", "--worker-factory", "test_cuda_bench:SlowBenchGpu"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_bench_env(tmp_path), cwd=ROOT,
        start_new_session=True, preexec_fn=default_sigint)  # noqa: PLW1509
    report = tmp_path / "gpu_kernels.json"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if len(json.loads(report.read_text())["rows"]) == 1:
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    time.sleep(1.0)  # into the second kernel's search
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out[-3000:] + err[-3000:]
    data = json.loads(report.read_text())
    assert data["partial"].startswith("interrupted (SIGINT)") and data["device"]["name"] == "NVIDIA H200"
    rows = {(r["kernel"], r["dtype"]): r for r in data["rows"]}
    assert rows[("gemm", "bfloat16")]["time_ms"] > 0  # the headline GEMM goes first
    assert rows[("softmax", "bfloat16")]["error"] == "interrupted"
    md = (tmp_path / "gpu_kernels.md").read_text()
    assert "**Partial report: interrupted (SIGINT)" in md and "| gemm | bfloat16 | 4096x4096x4096 |" in md
    assert "Traceback" not in err, err[-3000:]


def test_faults_only_puts_the_hang_last(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_kernels.py"), "--out", str(tmp_path), "--faults-only",
         "--worker-factory", "test_cuda_bench:BenchGpu"],
        check=False, capture_output=True, text=True, timeout=120, env=_bench_env(tmp_path), cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads((tmp_path / "gpu_kernels.json").read_text())
    assert [f["fault"] for f in data["faults"]][-2:] == ["out_of_memory", "hang"]
    assert data["rows"] == [] and "Planted faults survived" in (tmp_path / "gpu_kernels.md").read_text()
