"""LLM kernels keep their identity across runs: an earlier run's kernel comes back with its
source, its declared tunables and their tuned values, and is tuned again.

The store keeps a tuned LLM kernel as its source (normal form: no comments, so no `// tunable:`
lines) and the configuration it was measured with (the operator's parameters plus its
tunables). A configuration with keys this run's space does not have is not valid here, and
replaying its operator part on another source (the template, or the untuned defaults) would
time a kernel that was never measured. So a warm-start kernel is rebuilt: its tunables are the
configuration keys its source guards with `#ifndef NAME`, their tuned values become the
`#define` defaults (the kernel runs as it was measured, with a valid configuration of this
space), and each is declared again with values around the tuned one for the swarm to search.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from app.llm.tunables import MAX_VALUES, Declared, declared_tunables

if TYPE_CHECKING:
    from app.llm.agent import LLMAgent

GUARDED_DEFAULT = re.compile(r"^[ \t]*#[ \t]*ifndef[ \t]+([A-Z][A-Z0-9_]*)[ \t]*\n[ \t]*#[ \t]*define"
                             r"[ \t]+\1[ \t]+\(?(-?\d+)\)?[ \t]*$", re.MULTILINE)


def revive(kernel: dict[str, Any], params: list[str] | set[str]) -> dict[str, Any]:
    """The warm-start form of a stored kernel ({"source", "config", ...}): config limited to
    the operator's `params`, tuned values baked into the defaults, `// tunable:` declarations
    put back, and "tunables" / "tuned" naming them (empty when it declared none)."""
    source = str(kernel.get("source") or "")
    config = dict(kernel.get("config") or {})
    params = set(params)
    tuned: dict[str, int] = {}
    # its tunables: the macros it guards with a default that are not the operator's; tuned
    # when the configuration it was measured with sets them, else at their defaults
    for name, default in GUARDED_DEFAULT.findall(source):
        if name in params or name.startswith("KS_"):
            continue
        value = config.get(name, int(default))
        if isinstance(value, int) and not isinstance(value, bool):
            tuned[name] = value
    if not tuned:
        return {**kernel, "tunables": {}, "tuned": {}}
    declarations = []
    for name, value in sorted(tuned.items()):
        source, default = _bake(source, name, value)
        values = sorted(_around(value) | ({default} if default is not None else set()))
        declarations.append(f"// tunable: {name} = [{', '.join(map(str, values[:MAX_VALUES]))}]")
    source = "\n".join(declarations) + "\n" + source
    declared = declared_tunables(source, source, params)
    return {**kernel, "source": source,
            "config": {k: v for k, v in config.items() if k in params},
            "tunables": declared.params, "tuned": {k: tuned[k] for k in declared.params}}


def declared_of(kernel: dict[str, Any], params: list[str] | set[str]) -> Declared | None:
    """The tunables a revived kernel declares, validated as a reply's would be (None: none)."""
    if not kernel.get("tunables"):
        return None
    d = declared_tunables(kernel["source"], kernel["source"], set(params))
    return d if d.params else None


def _bake(source: str, name: str, value: int) -> tuple[str, int | None]:
    """`source` with `#define NAME value` as its default; and the default it had."""
    rx = re.compile(rf"^([ \t]*#[ \t]*define[ \t]+{re.escape(name)}[ \t]+)\(?(-?\d+)\)?[ \t]*$",
                    re.MULTILINE)
    m = rx.search(source)
    if m is None:
        return source, None
    return source[:m.start()] + f"{m.group(1)}{value}" + source[m.end():], int(m.group(2))


def _around(value: int) -> set[int]:
    """Values to search around a tuned one: halving and doubling (steps of one near zero)."""
    if value >= 2:
        return {max(1, value // 2), value, value * 2}
    if value == 0:
        return {0, 1}  # a switch: off and on
    return {value - 1, value, value + 1} if value < 0 else {1, 2, 4}


def retune_warm_start(agent: LLMAgent, kernels: list[dict[str, Any]], params: list[str],
                      key_fn: Any) -> int:
    """Let `agent` tune each revived kernel's tunables again once its warm-start evaluation
    comes back correct, as it does for a reply that declared them; returns how many.

    The agent queues a warm-start kernel under key_fn(config, normalise(source)) (its config is
    valid in this space after `revive`)."""
    from app.llm.normal import normalise

    n = 0
    for kernel in kernels:
        d = declared_of(kernel, params)
        if d is None:
            continue
        source = normalise(kernel["source"])
        agent.tune_when_correct(key_fn(dict(kernel["config"]), source), source, d)
        n += 1
    return n
