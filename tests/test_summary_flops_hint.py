"""Your own kernel with no `flops` is held to a memory roof. A compute-bound one (a
point-in-polygon test: 40 vertices per point) then reads "0.1 % of the L2 roof" with nothing to
say why; the summary `run`, `show`, the report and the window print says how to be held to the
FP32 peak instead. Catalog operators and kernels near their roof get no such note."""

from __future__ import annotations

import pytest

from app.run_summary import summarize


def _run(kernel_source: bool) -> dict:
    device = {"unit": "ms", **({"kernel_source": {"files": ["pnpoly.c"], "text": "..."}}
                               if kernel_source else {})}
    return {"id": 1, "minimize": True, "device": device, "baseline_value": None,
            "limit_value": 0.0064}


def _row(fraction: float, roof: str) -> dict:
    return {"index": 1, "key": "k", "ok": True, "value": 6.4, "agent": "local", "config": {},
            "metrics": {"fraction_of_roof": fraction}, "resources": {"roof": roof}}


@pytest.mark.parametrize("own, fraction, roof, noted", [
    (True, 0.001, "L2 roof 186.7 GB/s at 2 threads", True),
    (True, 0.4, "DRAM roof 36.9 GB/s at 2 threads", False),  # near its memory roof
    (True, 0.001, "FP32 peak 95.1 GFLOP/s at 1 thread", False),  # flops declared
    (False, 0.001, "L2 roof 186.7 GB/s at 2 threads", False),  # a catalog operator
])
def test_the_flops_note(own, fraction, roof, noted):
    notes = summarize(_run(own), [_row(fraction, roof)]).notes
    assert any("declares no flops" in n and "[kernel]" in n for n in notes) == noted, notes
