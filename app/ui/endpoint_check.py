"""Before a run with LLM agents: the API key goes only where the user said it may.

A goal file's `[llm] base_url` that differs from the user's own endpoint (saved settings or
KERNELSWARM_LLM_*) is shown to the user with both URLs; the run starts only if they confirm, and
the approval is recorded for the engine process (app.llm.settings.approve_endpoint). A goal
that raises the user's spending (budget, model, ...) is asked about the same way
(app.llm.spending).
"""

from __future__ import annotations

from collections.abc import Callable

from app.goal import Goal
from app.llm import settings as llm_settings


def goal_endpoint_allowed(goal: Goal, confirm: Callable[[str], bool]) -> tuple[bool, str]:
    """(may the run start, why not). `confirm(question)` asks the user."""
    if "llm" not in goal.swarm.agents:
        return True, ""
    try:
        question = llm_settings.endpoint_needs_confirmation(goal.llm,
                                                            llm_settings.user_endpoint_settings())
    except llm_settings.LLMSettingsError as exc:
        return False, f"your LLM settings: {exc}"
    if question is not None:
        if not confirm(f"{question}\n\nSend your API key to this endpoint for this run?"):
            return False, f"not started: {question}"
        llm_settings.approve_endpoint(str(goal.llm["base_url"]))
    return goal_spending_allowed(goal, confirm)


def goal_spending_allowed(goal: Goal, confirm: Callable[[str], bool]) -> tuple[bool, str]:
    """A goal's [llm] table may lower the user's spending limits; a raise (budget, model,
    agents) is shown with both values and the run starts only if the user confirms."""
    from app.llm import spending

    try:
        raised = spending.needs_confirmation(goal.llm, llm_settings.user_endpoint_settings())
    except llm_settings.LLMSettingsError as exc:
        return False, f"your LLM settings: {exc}"
    if raised is None:
        return True, ""
    lines = "\n".join(raised.split("; "))
    if confirm(f"This goal file would spend more than your LLM settings allow:\n{lines}\n\n"
               "Use the goal's settings for this run?"):
        spending.approve(goal.llm)
        return True, ""
    return False, f"not started: {raised}"
