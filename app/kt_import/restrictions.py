"""Kernel Tuner restrictions as KernelSwarm expressions: strings pass through; a lambda (or a
one-line function) whose body only indexes its dict argument by constant keys is rewritten
(`lambda p: p["a"] * p["b"] <= 1024` -> `a * b <= 1024`); anything else is refused in one line."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Callable, Iterable
from typing import Any

from app.core.restrictions import RestrictionError, compile_restriction


class NotConvertible(ValueError):
    """A restriction cannot become a safe expression."""


def _candidates(source: str) -> list[ast.AST]:
    source = textwrap.dedent(source)
    try:
        tree: ast.AST = ast.parse(source)
    except SyntaxError:  # a fragment of a longer statement: cut from the first lambda
        start = source.find("lambda")
        tree = None  # type: ignore[assignment]
        for end in range(len(source), start, -1):
            try:
                tree = ast.parse(source[start:end].strip(), mode="eval")
                break
            except SyntaxError:
                continue
        if tree is None:
            return []
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Lambda, ast.FunctionDef))]


def _string_consts(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _code_strings(fn: Callable[..., Any]) -> set[str]:
    return {c for c in fn.__code__.co_consts if isinstance(c, str)}


def _body(node: ast.AST) -> tuple[list[str], ast.expr]:
    if isinstance(node, ast.Lambda):
        return [a.arg for a in node.args.args], node.body
    assert isinstance(node, ast.FunctionDef)
    body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) != 1 or not isinstance(body[0], ast.Return) or body[0].value is None:
        raise NotConvertible(f"function {node.name} is more than one return statement")
    return [a.arg for a in node.args.args], body[0].value


class _Rewrite(ast.NodeTransformer):
    def __init__(self, arg: str) -> None:
        self.arg = arg

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        if isinstance(node.value, ast.Name) and node.value.id == self.arg:
            key = node.slice
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                return ast.copy_location(ast.Name(id=key.value, ctx=ast.Load()), node)
            raise NotConvertible(f"indexes {self.arg} by something other than a constant name")
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == self.arg:
            raise NotConvertible(f"uses {self.arg} other than as {self.arg}[\"name\"]")
        return node


def callable_to_text(fn: Callable[..., Any], names: Iterable[str]) -> str:
    names = list(names)
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        raise NotConvertible("its source code cannot be read") from None
    nodes = _candidates(source)
    if len(nodes) > 1:
        wanted = _code_strings(fn)
        nodes = [n for n in nodes if _string_consts(n) == wanted] or nodes
    if len(nodes) != 1:
        raise NotConvertible("several lambdas share its line; write it as a string")
    args, body = _body(nodes[0])
    if len(args) == 1 and args[0] not in names:  # Kernel Tuner's style: one dict argument
        body = _Rewrite(args[0]).visit(body)
    elif not all(a in names for a in args):
        raise NotConvertible(f"its arguments {', '.join(args)} are not tunable parameters")
    return ast.unparse(body)


def to_expressions(restrictions: Any, names: Iterable[str]) -> list[str]:
    """Kernel Tuner's `restrictions` (a string, a callable, or a list of them) as expressions
    the safe parser accepts; NotConvertible naming the restriction otherwise."""
    names = list(names)
    if restrictions is None:
        return []
    items = restrictions if isinstance(restrictions, (list, tuple)) else [restrictions]
    out = []
    for i, r in enumerate(items):
        if isinstance(r, str):
            text = r
        elif callable(r):
            try:
                text = callable_to_text(r, names)
            except NotConvertible as exc:
                raise NotConvertible(f"restriction {i} (a Python function) cannot be converted: "
                                     f"{exc}; write it as a string such as \"a * b <= 1024\"") from None
        else:
            raise NotConvertible(f"restriction {i} is a {type(r).__name__}, not a string or lambda")
        try:
            compile_restriction(text, names)
        except RestrictionError as exc:
            raise NotConvertible(f"restriction {i}: {exc}") from None
        out.append(text)
    return out
