"""Before a run with LLM agents: the API key goes only where the user said it may.

A goal file's `[llm] base_url` that differs from the user's own endpoint (saved settings or
KERNELSWARM_LLM_*) is shown to the user with both URLs; the run starts only if they confirm, and
the approval is recorded for the engine process (app.llm.settings.approve_endpoint).
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
    if question is None:
        return True, ""
    if confirm(f"{question}\n\nSend your API key to this endpoint for this run?"):
        llm_settings.approve_endpoint(str(goal.llm["base_url"]))
        return True, ""
    return False, f"not started: {question}"
