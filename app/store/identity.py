"""What makes two goals "the same problem" (a goal's key), and which goals are one kernel at other
sizes (a goal's family: the LLM's "similar goals").

A custom kernel ([kernel] table) is identified by what it computes, never by the source being
optimised: the entry, the arguments in call order with their roles, dtypes, shapes (expressions
of the dims), scalar values and per-output tolerances, the dims, whether outputs must be
deterministic, and the reference (the content of the reference module or reference kernel,
comments and layout aside, or the values of the stored expected outputs). An edited kernel is
the same problem; a different kernel never is; where the goal file lives does not matter.

Left out on purpose: the source, tune_params, restrictions, defines and compiler options, the
launch geometry and recorded space (how the kernel is written and searched), and the fills
(normal/uniform/randint ranges, seeds, input files). Fills choose the validation data, not the
function: a kept validation case is a (shape, seed) whose inputs are drawn again from the goal's
current fills, and every kernel from the history is re-verified before it can win, so a changed
fill re-tests the old kernels instead of orphaning their history. The stored expected outputs
(which only fit the inputs they were made from) are in the identity, so a goal whose answer is
fixed data still changes when its data does.

Where a reference file cannot be read (moved, deleted, or a migration that does not know where
the goal lived), the identity falls back to the reference's file name and function, which still
separates different kernels (their entry and arguments differ) but is not the same key as the
readable one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from pathlib import Path
from typing import Any

from app.goal import Goal

# A shape's default dim names (as app.catalog.custom.spec.DEFAULT_DIMS: the store sits below
# the catalog; tests/test_goal_identity.py keeps the two equal).
DEFAULT_DIMS = {1: ["n"], 2: ["nx", "ny"], 3: ["nx", "ny", "nz"]}
_OUTPUT_ROLES = ("output", "inout")
_digests: dict[tuple[str, int, int, str], str] = {}  # (real path, mtime_ns, size, how) -> digest
_digests_lock = threading.Lock()


def goal_key(goal: Goal, *, read_files: bool = True) -> str:
    """The goal's key: same key, same problem. Names, budgets, targets and swarm settings may
    change between runs of the same goal. `read_files=False`: the goal's directory is unknown
    (a stored goal), so a custom kernel's reference named by a relative path is identified by
    its name only."""
    d = goal.to_dict()
    same = {k: d.get(k) for k in ("operator", "backend", "dtype", "shapes", "objective",
                                  "tolerance", "constraints")}
    same["space"] = Path(goal.space).name if goal.space else ""
    if goal.kernel is not None:  # catalog and recorded goals keep the keys they always had
        same["kernel"] = kernel_identity(goal, read_files=read_files)
    return _digest(same)


def goal_family(goal: Goal, *, read_files: bool = True) -> str:
    """Goals of one family are the same kernel or operator on one backend, at any sizes and
    dtype: what the LLM's warm start calls similar goals."""
    if goal.kernel is not None:
        ident = kernel_identity(goal, read_files=read_files, dtype="")
        return f"{goal.backend}/kernel:{_digest(ident)}"
    if goal.operator:
        return f"{goal.backend}/operator:{goal.operator}"
    return f"{goal.backend}/space:{Path(goal.space).name if goal.space else ''}"


def kernel_identity(goal: Goal, *, read_files: bool = True, dtype: str | None = None
                    ) -> dict[str, Any]:
    """What a custom kernel computes (see the module's docstring). `dtype` stands in for the
    goal's dtype where an argument does not name its own ("" leaves it open: the family)."""
    table = goal.kernel
    assert table is not None
    dtype = goal.dtype if dtype is None else dtype
    rank = len(goal.shapes[0]) if goal.shapes and isinstance(goal.shapes[0], list) else 0
    base = Path(goal.source_path).parent if goal.source_path else Path.cwd()
    ident: dict[str, Any] = {
        "entry": table.entry,
        "dims": list(table.dims) or DEFAULT_DIMS.get(rank, []),
        "args": [_arg(raw, dtype) for raw in table.args],
        "deterministic": bool(table.deterministic),
        "reference": _reference(table, base if read_files else None),
    }
    if goal.objective.metric == "throughput":  # the figure being compared is made from these
        ident["flops"], ident["bytes"] = _expr(table.flops), _expr(table.bytes)
    return ident


def _digest(value: Any) -> str:
    blob = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _expr(text: Any) -> str:
    return re.sub(r"\s+", "", str(text))


def _number(v: Any) -> Any:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v


def _arg(raw: Any, dtype: str) -> Any:
    if not isinstance(raw, dict):
        return repr(raw)
    role = raw.get("role", "input")
    out: dict[str, Any] = {"name": raw.get("name"), "role": role,
                           "dtype": raw.get("dtype", dtype)}
    if role == "scalar":
        out["value"] = _expr(raw.get("value", ""))
        return out
    shape = raw.get("shape", [])
    out["shape"] = [_expr(s) for s in (shape if isinstance(shape, list) else [shape])]
    if role in _OUTPUT_ROLES:
        out.update(rtol=_number(raw.get("rtol")), atol=_number(raw.get("atol")),
                   check=raw.get("check", True))
    return out


def _reference(table: Any, base: Path | None) -> dict[str, Any]:
    if table.reference:
        module, _, function = table.reference.rpartition(":")
        return {"kind": "function", "function": function,
                **_content(base, module, _python_text)}
    if table.reference_source:
        return {"kind": "kernel", "entry": table.reference_entry or table.entry,
                **_content(base, table.reference_source, _c_text)}
    if table.expected:
        return {"kind": "expected", **_content(base, table.expected, _arrays)}
    return {"kind": "none"}  # no output is checked: entry and arguments are all there is


def _content(base: Path | None, name: str, how: Any) -> dict[str, Any]:
    """{"content": digest} of a file beside the goal (or at an absolute path), or {"file": its
    name, "unreadable": True}. Without a base only an absolute path is read."""
    path = Path(name).expanduser()
    if not path.is_absolute():
        path = base / path if base is not None else None
    digest = _file_digest(path, how) if path is not None else None
    return {"content": digest} if digest else {"file": Path(name).name, "unreadable": True}


def _file_digest(path: Path, how: Any) -> str | None:
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
        cache_key = (real, st.st_mtime_ns, st.st_size, how.__name__)
        with _digests_lock:
            if cache_key in _digests:
                return _digests[cache_key]
        digest = how(Path(real))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    with _digests_lock:
        _digests[cache_key] = digest
    return digest


def _python_text(path: Path) -> str:
    """A Python reference by its syntax tree: comments and layout do not change what it does."""
    import ast

    text = path.read_text(encoding="utf-8")
    try:
        text = ast.dump(ast.parse(text))
    except SyntaxError:
        pass
    return hashlib.sha256(text.encode()).hexdigest()


def _c_text(path: Path) -> str:
    """A C or CUDA reference without comments, blank space collapsed."""
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.DOTALL)
    return hashlib.sha256(" ".join(text.split()).encode()).hexdigest()


def _arrays(path: Path) -> str:
    """Stored expected outputs by their values (a re-saved .npz has other bytes: zip times)."""
    import numpy as np

    h = hashlib.sha256()
    loaded = np.load(path, allow_pickle=False)
    if isinstance(loaded, np.ndarray):  # a bare .npy
        loaded = {"": loaded}
    with _closing(loaded):
        for name in sorted(loaded):
            a = np.ascontiguousarray(loaded[name])
            h.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
            h.update(a.tobytes())
    return h.hexdigest()


def _closing(obj: Any) -> Any:
    import contextlib

    return obj if hasattr(obj, "__exit__") else contextlib.nullcontext(obj)
