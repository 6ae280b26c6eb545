"""`kernelswarm cases GOAL`: a goal's validation set, listed, exported, or added to from a file.

GOAL is a goal file or a goal key as `show` prints it (a unique prefix will do). The cases are
kept by goal identity (app.store.identity): every run of the goal checks every candidate
against them, warm-started and transferred kernels included.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from app.cli_common import CliError, _open_store, _when
from app.goal import Goal, GoalError

CASE_FIELDS = ("shape", "distribution", "seed", "dtype", "craft")
MAX_DIM = 1 << 31


def add_parser(sub: Any, db: argparse.ArgumentParser) -> None:
    cases = sub.add_parser("cases", parents=[db], help="list, export or add a goal's validation cases",
                           description="A goal's validation set: the inputs that once broke a "
                                       "kernel, kept with the goal and checked on every run.")
    cases.add_argument("goal", metavar="GOAL", help="goal file, or goal key as `show` prints it")
    cases.add_argument("--export", metavar="FILE", help="write the cases as JSON ('-': stdout)")
    cases.add_argument("--add", metavar="FILE",
                       help="add cases from a JSON file: one case, a list, or an export")
    cases.set_defaults(func=cmd_cases)


def resolve_goal(store: Any, text: str) -> tuple[str, str, Goal | None]:
    """(goal key, name, goal) of a goal file or a stored goal's key (or unique prefix)."""
    from app.store import goal_key

    path = Path(text)
    if path.suffix == ".toml" or path.is_file():
        try:
            goal = Goal.load(path)
        except GoalError as exc:
            raise CliError(f"goal file {text!r}: {exc.problem if exc.field in ('file', 'toml') else exc}") from None
        return goal_key(goal), goal.name, goal
    matches = [g for g in store.goals() if g["key"].startswith(text)] if len(text) >= 4 else []
    if len(matches) != 1:
        raise CliError(f"{text!r} is neither a goal file nor " + (
            "a stored goal's key" if not matches else f"one goal's key ({len(matches)} match)"))
    row = matches[0]
    try:
        goal = Goal.from_toml(row["toml"])
    except GoalError:
        goal = None  # listing and exporting still work
    return row["key"], row["name"], goal


def cmd_cases(args: argparse.Namespace) -> int:
    with _open_store(args.db) as store:
        key, name, goal = resolve_goal(store, args.goal)
        if args.add:
            cases = read_cases(args.add, goal)
            ids = store.add_validation_cases(key, cases, f"user file {args.add}")
            print(f"added {len(cases)} case(s) to goal {key[:12]} ({name}): "
                  + ", ".join(str(i) for i in ids))
            return 0
        rows = store.validation_case_rows(key)
    if args.export:
        text = json.dumps({"goal_key": key, "goal_name": name, "cases": rows}, indent=2,
                          sort_keys=True, default=str) + "\n"
        if args.export == "-":
            sys.stdout.write(text)
            return 0
        from app.export import write_atomic

        try:
            write_atomic(args.export, text)
        except OSError as exc:
            raise CliError(f"cannot write {args.export!r}: {exc.strerror or exc}") from None
        print(f"wrote {len(rows)} case(s) of goal {key[:12]} to {args.export}", file=sys.stderr)
        return 0
    print(f"goal {key} ({name}): {len(rows)} validation case(s)")
    if rows:
        print(f"{'id':>5}  {'shape':<16} {'inputs':<36} {'when':<16}  origin")
    for r in rows:
        case = r["case"]
        print(f"{r['id']:>5}  {case.get('shape', '?')!s:<16} {inputs_text(case):<36} "
              f"{_when(r['created_at']):<16}  {r['origin']}")
    return 0


def inputs_text(case: dict[str, Any]) -> str:
    from app.gpu.probe import case_label

    return case_label(case) + (f" seed {case['seed']}" if "seed" in case else "")


# ---- reading a user's file -------------------------------------------------------------------
def read_cases(path: str, goal: Goal | None) -> list[dict[str, Any]]:
    """The cases of a user's file, every one checked before any is stored (CliError: one line
    naming the file, the case and the problem)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CliError(f"cases --add: {path!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cases --add: cannot read {path!r}: {exc}") from None
    except ValueError as exc:
        raise CliError(f"cases --add: {path!r} is not JSON ({exc})") from None
    if isinstance(data, dict) and isinstance(data.get("cases"), list):  # an export
        data = [c.get("case", c) if isinstance(c, dict) else c for c in data["cases"]]
    items = data if isinstance(data, list) else [data]
    if not items:
        raise CliError(f"cases --add: {path!r} holds no case")
    out = []
    for i, item in enumerate(items, 1):
        try:
            out.append(check_case(item, goal))
        except ValueError as exc:
            raise CliError(f"cases --add: {path!r}, case {i}: {exc}") from None
    return out


def check_case(item: Any, goal: Goal | None) -> dict[str, Any]:
    """One case as stored (shape, distribution, seed, dtype, craft), or ValueError."""
    from app.catalog.protocol import DISTRIBUTIONS
    from app.gpu.probe import CraftError, check_craft

    if not isinstance(item, dict):
        raise ValueError("a case is a JSON object with a shape")  # noqa: TRY004 - one line to the user
    unknown = sorted(set(item) - set(CASE_FIELDS) - {"operator", "check", "problem", "origin"})
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)}; a case has {', '.join(CASE_FIELDS)}")
    shape = item.get("shape")
    if not isinstance(shape, list) or not shape or not all(
            isinstance(d, int) and not isinstance(d, bool) and 1 <= d < MAX_DIM for d in shape):
        raise ValueError("shape must be a list of positive integers")
    ndim = len(goal.shapes[0]) if goal is not None and goal.shapes else None
    if ndim is not None and len(shape) != ndim:
        raise ValueError(f"shape {shape} has {len(shape)} dimensions; the goal's have {ndim}")
    distributions = _distributions(goal) or DISTRIBUTIONS
    dist = item.get("distribution", "normal")
    if dist not in distributions:
        raise ValueError(f"distribution {dist!r} is not one of {', '.join(distributions)}")
    seed = item.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63:
        raise ValueError("seed must be a non-negative integer")
    dtype = goal.dtype if goal is not None else item.get("dtype", "float32")
    if item.get("dtype", dtype) != dtype:
        raise ValueError(f"dtype {item['dtype']!r} is not the goal's {dtype!r}")
    case: dict[str, Any] = {"shape": list(shape), "distribution": dist, "seed": seed, "dtype": dtype}
    if item.get("craft"):
        try:
            case["craft"] = check_craft(item["craft"])
        except CraftError as exc:
            raise ValueError(str(exc)) from None
    problem = _shape_problem(goal, shape)
    if problem:
        raise ValueError(problem)
    return case


def _operator(goal: Goal | None) -> Any:
    if goal is None or goal.kernel or not goal.operator:
        return None
    try:
        from app.catalog import get_operator

        return get_operator(goal.backend, goal.operator)
    except (KeyError, ImportError, ValueError):
        return None


def _distributions(goal: Goal | None) -> tuple[str, ...]:
    op = _operator(goal)
    return tuple(op.distributions) if op is not None else ()


def _shape_problem(goal: Goal | None, shape: list[int]) -> str | None:
    op = _operator(goal)
    if op is None:
        return None
    try:
        return op.check_shape(shape, goal.dtype)
    except (TypeError, ValueError) as exc:
        return str(exc)
