"""The app and the HTML report colour each agent alike, and the report's spread reads '170 %'
(different colours per agent; '1.7e+02 % spread')."""

from __future__ import annotations

from app.html_report import agent_colour, spread_percent
from app.ui.theme import agent_color


def test_agents_have_one_colour_in_the_app_and_the_report():
    for order, agent in enumerate(("explorer", "local", "evolution", "model", "llm", "adversary",
                                   "llm:tiling", "someone-new")):
        assert agent_color(agent, order) == agent_colour(agent), agent
        assert agent_color(agent, 0) == agent_color(agent, 7)  # the name decides, not the order
    assert agent_colour("explorer") == "#4e79a7"


def test_report_spread_is_a_plain_percentage():
    assert spread_percent(170.4) == "170 %"
    assert spread_percent(3.46) == "3.5 %"
    assert "e+" not in spread_percent(1234.0)
