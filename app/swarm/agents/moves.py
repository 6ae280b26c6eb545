"""Moves every agent shares: distances between configurations, mutation, and repair of a
wished-for configuration onto the nearest valid one nobody has evaluated yet.

Configurations are compared through their parameters' positions in the value lists (index
vectors), so ordered parameters (block sizes, tile sizes) have a meaningful distance. Nothing
here materialises the space's product.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from app.core.space import SearchSpace
from app.core.types import Evaluation
from app.swarm.blackboard import Blackboard

Config = dict[str, Any]


def free_params(space: SearchSpace) -> list[str]:
    """Parameters with more than one value (the others never change)."""
    return space.free_names


class Positions:
    """Configurations as normalised position vectors (each parameter's index in its value list
    scaled to [0, 1]), so distances to many configurations are one numpy expression."""

    def __init__(self, space: SearchSpace) -> None:
        self.names = free_params(space)
        self.index = [{v: i for i, v in enumerate(space.params[n])} for n in self.names]
        self.scale = np.array([len(space.params[n]) - 1 for n in self.names], dtype=float)

    def vector(self, config: Mapping[str, Any]) -> np.ndarray:
        return np.array([ix[config[n]] for n, ix in zip(self.names, self.index)],
                        dtype=float) / self.scale

    def matrix(self, configs: Iterable[Mapping[str, Any]]) -> np.ndarray:
        rows = [self.vector(c) for c in configs]
        return np.array(rows) if rows else np.zeros((0, len(self.names)))


def distance(space: SearchSpace, a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    """Index distance normalised per parameter to [0, 1], summed over parameters."""
    d = 0.0
    for name, values in space.params.items():
        if len(values) > 1:
            d += abs(values.index(a[name]) - values.index(b[name])) / (len(values) - 1)
    return d


class Picker:
    """Tracks which configurations are still free to propose in one `propose` call: valid,
    not known to the board, not already picked in this batch."""

    def __init__(self, space: SearchSpace, board: Blackboard) -> None:
        self.space = space
        self.board = board
        self.taken: set[str] = set()

    def is_free(self, config: Mapping[str, Any]) -> bool:
        if not self.space.is_valid(config):  # cheaper than hashing the key: check it first
            return False
        key = self.space.key(config)
        return key not in self.taken and not self.board.known(key)

    def take(self, config: Config) -> Config:
        self.taken.add(self.space.key(config))
        return config


def mutate(space: SearchSpace, config: Mapping[str, Any], rng: random.Random,
           n_changes: int = 1, jump_prob: float = 0.3) -> Config:
    """Change `n_changes` distinct parameters: mostly to an adjacent value (small step in
    an ordered list), sometimes to any value (a jump)."""
    out = dict(config)
    names = free_params(space)
    for name in rng.sample(names, min(n_changes, len(names))):
        values = space.params[name]
        i = values.index(out[name])
        if rng.random() < jump_prob:
            j = rng.choice([k for k in range(len(values)) if k != i])
        else:
            j = i + rng.choice((-1, 1))
            if not 0 <= j < len(values):
                j = i - (j - i)
        out[name] = values[j]
    return out


def single_changes(space: SearchSpace, config: Mapping[str, Any]) -> list[tuple[float, Config]]:
    """Every configuration one parameter away (valid or not), with its distance."""
    out = []
    for name, values in space.params.items():
        i = values.index(config[name])
        for j, v in enumerate(values):
            if j != i:
                cand = dict(config)
                cand[name] = v
                out.append((abs(j - i) / (len(values) - 1), cand))
    return out


def repair(space: SearchSpace, target: Mapping[str, Any], is_free: Callable[[Config], bool],
           rng: random.Random, tries: int = 300) -> Config | None:
    """The free configuration nearest to `target` (which may be invalid or already known).

    Looks at the target itself, then every single-parameter change in order of distance,
    then random multi-parameter perturbations, then random valid samples; ties are broken
    by the rng so the result is deterministic for a seed.
    """
    target = dict(target)
    if is_free(target):
        return target
    ones = single_changes(space, target)
    rng.shuffle(ones)
    ones.sort(key=lambda dc: dc[0])
    for _, cand in ones:
        if is_free(cand):
            return cand
    best: tuple[float, Config] | None = None
    names = free_params(space)
    # No perturbation of two or more parameters can come nearer than the two smallest steps:
    # one that does is the answer, and the remaining tries could only tie.
    steps = sorted(1.0 / (len(space.params[n]) - 1) for n in names)
    nearest_possible = sum(steps[:2]) + 1e-12
    for _ in range(tries):
        cand = mutate(space, target, rng, n_changes=rng.randint(2, max(2, min(4, len(names)))))
        if is_free(cand):
            d = distance(space, target, cand)
            if best is None or d < best[0]:
                best = (d, cand)
                if d <= nearest_possible:
                    break
    if best is not None:
        return best[1]
    return nearest_sample(space, target, is_free, rng)


def nearest_sample(space: SearchSpace, target: Mapping[str, Any], is_free: Callable[[Config], bool],
                   rng: random.Random, pool: int = 64) -> Config | None:
    """Among `pool` random valid samples, the free one nearest to `target`."""
    best: tuple[float, Config] | None = None
    for _ in range(pool):
        cand = space.sample(rng)
        if cand is None:
            return None
        if is_free(cand):
            d = distance(space, target, cand)
            if best is None or d < best[0]:
                best = (d, cand)
    return best[1] if best else None


def random_free(space: SearchSpace, is_free: Callable[[Config], bool], rng: random.Random,
                tries: int = 200) -> Config | None:
    """A random valid configuration that is still free."""
    for _ in range(tries):
        cand = space.sample(rng)
        if cand is None:
            return None
        if is_free(cand):
            return cand
    return None


def take_free(candidates: Iterable[Config], picker: Picker, n: int) -> list[Config]:
    """The first `n` free candidates, marked as taken."""
    out: list[Config] = []
    for cand in candidates:
        if len(out) >= n:
            break
        if picker.is_free(cand):
            out.append(picker.take(cand))
    return out


def spread_elites(space: SearchSpace, board: Blackboard, k: int, radius: int = 1,
                 scan: int = 200) -> list[Evaluation]:
    """Up to k of the board's best correct evaluations, no two within `radius` changed
    parameters of each other: each is the best of its niche (clearing, Petrowski 1996).

    Once a climb has filled one basin, its many near-copies would otherwise be the whole
    elite pool, and every restart and every crossover would start in that basin again: the
    swarm then stays in the first good basin it found while the optimum sits in another."""
    names = free_params(space)
    kept: list[Evaluation] = []
    for e in board.elites(scan):
        if all(sum(e.config[n] != o.config[n] for n in names) > radius for o in kept):
            kept.append(e)
            if len(kept) >= k:
                break
    return kept
