"""A goal file is shared data and may not spend the user's money: its [llm] table may lower
the user's spending limits, never raise them, change the model or anything else that raises
what a run costs, unless the user confirms (CLI --trust-goal-llm, the window's dialog), like
the endpoint (app.llm.settings.endpoint_needs_confirmation).

The user's own settings are their saved ones overridden by KERNELSWARM_LLM_* variables; each
raise is named in one line: the field, the goal's value and the user's.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

# How each setting bears on spending. "cap": a limit where 0 means no limit at all;
# "lower": smaller spends less; "higher": a larger figure makes the cost cap bind sooner.
SPENDING = {
    "run_token_budget": "cap", "run_cost_budget": "cap",
    "max_tokens": "lower", "max_concurrent": "lower", "max_retries": "lower",
    "price_prompt_per_mtok": "higher", "price_completion_per_mtok": "higher",
}
# reasoning effort: a dearer level makes every reply think (and bill) longer
EFFORT_ORDER = ("minimal", "low", "medium", "high")  # "": the endpoint's default, taken as medium
GUARDED = ("model", "roles", "reasoning_effort", *SPENDING)  # every field a goal may not raise unasked
APPROVED_ENV = "KERNELSWARM_LLM_APPROVED_SPENDING"  # fingerprints; inherited by engine processes


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _effort_rank(value: Any) -> int:
    # unknown values rank dearest; the settings check refuses them with its own message
    v = str(value or "").strip() or "medium"
    return EFFORT_ORDER.index(v) if v in EFFORT_ORDER else len(EFFORT_ORDER)


def raises(goal_llm: dict[str, Any] | None, own: Any) -> list[str]:
    """One line per setting in which the goal's [llm] table would spend more than the user's
    own settings `own` (LLMSettings); empty when it only keeps or lowers them."""
    goal_llm = goal_llm or {}
    found = []
    for name in GUARDED:
        if name not in goal_llm:
            continue
        mine, theirs = getattr(own, name), goal_llm[name]
        if name == "model":
            worse = str(theirs).strip() != str(mine).strip()
            why = "a goal may not change the model"
        elif name == "reasoning_effort":
            worse = _effort_rank(theirs) > _effort_rank(mine)
            why = "a goal may only lower the reasoning effort"
        elif name == "roles":
            worse = isinstance(theirs, list) and not set(map(str, theirs)) <= set(mine)
            why = "a goal may not add LLM agents"
        else:
            g, u = _number(theirs), _number(mine)
            if g is None or u is None:
                continue  # not a number: the settings check refuses it with its own message
            kind = SPENDING[name]
            if kind == "cap":
                worse = u > 0 and (g == 0 or g > u)
                why = "a goal may only lower spending limits" + (" (0 is no limit)" if g == 0 else "")
            elif kind == "lower":
                worse = g > u
                why = "a goal may only lower spending limits"
            else:
                worse = g < u
                why = "a lower price would let the cost cap allow more spending"
        if worse:
            found.append(f"llm.{name}: the goal's {theirs!r} would replace yours ({mine!r}); {why}")
    return found


def fingerprint(goal_llm: dict[str, Any] | None) -> str:
    """What the user approves: exactly these values of the guarded settings."""
    guarded = {k: (goal_llm or {})[k] for k in GUARDED if k in (goal_llm or {})}
    text = json.dumps(guarded, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def approve(goal_llm: dict[str, Any] | None, env: dict[str, str] | None = None) -> None:
    """Record that the user approved the goal's spending settings (CLI --trust-goal-llm, GUI
    confirmation), in this process's environment so an engine process it starts sees it."""
    env = os.environ if env is None else env
    approved = env.get(APPROVED_ENV, "").split()
    mark = fingerprint(goal_llm)
    if mark not in approved:
        env[APPROVED_ENV] = " ".join([*approved, mark])


def approved(goal_llm: dict[str, Any] | None, env: dict[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    return fingerprint(goal_llm) in env.get(APPROVED_ENV, "").split()


def needs_confirmation(goal_llm: dict[str, Any] | None, own: Any,
                       env: dict[str, str] | None = None) -> str | None:
    """The lines to show the user when the goal's [llm] table would raise their spending and
    they have not approved exactly these values; None when not."""
    found = raises(goal_llm, own)
    if not found or approved(goal_llm, env):
        return None
    return "; ".join(found)
