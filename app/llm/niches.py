"""Structural niches of kernel sources, for MAP-Elites style inspiration.

A prompt that shows only the fastest kernels shows variations of one design. Here a kernel
source gets a structural descriptor from app.llm.features (C: vector ISA, threading scheme,
tiling depth, memory staging, fusion; CUDA: tensor-core path, staging, vector loads, warp
shuffles, kernel count), each descriptor is a niche, the best evaluation per niche is its
elite, and inspirations are drawn from niches other than CURRENT's and are distinct, by normal
form, from CURRENT and from each other, so the model sees different designs with their
measured values, never CURRENT again at another tuning.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from app.core.types import Evaluation
from app.llm.features import SHUFFLE_HELPERS, features
from app.llm.features import label as feature_label

__all__ = ["SHUFFLE_HELPERS", "Structure", "niche_elites", "pick_inspirations", "structure"]

# the features that make a niche (loop depth is shown in summaries, not a niche of its own)
NICHE_FEATURES = {"c": ("isa", "threads", "tiles", "staging", "nests"),
                  "cuda": ("tensor", "staging", "vector", "shuffle", "kernels")}


@dataclass(frozen=True)
class Structure:
    """A kernel's niche: the features a kernel engineer would name first."""

    language: str
    features: tuple[tuple[str, object], ...]  # (name, value), in a fixed order

    @property
    def label(self) -> str:
        return feature_label(dict(self.features), self.language)


def structure(source: str, language: str) -> Structure:
    """The niche of a kernel source ("c" or "cuda")."""
    lang = "cuda" if language == "cuda" else "c"
    f = features(source, lang)
    return Structure(lang, tuple((k, f[k]) for k in NICHE_FEATURES[lang]))


def niche_elites(evaluations: Iterable[Evaluation], niche_of: Callable[[Evaluation], Structure],
                 sort_key: Callable[[Evaluation], float]) -> dict[Structure, Evaluation]:
    """The best correct evaluation of each niche (MAP-Elites' archive)."""
    best: dict[Structure, Evaluation] = {}
    for e in evaluations:
        if not e.ok or e.value is None:
            continue
        n = niche_of(e)
        if n not in best or sort_key(e) < sort_key(best[n]):
            best[n] = e
    return best


def pick_inspirations(elites: dict[Structure, Evaluation], current: Structure | None,
                      exclude_key: str | None, k: int, rng: random.Random,
                      sort_key: Callable[[Evaluation], float],
                      fallback: Iterable[Evaluation] = (),
                      identity: Callable[[Evaluation], str] | None = None,
                      current_identity: str | None = None) -> list[Evaluation]:
    """Up to k elites for a prompt, each from another niche than CURRENT's: drawn at random
    among those niches (not only the fastest), best first in the list. When there are fewer
    such niches, the rest come from `fallback` (the fastest overall). `identity`: a kernel's
    code identity (its normal form); no pick has CURRENT's, and no two picks share one (the
    same code at another tuning teaches the model nothing: the tunables search covers it)."""
    ident = identity or (lambda e: e.key)
    seen_code = {current_identity} if current_identity is not None else set()

    def fresh(e: Evaluation) -> bool:
        if e.key == exclude_key or ident(e) in seen_code:
            return False
        seen_code.add(ident(e))
        return True

    others = [e for n, e in elites.items() if n != current]
    rng.shuffle(others)
    picked = [e for e in others if fresh(e)][:k]
    seen_code = {ident(e) for e in picked} | (
        {current_identity} if current_identity is not None else set())
    for e in fallback:
        if len(picked) >= k:
            break
        if fresh(e):
            picked.append(e)
    return sorted(picked, key=sort_key)
