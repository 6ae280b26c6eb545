"""The Timing tab's p10, median and p90 labels never print on top of each other, and the axis
says its unit without pyqtgraph's '(x0.001)' scale."""

from __future__ import annotations

import numpy as np
import pytest

from app.core.types import Evaluation
from app.ui.candidate_detail import TimingHistogram
from app.ui.theme import LIGHT


@pytest.mark.parametrize("shape", ["tight", "outliers"])
def test_percentile_labels_do_not_overlap(qtbot, shape):
    plot = TimingHistogram()
    qtbot.addWidget(plot)
    plot.resize(380, 260)  # the Candidate dock's tab at 1366x768
    plot.show()
    qtbot.waitExposed(plot)
    rng = np.random.default_rng(1)
    samples = list(0.0021 + rng.normal(0, 2e-6, 60))  # tight: the three lines nearly meet
    if shape == "outliers":  # the 1366x768 screenshot: a cluster at the left edge, outliers far right
        samples = list(1.6 + rng.normal(0, 0.05, 36)) + [2.1, 2.4, 4.5, 6.7, 7.7]
    ev = Evaluation(key="k", config={}, ok=True, value=0.0021, samples_ms=samples)
    plot.show_samples(ev, LIGHT)
    qtbot.wait(50)
    rects = [line.label.sceneBoundingRect() for line in plot._lines]
    assert len(rects) == 3
    for i in range(3):
        for j in range(i + 1, 3):
            assert not rects[i].intersects(rects[j]), (i, j, rects)
    view = plot.getPlotItem().getViewBox().sceneBoundingRect()
    for rect in rects:  # whole: never cut by the plot's edge
        assert view.contains(rect), (rect, view)
    title = plot.getPlotItem().titleLabel.text
    assert "samples · median" in title and "p10–p90" in title and "e+" not in title
    bottom = plot.getPlotItem().getAxis("bottom")
    assert "x0.001" not in bottom.labelString() and "(ms)" in bottom.labelString()
