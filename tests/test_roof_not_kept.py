"""A measured roof that cannot be kept (another user's file in a shared place, a read-only
home) is still this run's roof. Before, the OSError of the write turned the roof off for the
whole run, and with it the refusal of figures faster than the hardware (as nobody after a root
run: every CPU figure kept with no roof, 'roof_level' missing)."""

from __future__ import annotations

import logging

from app.gpu.cpu import memory_roof


def test_a_roof_that_cannot_be_stored_is_still_returned(tmp_path, caplog):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the cache directory should be")
    measured = []

    def measure_now():
        measured.append(1)
        return {"DRAM": 12.5}

    with caplog.at_level(logging.WARNING, logger="kernelswarm.roofs"):
        figure, from_cache = memory_roof.cached_figure(
            blocker / "roofs.json", "key", "identity", 3600.0, False, measure_now,
            lambda fig, identity: b"{}", lambda data: data)
    assert figure == {"DRAM": 12.5} and from_cache is False and measured == [1]
    assert "could not be kept" in caplog.text and str(blocker) in caplog.text
