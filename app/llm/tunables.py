"""Tuning parameters an LLM-written kernel declares for the swarm to search.

Division of labour: the model proposes structure, the swarm tunes its numbers. A reply declares
a tunable on a comment line of its kernel (or anywhere in its answer):

    // tunable: BLOCK = [64, 128, 256]

and gives the default in the kernel under `#ifndef BLOCK` / `#define BLOCK 64` / `#endif`. The
harness passes each tried value the way it passes the operator's own parameters (-DBLOCK=128 for
C, a #define before the source for CUDA), so the kernel reads it as a compile-time constant.

A declaration is validated before anything is searched: an upper-case name that is not one of
the operator's parameters (nor KS_*), 2 to MAX_VALUES distinct integers, used by the kernel
under an #ifndef guard; at most MAX_TUNABLES per kernel. Invalid declarations are dropped with a
reason the next prompt can show.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from app.swarm.source_reads import reads, used_params

__all__ = ["Declared", "declared_tunables", "reads", "used_params"]

MAX_TUNABLES = 3
MAX_VALUES = 8
DECLARATION = re.compile(r"^[ \t]*(?://|/\*|\*|#)?[ \t]*tunable[ \t]*:[ \t]*([A-Za-z_]\w*)[ \t]*=[ \t]*"
                         r"\[([^\]\n]*)\]", re.IGNORECASE | re.MULTILINE)
NAME = re.compile(r"[A-Z][A-Z0-9_]{0,31}")
INSTRUCTIONS = (
    "You may give your kernel new tuning parameters for the swarm to search: read each as a "
    "macro with a default under #ifndef NAME / #define NAME <default> / #endif, and declare its "
    "values on a comment line `// tunable: NAME = [v1, v2, ...]` (upper-case name, 2 to "
    f"{MAX_VALUES} integers, at most {MAX_TUNABLES} parameters). The classical agents then try "
    "the values (passed like the other tuning parameters); you choose the structure, they "
    "choose the numbers.")


@dataclass
class Declared:
    params: dict[str, list[int]] = field(default_factory=dict)  # values in ascending order
    defaults: dict[str, int] = field(default_factory=dict)  # what the kernel runs untuned
    problems: list[str] = field(default_factory=list)


def declared_tunables(text: str, source: str, reserved: set[str] | list[str]) -> Declared:
    """The valid tunables declared in `text` (a reply or a kernel) for `source`, and why any
    declaration was dropped. `reserved` are the operator's own parameter names."""
    out = Declared()
    reserved = set(reserved) | {"THREADS"}
    for m in DECLARATION.finditer(text or ""):
        name, raw = m.group(1), m.group(2)
        problem = _problem(name, raw, source, reserved, out.params)
        if problem:
            out.problems.append(f"tunable {name}: {problem}")
            continue
        values = sorted({int(v) for v in raw.split(",") if v.strip()})
        default = _default(source, name)
        if default is None:
            default = values[0]
        out.params[name] = sorted({*values[:MAX_VALUES - 1], default})
        out.defaults[name] = default
    return out


def _problem(name: str, raw: str, source: str, reserved: set[str],
             taken: dict[str, list[int]]) -> str:
    if not NAME.fullmatch(name) or name.startswith("KS_"):
        return "the name must be upper case (A-Z, 0-9, _), not KS_*"
    if name in reserved:
        return "is already a tuning parameter of the operator"
    if name in taken:
        return "declared twice"
    if len(taken) >= MAX_TUNABLES:
        return f"more than {MAX_TUNABLES} tunables"
    items = [v.strip() for v in raw.split(",") if v.strip()]
    if not all(re.fullmatch(r"-?\d{1,9}", v) for v in items):
        return "values must be integers"
    if not 2 <= len(set(items)) <= MAX_VALUES:
        return f"give 2 to {MAX_VALUES} distinct values"
    if not re.search(rf"^[ \t]*#[ \t]*ifndef[ \t]+{name}\b", source, re.MULTILINE):
        return f"the kernel must give its default under #ifndef {name}"
    if not reads(source, name):
        return "the kernel never uses it"
    return ""


def _default(source: str, name: str) -> int | None:
    m = re.search(rf"^[ \t]*#[ \t]*define[ \t]+{name}[ \t]+\(?(-?\d+)\)?[ \t]*$", source, re.MULTILINE)
    return int(m.group(1)) if m else None
