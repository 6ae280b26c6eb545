"""The agent chart's pale bars are each agent's own colour (after looking at the
1366x768 screenshots: the model's mauve dots had a pink bar), and the adversary's colour does
not change with its case count."""

from __future__ import annotations

import pyqtgraph as pg

from app.core.types import Evaluation
from app.ui.buffers import RunData
from app.ui.live_plots import AgentChart
from app.ui.theme import agent_color, current_plot_theme


def _data(cases: int) -> RunData:
    data = RunData()
    rows = [(i, Evaluation(key=f"k{i}", config={}, ok=True, value=10.0 - i, agent=a), 0.0)
            for i, a in enumerate(["model", "evolution", "explorer", "local"])]
    data.add(rows)
    data.time_shares["adversary"] = (8.0, cases)
    return data


def _pale_rgb(chart: AgentChart) -> list[tuple[int, int, int]]:
    return [pg.mkBrush(b).color().getRgb()[:3] for b in chart._evals.opts["brushes"]]


def test_pale_bars_keep_each_agents_hue(qtbot):
    chart = AgentChart()
    qtbot.addWidget(chart)
    chart.draw(_data(0), current_plot_theme())
    names = ["model", "evolution", "explorer", "local"]
    for name, rgb, brush in zip(names, _pale_rgb(chart), chart._evals.opts["brushes"]):
        assert rgb == pg.mkColor(agent_color(name)).getRgb()[:3], name
        assert pg.mkBrush(brush).color().alphaF() < 1.0  # paler than the solid bar


def test_adversary_colour_ignores_its_case_count(qtbot):
    chart = AgentChart()
    qtbot.addWidget(chart)
    chart.draw(_data(0), current_plot_theme())
    before = _pale_rgb(chart)[-1]
    chart.draw(_data(1), current_plot_theme())  # 'adversary (1 case)': another spare before
    assert _pale_rgb(chart)[-1] == before == pg.mkColor(agent_color("adversary")).getRgb()[:3]
