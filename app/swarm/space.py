"""Search spaces: named parameters with value lists and safely parsed restrictions.

A space is never materialised as a product: sampling draws one value per parameter and rejects
configurations that break a restriction (or, for recorded spaces, that are not in the record).
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import operator
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

Config = dict[str, Any]


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


def config_key(config: Mapping[str, Any], extra: Mapping[str, Any] | None = None) -> str:
    """Canonical candidate key: a short hash of what actually runs.

    Parameter order does not matter; for compiled backends `extra` carries the final source,
    compile options, target arch and launch configuration.
    """
    payload = {"params": {k: config[k] for k in sorted(config)}}
    if extra:
        payload["extra"] = {k: extra[k] for k in sorted(extra)}
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


@dataclass
class SearchSpace:
    """Parameters (ordered) with their value lists, plus restrictions.

    `allowed` optionally holds the tuples of values that exist (a recorded space): everything
    else counts as restricted.
    """

    params: dict[str, list[Any]]
    restrictions: list[str] = field(default_factory=list)
    allowed: frozenset[tuple] | None = None
    _predicates: list[Callable[[Mapping[str, Any]], bool]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if not self.params:
            raise ValueError("search space has no parameters")
        for name, values in self.params.items():
            if not isinstance(values, (list, tuple)) or len(values) == 0:
                raise ValueError(f"parameter {name!r} needs a non-empty list of values")
        self.params = {k: list(v) for k, v in self.params.items()}
        self._predicates = [compile_restriction(r, self.params) for r in self.restrictions]
        self._allowed_list: list[tuple] | None = sorted(self.allowed, key=repr) if self.allowed else None
        # Membership per parameter as sets where the values allow it (agents call is_valid
        # hundreds of thousands of times per run).
        self._value_sets: list[set | list] = []
        for values in self.params.values():
            try:
                self._value_sets.append(set(values))
            except TypeError:  # unhashable values: fall back to the list
                self._value_sets.append(values)
        self._keys: dict[tuple, str] = {}
        self.free_names = [n for n, v in self.params.items() if len(v) > 1]

    @property
    def names(self) -> list[str]:
        return list(self.params)

    @property
    def cardinality(self) -> int:
        """Size of the full product (before restrictions)."""
        return math.prod(len(v) for v in self.params.values())

    def as_tuple(self, config: Mapping[str, Any]) -> tuple:
        return tuple(config[n] for n in self.params)

    def as_config(self, values: Iterable[Any]) -> Config:
        return dict(zip(self.params, values))

    def key(self, config: Mapping[str, Any]) -> str:
        """config_key(config), memoised per value tuple (keys are hashed JSON: not cheap)."""
        try:
            values = self.as_tuple(config)
            hash(values)
        except (KeyError, TypeError):
            return config_key(config)
        if len(config) != len(self.params):
            return config_key(config)
        key = self._keys.get(values)
        if key is None:
            if len(self._keys) > 1_000_000:  # bound the memo on huge unrecorded spaces
                self._keys.clear()
            key = self._keys[values] = config_key(config)
        return key

    def is_valid(self, config: Mapping[str, Any]) -> bool:
        if len(config) != len(self.params):
            return False
        try:
            values = self.as_tuple(config)
        except KeyError:
            return False
        for value, allowed_values in zip(values, self._value_sets):
            try:
                if value not in allowed_values:
                    return False
            except TypeError:  # an unhashable value is in no set of hashable ones
                return False
        if self.allowed is not None and values not in self.allowed:
            return False
        return all(p(config) for p in self._predicates)

    def sample(self, rng: random.Random, max_tries: int = 10_000) -> Config | None:
        """One valid configuration drawn uniformly per parameter (rejection sampling)."""
        if self._allowed_list is not None and len(self._allowed_list) * 50 < self.cardinality:
            # Sparse recorded spaces: draw from the record directly, rejection would rarely hit.
            for _ in range(max_tries):
                cfg = self.as_config(rng.choice(self._allowed_list))
                if all(p(cfg) for p in self._predicates):
                    return cfg
            return None
        for _ in range(max_tries):
            cfg = {n: rng.choice(v) for n, v in self.params.items()}
            if self.is_valid(cfg):
                return cfg
        return None

    def neighbours(self, config: Mapping[str, Any], radius: int = 1) -> list[Config]:
        """Valid configurations that differ in one parameter by at most `radius` positions
        in that parameter's value list (adjacent values: the usual tuning neighbourhood)."""
        out: list[Config] = []
        for name, values in self.params.items():
            try:
                i = values.index(config[name])
            except ValueError:
                continue
            for j in range(max(0, i - radius), min(len(values), i + radius + 1)):
                if j == i:
                    continue
                cand = dict(config)
                cand[name] = values[j]
                if self.is_valid(cand):
                    out.append(cand)
        return out

    def hamming_neighbours(self, config: Mapping[str, Any]) -> list[Config]:
        """Valid configurations that differ in exactly one parameter, any value."""
        out: list[Config] = []
        for name, values in self.params.items():
            for v in values:
                if v == config[name]:
                    continue
                cand = dict(config)
                cand[name] = v
                if self.is_valid(cand):
                    out.append(cand)
        return out

    def index_vector(self, config: Mapping[str, Any]) -> list[int]:
        """Each parameter's position in its value list (for distance and models)."""
        return [self.params[n].index(config[n]) for n in self.params]
