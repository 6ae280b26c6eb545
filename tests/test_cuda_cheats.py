"""CUDA cheats through the real GPU worker's cascade (real NVRTC and ptxas; tests/fake_cupy.py
runs the "kernels" on NumPy): state kept in global device memory, however it is declared, is
refused before anything runs; a kernel that caches results by input pointer or content, or
writes part of its output on timed calls, is caught on the outputs of the timed calls."""

from __future__ import annotations

import cuda_worker_fixtures
import fake_cupy
import numpy as np
import pytest
from cuda_worker_fixtures import softmax_request

from app.catalog.cuda import OPERATORS
from app.catalog.protocol import from_storage, to_storage
from app.core.types import RESOURCE_LIMIT, STATIC_CHECK, VERIFY_FAILED, Evaluation
from app.gpu.cuda.worker import managed_variables

DTYPE, SHAPE = "float32", [64, 256]
# a second kernel in the module touches the state: ptxas reports gmem per module
TOUCH = 'extern "C" __global__ void ks_touch(float *y) {{ {use} }}\n'
STATE = {
    "namespace": ("namespace hide { __device__ float cache[256]; }\n",
                  "hide::cache[threadIdx.x] = y[0]; y[1] = hide::cache[0];"),
    "variable_template": ("template <int N> __device__ float stash[N];\n",
                          "stash<64>[threadIdx.x] = y[0]; y[1] = stash<64>[1];"),
    "align": ("__device__ __align__(16) float kept[64];\n",
              "kept[threadIdx.x] = y[0]; y[1] = kept[1];"),
    # __managed__ spelled by token pasting: no text check sees it, ptxas still does
    "pasted_managed": ("#define KEEP(x) __##x##__\nKEEP(managed) float m[16];\n",
                       "m[threadIdx.x] = y[0]; y[1] = m[1];"),
}


worker = cuda_worker_fixtures.worker


def request(tmp_path, source=None):
    return softmax_request(tmp_path, DTYPE, SHAPE, source=source)


PHASE = {"stage": ""}


def evaluate(worker, req):
    reply = worker(("evaluate", req), lambda stage: PHASE.update(stage=stage))
    return Evaluation.from_dict(reply["evaluation"])


def with_state(name):
    decl, use = STATE[name]
    return decl + OPERATORS["softmax"].template_source(DTYPE) + "\n" + TOUCH.format(use=use)


@pytest.mark.parametrize("name", sorted(STATE))
@pytest.mark.slow
def test_global_device_state_is_refused_by_what_ptxas_reports(worker, tmp_path, name):
    fake_cupy.EMULATIONS["softmax"] = fake_cupy.softmax_emulation(DTYPE)
    ev = evaluate(worker, request(tmp_path, with_state(name)))
    assert not ev.ok and ev.reason == RESOURCE_LIMIT, (ev.reason, ev.detail)
    assert "bytes of global device memory" in ev.detail and "template keeps" in ev.detail
    assert [s.name for s in ev.stages] == ["static_check", "compile", "resources"]


def test_the_template_itself_and_an_honest_rewrite_pass(worker, tmp_path):
    fake_cupy.EMULATIONS["softmax"] = fake_cupy.softmax_emulation(DTYPE)
    honest_rewrite = "// my rewrite\n" + OPERATORS["softmax"].template_source(DTYPE)
    for source in (None, honest_rewrite):
        ev = evaluate(worker, request(tmp_path, source))
        assert ev.ok, (ev.reason, ev.detail)


def test_managed_variable_is_refused_by_name_even_spliced(worker, tmp_path):
    spliced = "__mana\\\nged__ float m[16];\n" + OPERATORS["softmax"].template_source(DTYPE)
    assert managed_variables(spliced)
    assert not managed_variables("// __managed__ in a comment\nint x;")
    ev = evaluate(worker, request(tmp_path, spliced))
    assert ev.reason == STATIC_CHECK and "__managed__" in ev.detail


def _emulation(kind):
    """A softmax 'kernel' that cheats only while it is timed (so only the checks on the timed
    calls can catch it)."""
    cache: dict = {}
    calls = {"n": 0}

    def exact(x):
        v = from_storage(np, x, DTYPE)
        e = np.exp(v - v.max(axis=1, keepdims=True))
        return to_storage(np, e / e.sum(axis=1, keepdims=True), DTYPE)

    def run(x, y, rows):
        calls["n"] += 1
        if PHASE["stage"] != "time":
            y[...] = exact(x)
            return
        if kind == "pointer_cache":
            key = x.__array_interface__["data"][0]
        elif kind == "content_cache":
            key = x.reshape(-1)[:4].tobytes()  # hashes a few elements
        else:
            key = None
        if key is not None:
            if key not in cache:
                cache[key] = exact(x)
            y[...] = cache[key]
            return
        out = exact(x)
        if kind == "partial_when_timed":  # half the rows
            y[: out.shape[0] // 2] = out[: out.shape[0] // 2]
            return
        y[...] = out
    return run


@pytest.mark.parametrize("kind", ["pointer_cache", "content_cache", "partial_when_timed"])
def test_cheats_on_timed_calls_are_caught_on_their_outputs(worker, tmp_path, kind):
    fake_cupy.EMULATIONS["softmax"] = _emulation(kind)
    ev = evaluate(worker, request(tmp_path))
    assert not ev.ok and ev.reason == VERIFY_FAILED, (ev.reason, ev.detail)
    assert ev.stages[-1].name == "time" and not ev.stages[-1].ok
    assert ev.detail.startswith("outputs of a timed call were wrong: slot"), ev.detail
