"""The CPU's per-level memory roofs: levels read from sysfs, the right level for a working set,
and a real measurement with the system compiler."""

from __future__ import annotations

import shutil

import pytest

from app.gpu.cpu import memory_roof
from app.gpu.cpu.memory_roof import CacheLevel, Roofs


def _fake_sysfs(root, caches):
    for i, (level, kind, size, shared) in enumerate(caches):
        d = root / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
        (d / "shared_cpu_list").write_text(f"{shared}\n")
    return root


def test_levels_come_from_sysfs_without_instruction_caches(tmp_path):
    sysfs = _fake_sysfs(tmp_path, [(1, "Data", "48K", "0"), (1, "Instruction", "32K", "0"),
                                   (2, "Unified", "2048K", "0"), (3, "Unified", "32M", "0-7")])
    levels = memory_roof.cache_levels(sysfs)
    assert [(lv.name, lv.size_bytes, lv.shared_by) for lv in levels] == [
        ("L1", 48 * 1024, 1), ("L2", 2 * 2**20, 1), ("L3", 32 * 2**20, 8), ("DRAM", 0, levels[-1].shared_by)]


LEVELS = [CacheLevel("L1", 32 * 1024, 1), CacheLevel("L2", 1 * 2**20, 1),
          CacheLevel("L3", 16 * 2**20, 8), CacheLevel("DRAM", 0, 8)]


def test_a_working_set_gets_the_roof_of_the_level_that_holds_it():
    roofs = Roofs(LEVELS, threads=8, one_thread={"L1": 100, "L2": 60, "L3": 30, "DRAM": 10},
                  all_threads={"L1": 700, "L2": 400, "L3": 150, "DRAM": 40})
    assert roofs.roof_for(20_000, 1) == ("L1", 100)
    assert roofs.roof_for(200_000, 1) == ("L2", 60)
    assert roofs.level_for(200_000, 8).name == "L1" or roofs.level_for(200_000, 8).name == "L2"
    assert roofs.roof_for(8 * 2**20, 1) == ("L3", 30)
    assert roofs.roof_for(64 * 2**20, 1) == ("DRAM", 10)
    assert roofs.roof_for(64 * 2**20, 8) == ("DRAM", 40)
    # between one thread and all: scaled, never above what all threads reached
    assert roofs.bandwidth("DRAM", 2) == 20 and roofs.bandwidth("DRAM", 6) == 40


def test_noise_cannot_make_a_bigger_level_faster():
    rates = memory_roof._monotone({"L1": 50, "L2": 70, "L3": 20, "DRAM": 25}, LEVELS)
    assert rates == {"L1": 70, "L2": 70, "L3": 25, "DRAM": 25}


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_measured_roofs_rank_the_hierarchy(tmp_path):
    roofs, from_cache = memory_roof.cached("cc", "test-cc", tmp_path / "roofs.json")
    assert not from_cache
    measured = roofs.measured_one_thread
    assert set(measured) == {lv.name for lv in roofs.levels} and all(v > 0 for v in measured.values())
    # L1 is several times faster than DRAM on any machine this runs on
    assert measured["L1"] > 2 * measured["DRAM"], measured
    again, from_cache = memory_roof.cached("cc", "test-cc", tmp_path / "roofs.json")
    assert from_cache and again.one_thread == roofs.one_thread
    _, from_cache = memory_roof.cached("cc", "another compiler", tmp_path / "roofs.json")
    assert not from_cache
