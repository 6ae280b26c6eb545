"""Which tuning parameters a kernel source actually reads.

A parameter credited with a kernel's time must be one the kernel reads: an LLM kernel that never
mentions EXP_IMPL runs the same whatever EXP_IMPL is set to, so its time says nothing about
EXP_IMPL. A read is any mention outside comments and the parameter's own default guard
(`#ifndef NAME` / `#define NAME ...`): in code, in `#pragma unroll NAME`, in `#if NAME > 1`, or
in another macro's definition, as the catalog's own templates use them.
"""

from __future__ import annotations

import re

COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)


def reads(source: str | None, name: str) -> bool:
    """Whether `source` reads `name`; a kernel without a source of its own (None: the operator's
    template) reads every parameter of the operator."""
    if source is None:
        return True
    body = COMMENT.sub(" ", source)
    n = re.escape(name)
    body = re.sub(rf"^[ \t]*#[ \t]*(?:ifndef|ifdef|undef)[ \t]+{n}\b.*$|^[ \t]*#[ \t]*define[ \t]+"
                  rf"{n}\b.*$", "", body, flags=re.MULTILINE)
    return re.search(rf"\b{n}\b", body) is not None


def used_params(source: str | None, names: list[str] | set[str]) -> set[str]:
    """The parameters among `names` that `source` reads."""
    return {n for n in names if reads(source, n)}
