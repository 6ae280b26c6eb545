"""Search spaces: named parameters with value lists and safely parsed restrictions.

A space is never materialised as a product: sampling draws one value per parameter and rejects
configurations that break a restriction (or, for recorded spaces, that are not in the record).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from app.core.restrictions import compile_restriction

Config = dict[str, Any]


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
    # What runs besides the parameters (the kernel source's hash, flags, compiler): part of
    # every key, so an edited kernel's configurations are new candidates, never old results.
    key_extra: dict[str, Any] | None = None
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
            return config_key(config, self.key_extra)
        if len(config) != len(self.params):
            return config_key(config, self.key_extra)
        key = self._keys.get(values)
        if key is None:
            if len(self._keys) > 1_000_000:  # bound the memo on huge unrecorded spaces
                self._keys.clear()
            key = self._keys[values] = config_key(config, self.key_extra)
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
