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
    known = set(names)
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise RestrictionError(f"restriction {text!r} is not a valid expression: {exc.msg}") from None

    def check(node: ast.AST) -> None:
        if isinstance(node, ast.Expression):
            check(node.body)
        elif isinstance(node, ast.BinOp):
            if type(node.op) not in _BINOPS:
                raise RestrictionError(f"restriction {text!r}: operator {type(node.op).__name__} not allowed")
            check(node.left)
            check(node.right)
        elif isinstance(node, ast.UnaryOp):
            if type(node.op) not in _UNARY:
                raise RestrictionError(f"restriction {text!r}: operator not allowed")
            check(node.operand)
        elif isinstance(node, ast.BoolOp):
            for v in node.values:
                check(v)
        elif isinstance(node, ast.Compare):
            for op in node.ops:
                if type(op) not in _CMPOPS:
                    raise RestrictionError(f"restriction {text!r}: comparison not allowed")
            check(node.left)
            for c in node.comparators:
                check(c)
        elif isinstance(node, ast.IfExp):
            check(node.test)
            check(node.body)
            check(node.orelse)
        elif isinstance(node, ast.Name):
            if node.id not in known and node.id not in ("True", "False"):
                raise RestrictionError(f"restriction {text!r}: unknown parameter {node.id!r}")
        elif isinstance(node, ast.Constant):
            if not isinstance(node.value, (int, float, bool, str)):
                raise RestrictionError(f"restriction {text!r}: constant {node.value!r} not allowed")
        elif isinstance(node, (ast.Tuple, ast.List)):
            for e in node.elts:
                check(e)
        elif isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCS or node.keywords:
                raise RestrictionError(f"restriction {text!r}: only {sorted(_FUNCS)} may be called")
            for a in node.args:
                check(a)
        else:
            raise RestrictionError(f"restriction {text!r}: {type(node).__name__} is not allowed")

    check(tree)

    def ev(node: ast.AST, env: Mapping[str, Any]) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body, env)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            if node.id == "True":
                return True
            if node.id == "False":
                return False
            return env[node.id]
        if isinstance(node, ast.BinOp):
            left, right = ev(node.left, env), ev(node.right, env)
            if isinstance(node.op, ast.Pow) and abs(right) > _MAX_POW:
                raise RestrictionError(f"restriction {text!r}: exponent too large")
            return _BINOPS[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp):
            return _UNARY[type(node.op)](ev(node.operand, env))
        if isinstance(node, ast.BoolOp):
            if isinstance(node.op, ast.And):
                return all(ev(v, env) for v in node.values)
            return any(ev(v, env) for v in node.values)
        if isinstance(node, ast.Compare):
            left = ev(node.left, env)
            for op, comp in zip(node.ops, node.comparators):
                right = ev(comp, env)
                if not _CMPOPS[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, ast.IfExp):
            return ev(node.body, env) if ev(node.test, env) else ev(node.orelse, env)
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(ev(e, env) for e in node.elts)
        if isinstance(node, ast.Call):
            return _FUNCS[node.func.id](*(ev(a, env) for a in node.args))  # type: ignore[union-attr]
        raise RestrictionError(f"restriction {text!r}: cannot evaluate {type(node).__name__}")

    def predicate(config: Mapping[str, Any]) -> bool:
        try:
            return bool(ev(tree, config))
        except ZeroDivisionError:
            return False

    return predicate
