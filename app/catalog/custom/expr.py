"""Arithmetic expressions of names ("nx*ny", "ceil(n/block_size_x)"), evaluated without eval:
shapes, scalar values, grid divisors, FLOP and byte counts of a custom kernel."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Iterable, Mapping
from typing import Any

_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
        ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
        ast.Pow: operator.pow}
_FUNCS = {"min": min, "max": max, "abs": abs, "int": int, "float": float, "ceil": math.ceil,
          "floor": math.floor, "log2": math.log2, "sqrt": math.sqrt, "round": round}


class ExprError(ValueError):
    """An expression is malformed or names something unknown."""


def _parse(text: str) -> ast.Expression:
    try:
        return ast.parse(str(text).strip(), mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"{text!r} is not a valid expression: {exc.msg}") from None


def check(text: str, known: Iterable[str]) -> None:
    """ExprError unless `text` is arithmetic on `known` names, numbers and a few functions."""
    known = set(known)
    for node in ast.walk(_parse(text)):
        if isinstance(node, ast.Name):
            if node.id not in known and node.id not in _FUNCS:
                raise ExprError(f"{text!r} uses unknown name {node.id!r}; known: "
                                f"{', '.join(sorted(known)) or 'none'}")
        elif isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCS or node.keywords:
                raise ExprError(f"{text!r}: only {', '.join(sorted(_FUNCS))} may be called")
        elif isinstance(node, ast.Constant):
            if not isinstance(node.value, (int, float)) or isinstance(node.value, bool):
                raise ExprError(f"{text!r}: constant {node.value!r} is not a number")
        elif isinstance(node, ast.BinOp):
            if type(node.op) not in _BIN:
                raise ExprError(f"{text!r}: operator {type(node.op).__name__} is not allowed")
        elif isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, (ast.USub, ast.UAdd)):
                raise ExprError(f"{text!r}: operator {type(node.op).__name__} is not allowed")
        elif not isinstance(node, (ast.Expression, ast.Load, ast.operator, ast.unaryop)):
            raise ExprError(f"{text!r}: {type(node).__name__} is not allowed")


def evaluate(text: str | float, env: Mapping[str, Any]) -> Any:
    """The value of an expression (checked against env's names first)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return text
    check(str(text), env)
    tree = _parse(str(text))

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return env[node.id]
        if isinstance(node, ast.BinOp):
            right = ev(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 64:
                raise ExprError(f"{text!r}: exponent too large")
            return _BIN[type(node.op)](ev(node.left), right)
        if isinstance(node, ast.UnaryOp):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.Call):
            return _FUNCS[node.func.id](*(ev(a) for a in node.args))  # type: ignore[union-attr]
        raise ExprError(f"{text!r}: cannot evaluate {type(node).__name__}")

    return ev(tree)


def as_int(text: str | int, env: Mapping[str, Any]) -> int:
    v = evaluate(text, env)
    if isinstance(v, float):
        if not v.is_integer():
            raise ExprError(f"{text!r} is {v}, not a whole number")
        v = int(v)
    return int(v)
