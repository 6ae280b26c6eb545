"""Measured facts as prompt text: what lessons (and so later prompts) may say.

A lesson text goes into every later prompt of this and similar goals, so it is built only from
what the harness measured or decided (configuration values, speedups, failure reasons and policy
rule names as identifiers), never from anything the model wrote. `is_measured_lesson` tells a
stored text of those forms from anything else (older databases kept the model's idea line in
lesson texts; those are not fed back).
"""

from __future__ import annotations

import re
from typing import Any


def category(text: str) -> str:
    """A failure reason or policy rule name as a bare identifier (never free text)."""
    return text if re.fullmatch(r"[a-z][a-z0-9_]{0,40}", text or "") else ""


def config_text(config: dict[str, Any]) -> str:
    """A configuration as measured facts: parameter names and numbers/identifiers only."""
    parts = []
    for k, v in sorted((config or {}).items()):
        if re.fullmatch(r"\w{1,40}", str(k)) and re.fullmatch(r"[\w.+-]{1,40}", str(v)):
            parts.append(f"{k}={v}")
    return "config " + (" ".join(parts) if parts else "of the template")


# The forms _distil writes (optionally marked as coming from a similar goal); any other text
# from the database is not fed to a prompt.
_FACT_FORMS = (
    re.compile(r"an LLM rewrite \(config [^()]*\) made .* [0-9.]+x faster than the kernel it "
               r"started from on .*"),
    re.compile(r"an LLM rewrite \(config [^()]*\) was correct but not faster \([0-9.]+x\) for "
               r".*"),
    re.compile(r"an LLM rewrite \(config [^()]*\) timed within the measurement spread of the "
               r"kernel it started from for .*"),
    re.compile(r"LLM kernels failed with [a-z][a-z0-9_]*( \(rule [a-z][a-z0-9_]*\))? [0-9]+ "
               r"time\(s\) for .*"),
)


def is_measured_lesson(text: str) -> bool:
    """Whether a stored lesson text is one of the measured-fact forms (no model free text)."""
    body = (text or "").removeprefix("(similar goal) ")
    return "\n" not in body and "'" not in body and any(f.fullmatch(body) for f in _FACT_FORMS)
