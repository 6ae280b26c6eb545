"""The safe restriction parser: Kernel Tuner style expressions ("block_size_x*block_size_y<=1024")
become predicates without eval: parsed with `ast` and walked by a small interpreter that knows
arithmetic, comparisons, boolean logic, a few math functions and the parameter names.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Iterable, Mapping
from typing import Any


class RestrictionError(ValueError):
    """A restriction expression is malformed or uses something that is not allowed."""


_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
}
_CMPOPS: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b,
    ast.NotIn: lambda a, b: a not in b,
}
_UNARY: dict[type, Callable[[Any], Any]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Not: operator.not_,
    ast.Invert: operator.invert,
}
_FUNCS: dict[str, Callable[..., Any]] = {
    "min": min, "max": max, "abs": abs, "int": int, "float": float, "round": round,
    "ceil": math.ceil, "floor": math.floor, "log2": math.log2, "sqrt": math.sqrt,
}
_MAX_POW = 64  # keeps `2**10**10`-style expressions from hanging the parser


def compile_restriction(text: str, names: Iterable[str]) -> Callable[[Mapping[str, Any]], bool]:
    """Turn a Kernel Tuner style restriction ("block_size_x*block_size_y<=1024") into a predicate.

    The text is parsed with `ast` and walked by a small interpreter that knows arithmetic,
    comparisons, boolean logic, a few math functions and the parameter names: no eval, no
    attribute access, no calls to anything else.
    """
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise RestrictionError(f"restriction {text!r} is not a valid expression: {exc.msg}") from None
    _check(tree, text, set(names))

    def predicate(config: Mapping[str, Any]) -> bool:
        try:
            return bool(_evaluate(tree, config, text))
        except ZeroDivisionError:
            return False

    return predicate


def _check(node: ast.AST, text: str, known: set[str]) -> None:
    """Refuse, before anything runs, every node the interpreter does not know."""
    def refuse(why: str) -> RestrictionError:
        return RestrictionError(f"restriction {text!r}: {why}")

    children: list[ast.AST] = []
    if isinstance(node, ast.Expression):
        children = [node.body]
    elif isinstance(node, ast.BinOp):
        if type(node.op) not in _BINOPS:
            raise refuse(f"operator {type(node.op).__name__} not allowed")
        children = [node.left, node.right]
    elif isinstance(node, ast.UnaryOp):
        if type(node.op) not in _UNARY:
            raise refuse("operator not allowed")
        children = [node.operand]
    elif isinstance(node, ast.BoolOp):
        children = list(node.values)
    elif isinstance(node, ast.Compare):
        if any(type(op) not in _CMPOPS for op in node.ops):
            raise refuse("comparison not allowed")
        children = [node.left, *node.comparators]
    elif isinstance(node, ast.IfExp):
        children = [node.test, node.body, node.orelse]
    elif isinstance(node, ast.Name):
        if node.id not in known and node.id not in ("True", "False"):
            raise refuse(f"unknown parameter {node.id!r}")
    elif isinstance(node, ast.Constant):
        if not isinstance(node.value, (int, float, bool, str)):
            raise refuse(f"constant {node.value!r} not allowed")
    elif isinstance(node, (ast.Tuple, ast.List)):
        children = list(node.elts)
    elif isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCS or node.keywords:
            raise refuse(f"only {sorted(_FUNCS)} may be called")
        children = list(node.args)
    else:
        raise refuse(f"{type(node).__name__} is not allowed")
    for child in children:
        _check(child, text, known)


def _evaluate(node: ast.AST, env: Mapping[str, Any], text: str) -> Any:
    """The value of a checked expression for one configuration."""
    def ev(child: ast.AST) -> Any:
        return _evaluate(child, env, text)

    if isinstance(node, ast.Expression):
        return ev(node.body)
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in ("True", "False"):
            return node.id == "True"
        return env[node.id]
    if isinstance(node, ast.BinOp):
        left, right = ev(node.left), ev(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_POW:
            raise RestrictionError(f"restriction {text!r}: exponent too large")
        return _BINOPS[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](ev(node.operand))
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            return all(ev(v) for v in node.values)
        return any(ev(v) for v in node.values)
    if isinstance(node, ast.Compare):
        left = ev(node.left)
        for op, comp in zip(node.ops, node.comparators):
            right = ev(comp)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        return ev(node.body) if ev(node.test) else ev(node.orelse)
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(ev(e) for e in node.elts)
    if isinstance(node, ast.Call):
        return _FUNCS[node.func.id](*(ev(a) for a in node.args))  # type: ignore[union-attr]
    raise RestrictionError(f"restriction {text!r}: cannot evaluate {type(node).__name__}")
