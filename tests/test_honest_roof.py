"""The roof check must never wrong an honest kernel, and must still refuse one that skips work
Real compiler, real worker cells, a real CPU hog process beside them.

The cached roofs are written absurdly low, as a roof measured on a loaded machine (or at the
wrong thread count) can be: an honest kernel that starts its own OpenMP threads (no THREADS
parameter) must be held to the roof measured again beside it, at every core, and pass; a kernel
that writes the right answer without reading its inputs (the inputs are constant and fixed, so
it passes every verification) moves a thirteenth of the bytes the goal declares and must still be
refused, with both figures. (Under the hog the skip would be hidden by the load, which slows a
short two-thread call more than the probe: the refusal is checked on the machine as it is.)"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from app.core.types import SUSPECT, Candidate
from app.goal import Goal
from app.gpu.cpu import CpuEvaluator, CpuSettings, find_compiler, memory_roof, toolchain
from app.gpu.timing import TimingSettings
from app.gpu.worker import Deadlines

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="needs a C compiler")

INPUTS = tuple(f"x{i}" for i in range(12))
PARAMS = ", ".join(f"const float *{x}" for x in INPUTS)
HONEST_C = f"""\
#include <omp.h>
void add12(float *c, {PARAMS}, int n)
{{
    #pragma omp parallel for schedule(static)
    for (int i = 0; i < n; i++) c[i] = {" + ".join(f"{x}[i]" for x in INPUTS)};
}}
"""
# the inputs are all ones: the answer without reading any of them; verification cannot see
# it, the roof can (one thread: the roof is the one-thread roof, measured again)
SKIPS_WORK_C = f"""\
void add12(float *c, {PARAMS}, int n)
{{
    {" ".join(f"(void){x};" for x in INPUTS)}
    for (int i = 0; i < n; i++) c[i] = 12.0f;
}}
"""
REFERENCE_PY = f"""\
def add12({", ".join(INPUTS)}):
    return {" + ".join(INPUTS)}
"""
ARGS = ",\n".join(["  { name = \"c\", role = \"output\", shape = \"n\" }"]
                  + [f"  {{ name = \"{x}\", shape = \"n\", fill = \"ones\", fixed = true }}"
                     for x in INPUTS]
                  + ["  { name = \"n\", role = \"scalar\", dtype = \"int32\", value = \"n\" }"])
GOAL_TOML = f"""\
name = "add12"
backend = "cpu"
shapes = [[1048576]]

[kernel]
source = "add12.c"
entry = "add12"
tune_params = {{ VARIANT = [0] }}
reference = "reference.py:add12"
args = [
{ARGS},
]
"""


def _low_roofs(path: Path) -> Path:
    """Roofs as a loaded machine might have cached them (far too low), in the file's format."""
    tc = toolchain()
    key = (memory_roof.cache_key(tc.identity) if hasattr(memory_roof, "cache_key")
           else f"{tc.identity}|{os.cpu_count()}")  # the earlier, unsigned format
    levels = [{"name": "L1", "size_bytes": 1 << 15, "shared_by": 1},
              {"name": "DRAM", "size_bytes": 0, "shared_by": os.cpu_count() or 1}]
    low = {"L1": 1e-3, "DRAM": 1e-3}  # GB/s
    path.write_text(json.dumps({"threads": os.cpu_count() or 1, "one_thread": low,
                                "all_threads": low, "levels": levels, "key": key,
                                "measured_at": time.time()}))
    return path


@pytest.fixture(scope="module")
def add12(tmp_path_factory):
    d = tmp_path_factory.mktemp("add12")
    (d / "add12.c").write_text(HONEST_C)
    (d / "reference.py").write_text(REFERENCE_PY)
    (d / "goal.toml").write_text(GOAL_TOML)
    settings = CpuSettings(
        timing=TimingSettings(warmup=1, min_samples=3, max_samples=5, max_seconds=0.3),
        deadlines=Deadlines(compile_s=60.0, run_s=30.0), flush_bytes=0,
        memory_limit_bytes=2 << 30, roof_file=_low_roofs(d / "roofs.json"))
    ev = CpuEvaluator(Goal.load(d / "goal.toml"), settings=settings)
    yield ev
    ev.close()


@pytest.mark.slow
def test_an_honest_kernel_with_its_own_threads_is_not_refused_on_a_loaded_machine(add12, cpu_hog):
    r = add12.evaluate(Candidate(config={"VARIANT": 0}, key="honest", agent="explorer"))
    assert r.ok, (r.reason, r.detail)
    cores = os.cpu_count() or 1
    # the roof of the threads it really runs (all cores: it starts its own), measured again
    # beside it; one fraction of the hardware, named by that roof
    label = r.resources["roof"]
    assert label.startswith("DRAM roof") and f"at {cores} thread" in label, label
    assert "measured again beside the candidate" in label, label
    assert 0 < r.metrics["fraction_of_roof"] <= 1.1, r.metrics
    assert r.metrics["roof_gbs"] > 0.01  # raised from the cached 0.001 GB/s
    assert "fraction_of_copy_bandwidth" not in r.metrics
    assert [s.name for s in r.stages].count("roof") == 1  # one fresh measurement sufficed


@pytest.mark.slow
def test_a_kernel_that_skips_work_is_still_refused_beside_a_fresh_roof(add12):
    r = add12.evaluate(Candidate(config={"VARIANT": 0}, key="skips", agent="llm",
                                source=SKIPS_WORK_C))
    assert not r.ok and r.reason == SUSPECT, (r.reason, r.detail)
    assert "faster than the hardware allows" in r.detail, r.detail
    # both figures travel with the refusal, and the roof it was held to is the fresh one
    assert r.metrics["measured_ms"] * 1.1 < r.metrics["roof_ms"], r.metrics
    assert "at 1 thread, measured again beside the candidate" in r.resources["roof"], r.resources
    names = [s.name for s in r.stages]
    assert names.count("roof") == 2 and "retime" in names and names[-1] == "roof", names
    assert not r.stages[-1].ok


def test_the_roof_counts_the_threads_a_kernel_really_runs(add12):
    cores = os.cpu_count() or 1
    assert add12.guard_threads({"VARIANT": 0}) == cores  # OpenMP, no THREADS parameter
    assert add12.guard_threads({"VARIANT": 0}, "void add12(float *c) { c[0] = 1; }") == 1
    assert add12.guard_threads({"THREADS": 1}, SKIPS_WORK_C) == 1  # no way to start a thread
    assert add12.guard_threads({"THREADS": 1}, HONEST_C) == cores  # its own source decides
