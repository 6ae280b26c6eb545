"""Roofline limits: the peak table, time floors and achieved fractions, and the copy-bandwidth
cache keyed by device and driver (the measurement itself needs a GPU: a stand-in function is
passed here, and tests/gpu measures for real)."""

from __future__ import annotations

import json

import pytest

from app.gpu.cuda.roofline import (
    Limits,
    cached_copy_bandwidth,
    device_key,
    peak_flops,
)


def test_peak_table_lookup():
    assert peak_flops("NVIDIA H100 80GB HBM3", "bfloat16") == pytest.approx(989.4e12)
    assert peak_flops("NVIDIA H100 PCIe", "bfloat16") == pytest.approx(756.5e12)
    assert peak_flops("NVIDIA H200", "float32") == pytest.approx(67e12)
    assert peak_flops("NVIDIA A100-SXM4-80GB", "float16") == pytest.approx(312e12)
    assert peak_flops("NVIDIA GeForce RTX 4090", "float32") == pytest.approx(82.6e12)
    assert peak_flops("NVIDIA L40S", "bfloat16") == pytest.approx(362.1e12)
    assert peak_flops("NVIDIA L4", "float32") == pytest.approx(30.3e12)
    assert peak_flops("Mystery GPU 9000", "float32") is None
    assert peak_flops("Tesla T4", "bfloat16") is None


def test_time_floor_and_achieved():
    lim = Limits(device="x", copy_bw=4e12, peak={"bfloat16": 1e15})
    # memory-bound: 4 GB at 4 TB/s -> 1 ms; compute negligible
    assert lim.time_floor_s(1e6, 4e9, "bfloat16") == pytest.approx(1e-3)
    # compute-bound: 1e12 FLOP at 1e15 -> 1 ms beats 1 MB of traffic
    assert lim.time_floor_s(1e12, 1e6, "bfloat16") == pytest.approx(1e-3)
    got = lim.achieved(1e12, 1e6, "bfloat16", 2e-3)
    assert got["tflops"] == pytest.approx(500) and got["pct_peak_flops"] == pytest.approx(50)
    assert got["pct_of_limit"] == pytest.approx(50)
    mem = lim.achieved(0, 4e9, "bfloat16", 1.25e-3)
    assert mem["gbps"] == pytest.approx(3200) and mem["pct_copy_bw"] == pytest.approx(80)
    assert "tflops" not in mem
    assert Limits("y", None, {}).time_floor_s(1, 1, "float32") is None


def test_copy_bandwidth_is_measured_once_per_device_and_driver(tmp_path):
    path = tmp_path / "roofline.json"
    calls = []

    def measure():
        calls.append(1)
        return 4.3e12

    key = device_key("NVIDIA H200", "570.1", "GPU-abc")
    assert cached_copy_bandwidth(key, measure, path) == (4.3e12, False)
    assert cached_copy_bandwidth(key, measure, path) == (4.3e12, True)
    assert len(calls) == 1
    other = device_key("NVIDIA H200", "575.0", "GPU-abc")  # new driver: measure again
    assert cached_copy_bandwidth(other, lambda: 4.4e12, path) == (4.4e12, False)
    data = json.loads(path.read_text())
    assert set(data) == {key, other}
    assert cached_copy_bandwidth(key, lambda: 1.0, path, refresh=True) == (1.0, False)


def test_corrupt_cache_is_remeasured_and_bad_measurements_refused(tmp_path):
    path = tmp_path / "roofline.json"
    path.write_text("[not a dict")
    assert cached_copy_bandwidth("k", lambda: 2e12, path) == (2e12, False)
    with pytest.raises(ValueError, match="not positive"):
        cached_copy_bandwidth("k2", lambda: 0.0, path)


class FakeRoof:
    """Stands in for CopyRoof (a real GPU cannot run here): full and quick measurements from
    scripted values, the clocks it ran at, and the two parts of the last full measurement."""

    def __init__(self, full, spots=()):
        self.full, self.spots, self.calls = list(full), list(spots), 0
        self.parts = {}

    def __call__(self):
        self.calls += 1
        bw = self.full.pop(0)
        self.parts = {"memcpy": bw * 0.95, "vector_kernel": bw}
        return bw

    def spot_check(self):
        return self.spots.pop(0)

    def clocks(self):
        return {"sm_clock_mhz": 1980.0, "mem_clock_mhz": 3201.0}


def test_the_roof_is_stored_with_clocks_and_both_copies(tmp_path):
    path = tmp_path / "roofline.json"
    roof = FakeRoof([4.3e12], spots=[4.25e12])
    assert cached_copy_bandwidth("k", roof, path, now=lambda: 1000.0) == (4.3e12, False)
    entry = json.loads(path.read_text())["k"]
    assert entry["clocks"] == {"sm_clock_mhz": 1980.0, "mem_clock_mhz": 3201.0}
    assert entry["memcpy_bw"] == pytest.approx(4.085e12) and entry["vector_kernel_bw"] == 4.3e12
    assert entry["measured_at"] == 1000.0 and entry["why"] == "none stored"
    # a spot check within 5%: the stored roof stands
    assert cached_copy_bandwidth("k", roof, path, now=lambda: 2000.0) == (4.3e12, True)
    assert roof.calls == 1


def test_the_roof_is_measured_again_when_a_spot_check_disagrees_or_it_is_stale(tmp_path):
    path = tmp_path / "roofline.json"
    # a bad first measurement (a neighbour was copying too) ...
    roof = FakeRoof([2.0e12, 4.3e12, 4.4e12], spots=[4.3e12])
    assert cached_copy_bandwidth("k", roof, path, now=lambda: 0.0) == (2.0e12, False)
    # ... is caught by the next spot check, 115% off
    assert cached_copy_bandwidth("k", roof, path, now=lambda: 10.0) == (4.3e12, False)
    entry = json.loads(path.read_text())["k"]
    assert entry["why"].startswith("spot check 4300 GB/s vs stored 2000 GB/s") and entry["spot_check"] == 4.3e12
    # older than the limit: measured again without a spot check
    assert cached_copy_bandwidth("k", roof, path, now=lambda: 10.0 + 8 * 86400) == (4.4e12, False)
    assert "older than 7 days" in json.loads(path.read_text())["k"]["why"]
    assert roof.calls == 3
    # a plain function (no spot check, no clocks) still works, as before
    assert cached_copy_bandwidth("p", lambda: 1e12, path) == (1e12, False)
    assert cached_copy_bandwidth("p", lambda: 9e12, path) == (1e12, True)


def test_copy_roof_is_the_better_of_memcpy_and_a_vectorised_kernel_that_compiles(tmp_path):
    """The vectorised copy kernel compiles with NVRTC (the launch needs a GPU: tests/gpu)."""
    pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    from app.gpu.cuda import nvrtc
    from app.gpu.cuda.roofline import VECTOR_COPY, CopyRoof, measure_copy_bandwidth

    built = nvrtc.compile_source(VECTOR_COPY, "ks_vector_copy", "sm_90", cache=tmp_path)
    assert not built.resource().spills and built.resource().registers > 0
    assert isinstance(measure_copy_bandwidth, CopyRoof)
    assert callable(measure_copy_bandwidth.spot_check) and callable(measure_copy_bandwidth.clocks)
