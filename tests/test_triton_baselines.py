"""Triton's fused baselines (app.catalog.cuda.triton_kernels): they compile for Hopper and
Ampere without a device, and, run by Triton's interpreter on the CPU, they match the catalog's
float64 reference within the operator's own tolerance. Needs triton and torch (the GPU
machine has both; the dry run of scripts/gpu-check runs this file in a venv like it); skipped
where they are missing. Timing them needs a GPU: the baseline cell does that there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


needs_triton = pytest.mark.skipif(not _have("triton"), reason="triton is not installed")
needs_torch = pytest.mark.skipif(not (_have("triton") and _have("torch")),
                                 reason="triton and torch are not both installed")


@needs_triton
@pytest.mark.parametrize("cc", [90, 80])
def test_every_triton_baseline_compiles_for_the_gpu_without_one(cc):
    from app.catalog.cuda.triton_kernels import KERNELS, compile_all

    sizes = compile_all(cc)
    assert set(sizes) == set(KERNELS)
    assert all(n > 1000 for per_dtype in sizes.values() for n in per_dtype.values()), sizes


# Runs in its own interpreter: TRITON_INTERPRET must be set before Triton is imported.
INTERPRETED = r"""
import json, sys
import numpy as np, torch
from app.catalog import get_operator
from app.catalog.cuda import triton_kernels
from app.catalog.protocol import from_storage
from app.gpu.verify import tolerance_for

TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
out = {}
for name in ("softmax", "rmsnorm", "layernorm", "bias_gelu"):
    op = get_operator("cuda", name)
    eps = getattr(op, "eps", None)
    for dtype in ("float32", "float16", "bfloat16"):
        for shape in ([5, 96], [3, 1000], [2, 5000]):  # 4, 4 and 16 warps
            inputs = op.make_inputs(np, shape, dtype, np.random.default_rng(7), "normal")
            values = {k: from_storage(np, v, dtype) for k, v in inputs.items()}
            tensors = [torch.tensor(values[k]).to(TORCH[dtype]) for k in op.input_names]
            y = torch.empty_like(tensors[0])
            triton_kernels.launch(name, tensors, y, shape[1], eps)
            got = y.float().numpy().astype(np.float64)
            want = op.reference(np, values, shape)["y"]
            tol = tolerance_for(op, shape, dtype, None, None)
            bad = np.abs(got - want) > tol.atol + tol.rtol * np.abs(want)
            out[f"{name}/{dtype}/{shape[1]}"] = int(bad.sum())
print(json.dumps(out))
"""


@needs_torch
def test_the_triton_baselines_match_the_reference_in_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", INTERPRETED], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    wrong = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(wrong) == 4 * 3 * 3
    assert not any(wrong.values()), {k: v for k, v in wrong.items() if v}


class TritonProbe:
    """Runs inside a worker cell ("test_triton_baselines:TritonProbe"): compiles the Triton
    baselines for a GPU target there, as the baseline cell does before its first launch."""

    def __call__(self, request, progress):
        from app.catalog.cuda.triton_kernels import compile_all

        try:
            return compile_all(request[1])
        except Exception as exc:  # noqa: BLE001 - reported to the test
            return f"{type(exc).__name__}: {str(exc)[:300]}"


@needs_triton
def test_triton_compiles_inside_the_baseline_cell_and_not_in_a_sealed_one():
    """Triton starts its own ptxas: the baseline cell's file rules let it (and write its cache
    under the application's cache), the sealed GPU cell refuses it."""
    from app.gpu.worker import Deadlines, WorkerPool

    results = {}
    for kind in ("baseline", "gpu"):
        pool = WorkerPool("test_triton_baselines:TritonProbe", [()], name=f"triton-{kind}-", kind=kind)
        try:
            reply = pool.call(("compile", 90), Deadlines(compile_s=120, run_s=120))
            assert reply.fault is None, reply.fault
            results[kind] = reply.result
        finally:
            pool.close()
    assert isinstance(results["baseline"], dict) and set(results["baseline"]) == {
        "softmax", "rmsnorm", "layernorm", "bias_gelu"}, results["baseline"]
    from app.gpu.sandbox import seccomp

    if seccomp.available() == "":
        assert isinstance(results["gpu"], str) and "Permission" in results["gpu"], results["gpu"]
