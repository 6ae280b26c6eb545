"""A goal with a [kernel] table as a short TOML file: only what differs from the defaults, lists
on one line and each argument as one inline table (what import-kt and the GUI page write)."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from app.goal import Goal

_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def value_text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return ("inf" if v > 0 else "-inf") if math.isinf(v) else "nan" if math.isnan(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(value_text(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{key_text(k)} = {value_text(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def key_text(k: str) -> str:
    return k if _BARE.match(k) else json.dumps(k)


def goal_text(goal: Goal, header: str = "") -> str:
    data, default = goal.to_dict(), Goal().to_dict()
    kernel = data.pop("kernel", None)
    lines = [header.rstrip("\n")] if header else []
    tables = []
    for k, v in data.items():
        if isinstance(v, dict):
            changed = {sk: sv for sk, sv in v.items() if default.get(k, {}).get(sk) != sv}
            if changed:
                tables.append((k, changed))
        elif k in ("name", "backend") or default.get(k) != v:
            lines.append(f"{key_text(k)} = {value_text(v)}")
    for k, v in tables:
        lines += ["", f"[{k}]"] + [f"{key_text(sk)} = {value_text(sv)}" for sk, sv in v.items()]
    if kernel:
        lines += ["", "[kernel]"]
        args = kernel.pop("args", [])
        lines += [f"{key_text(k)} = {value_text(v)}" for k, v in kernel.items()]
        if args:
            lines.append("args = [")
            lines += [f"  {value_text(a)}," for a in args]
            lines.append("]")
    return "\n".join(lines) + "\n"
