"""What the CUDA worker tests share: the real CudaWorker on tests/fake_cupy (a fixture; the
emulations a test planted are cleared after it) and a softmax cascade request with a quick
timing protocol. A test module takes the fixture with `worker = cuda_worker_fixtures.worker`."""

from __future__ import annotations

import fake_cupy
import pytest

from app.catalog.cuda import OPERATORS
from app.gpu.cascade import CascadeRequest
from app.gpu.cuda.timing import Protocol

QUICK = Protocol(min_samples=5, max_samples=12, max_seconds=0.5, warmup=1, batch=3)


@pytest.fixture
def worker(monkeypatch):
    yield fake_cupy.fake_cuda_worker(monkeypatch)
    fake_cupy.EMULATIONS.clear()


def softmax_request(tmp_path, dtype, shape, cases=(), **kw):
    """The catalog softmax at its first recommended configuration; `source` in kw replaces
    the template, the rest of kw joins the request's options."""
    op = OPERATORS["softmax"]
    return CascadeRequest(key="k", config=op.recommended(dtype, shape)[0], source=kw.pop("source", None),
                          template=op.template_source(dtype), goal_shapes=[shape],
                          params=op.space(dtype).params, dtype=dtype, validation_cases=list(cases),
                          seed=5, timing=QUICK,
                          options={"operator": "softmax", "compile_cache": str(tmp_path), **kw})
