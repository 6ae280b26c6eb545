"""The adversary: searches for inputs that break the current best kernels.

It never proposes kernels. Each round it takes a target (the run's best), draws a batch of
inputs and has the evaluator run the target on them (`probe`: inside the backend's sandboxed
worker, untimed; the adversary only chooses inputs). An input is a validation case: a shape
within the goal's range (small, prime, the goal's own), one of the operator's distributions,
a seed, and craft steps (app.gpu.probe: magnitudes, [0, 1), sorted runs, constant or repeated
rows, special values placed by seed). Each is scored by the target's worst error relative to
its tolerance; the batch mixes fresh inputs, mutations of the highest-scoring ones so far (a
hill climb toward the tolerance's edge) and mutations of cases that broke kernels before.

A failing input is shrunk before it is kept: smaller dimensions, fewer craft steps, a lower
special-value density, the plain distribution, as long as it still fails.

Why not Hypothesis: its shrinker drives the test function one example at a time, while each
call here is a round trip to a sandboxed worker (~0.1 s); the adversary batches a round's
inputs into one call, bounds its work by the run's time share rather than by an example count,
and shrinks along what makes a case small for a kernel (elements, steps, density).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

Case = dict[str, Any]
Probe = Callable[[list[Case]], list[dict[str, Any]]]

BATCH = 6  # inputs per probe request
POPULATION = 8  # highest-scoring inputs kept for the hill climb
SHRINK_ROUNDS = 6  # probe requests one shrink may use
SHRINK_BATCH = 8
MAX_ELEMENTS = 1 << 20  # a fresh shape stays below this many elements (probes stay cheap)
SPECIALS = ("denormal", "zero", "negzero", "large", "one")


def primes_upto(n: int) -> list[int]:
    if n < 2:
        return []
    sieve = bytearray([1]) * (n + 1)
    sieve[0:2] = b"\0\0"
    for i in range(2, int(n ** 0.5) + 1):
        if sieve[i]:
            sieve[i * i::i] = bytearray(len(sieve[i * i::i]))
    return [i for i in range(n + 1) if sieve[i]]


def elements(case: Case) -> int:
    return math.prod(int(d) for d in case["shape"])


def size_of(case: Case) -> tuple:
    """What makes a case small: elements, then craft steps, then special-value density."""
    craft = case.get("craft") or []
    density = sum(float(s.get("density", 0.0)) for s in craft)
    return (elements(case), len(craft), density, case.get("distribution") != "normal")


@dataclass
class Found:
    """A shrunk failing input and what it did to the target."""

    case: Case
    problem: str
    score: float
    probes: int  # probe requests the find and the shrink took
    tried: int  # inputs tried


@dataclass
class AdversaryStats:
    rounds: int = 0
    probes: int = 0  # probe requests
    inputs: int = 0  # inputs tried
    found: int = 0  # cases kept
    rechecks: int = 0  # kept kernels re-verified against a new case
    dethroned: int = 0  # kept kernels a case broke
    seconds: float = 0.0
    best_score: float = 0.0
    history: list[float] = field(default_factory=list)


class Adversary:
    name = "adversary"
    strategy = "inputs that break the best kernels"

    def __init__(self, plan: dict[str, Any], rng: random.Random) -> None:
        self.shapes = [[int(d) for d in s] for s in plan.get("shapes") or []]
        self.dtype = str(plan.get("dtype", "float32"))
        self.distributions = list(plan.get("distributions") or ["normal"])
        self.inputs_vary = bool(plan.get("inputs_vary", True))
        self.rng = rng
        ndim = len(self.shapes[0]) if self.shapes else 0
        self.max_dims = [max(s[i] for s in self.shapes) for i in range(ndim)]
        self.primes = [primes_upto(m) for m in self.max_dims]
        self.population: list[tuple[float, Case]] = []
        self.stats = AdversaryStats()

    @property
    def usable(self) -> bool:
        return bool(self.shapes) and self.inputs_vary

    # ---- drawing inputs -------------------------------------------------------------------
    def _dim(self, axis: int) -> int:
        top = self.max_dims[axis]
        r = self.rng.random()
        if r < 0.45 and self.primes[axis]:
            small = [p for p in self.primes[axis] if p <= 64] or self.primes[axis]
            return self.rng.choice(small if self.rng.random() < 0.7 else self.primes[axis])
        if r < 0.7:
            return self.rng.randint(1, min(top, 8))
        return max(1, min(top, round(math.exp(self.rng.uniform(0.0, math.log(top + 1))))))

    def _shape(self) -> list[int]:
        if self.rng.random() < 0.2:
            return list(self.rng.choice(self.shapes))
        for _ in range(20):
            shape = [self._dim(a) for a in range(len(self.max_dims))]
            if math.prod(shape) <= MAX_ELEMENTS:
                return shape
        return [min(d, 8) for d in self.max_dims]

    def _step(self) -> dict[str, Any]:
        kind = self.rng.choice(("special", "special", "sort", "unit", "scale", "constant_rows",
                                "repeat_rows"))
        if kind == "special":
            return {"op": "special", "value": self.rng.choice(SPECIALS),
                    "density": self.rng.choice((1.0, 0.5, 0.1, 0.01)),
                    "seed": self.rng.randrange(2**31)}
        if kind == "sort":
            return {"op": "sort", "dir": self.rng.choice((1, -1)),
                    "run": self.rng.choice((0, 0, 16, 32))}
        if kind == "scale":
            return {"op": "scale", "exp": self.rng.choice((-30, -20, -8, -3, 2, 4, 8, 20))}
        if kind == "constant_rows":
            return {"op": "constant_rows", "every": self.rng.choice((1, 2, 3))}
        return {"op": kind}

    def fresh(self) -> Case:
        case: Case = {"shape": self._shape(), "distribution": self.rng.choice(self.distributions),
                      "seed": self.rng.randrange(2**31), "dtype": self.dtype}
        steps = [self._step() for _ in range(self.rng.choice((0, 1, 1, 2, 2, 3)))]
        if steps:
            case["craft"] = steps
        return case

    def mutate(self, case: Case) -> Case:
        out: Case = {"shape": list(case["shape"]), "distribution": case.get("distribution", "normal"),
                     "seed": self.rng.randrange(2**31), "dtype": self.dtype}
        craft = [dict(s) for s in case.get("craft") or []]
        move = self.rng.choice(("shape", "shape", "reseed", "add", "drop", "tweak", "dist"))
        if move == "shape" and out["shape"]:
            axis = self.rng.randrange(len(out["shape"]))
            if axis < len(self.max_dims):
                out["shape"][axis] = self._dim(axis)
        elif move == "add" and len(craft) < 4:
            craft.insert(self.rng.randrange(len(craft) + 1), self._step())
        elif move == "drop" and craft:
            craft.pop(self.rng.randrange(len(craft)))
        elif move == "tweak" and craft:
            i = self.rng.randrange(len(craft))
            if craft[i]["op"] == "special":  # the same values, placed elsewhere, more or fewer
                craft[i] = {**craft[i], "density": self.rng.choice((1.0, 0.5, 0.1, 0.01)),
                            "seed": self.rng.randrange(2**31)}
            else:
                craft[i] = self._step()
        elif move == "dist":
            out["distribution"] = self.rng.choice(self.distributions)
        if craft:
            out["craft"] = craft
        return out

    def batch(self, known: Sequence[Case] = ()) -> list[Case]:
        """A round's inputs: climbs from the best scores, mutations of cases that broke
        kernels before, fresh draws."""
        out: list[Case] = []
        top = sorted(self.population, key=lambda p: -p[0])[:3]
        for _, case in top:
            if len(out) < BATCH // 2:
                out.append(self.mutate(case))
        usable = [c for c in known if isinstance(c.get("shape"), list)
                  and len(c["shape"]) == len(self.max_dims)]
        if usable and len(out) < BATCH - 1:
            out.append(self.mutate(self.rng.choice(usable)))
        while len(out) < BATCH:
            out.append(self.fresh())
        return out

    # ---- one round ------------------------------------------------------------------------
    def round(self, probe: Probe, known: Sequence[Case] = ()) -> Found | None:
        """Probe the target once; shrink the first failing input. None: nothing broke."""
        self.stats.rounds += 1
        cases = self.batch(known)
        results = self._probe(probe, cases)
        failing = [(c, r) for c, r in zip(cases, results) if r.get("problem")]
        for case, r in zip(cases, results):
            if r.get("score") is not None and not r.get("problem"):
                self._remember(float(r["score"]), case)
        if not failing:
            return None
        probes0 = self.stats.probes - 1
        if any(r.get("fault") for _, r in failing):  # which input crashed it: one at a time
            failing = self._singly(probe, [c for c, _ in failing])
            if not failing:
                return None
        case, result = min(failing, key=lambda cr: size_of(cr[0]))
        case, result = self.shrink(probe, case, result)
        self.stats.found += 1
        return Found(case=case, problem=str(result.get("problem", "")),
                     score=float(result.get("score") or float("inf")),
                     probes=self.stats.probes - probes0, tried=len(cases))

    def _probe(self, probe: Probe, cases: list[Case]) -> list[dict[str, Any]]:
        self.stats.probes += 1
        self.stats.inputs += len(cases)
        results = probe(cases)
        for r in results:
            s = r.get("score")
            if s is not None and math.isfinite(float(s)):
                self.stats.best_score = max(self.stats.best_score, float(s))
        return results

    def _singly(self, probe: Probe, cases: list[Case]) -> list[tuple[Case, dict[str, Any]]]:
        for case in cases:
            r = self._probe(probe, [case])[0]
            if r.get("problem"):
                return [(case, r)]
        return []

    def _remember(self, score: float, case: Case) -> None:
        self.population.append((score, case))
        self.population.sort(key=lambda p: -p[0])
        del self.population[POPULATION:]

    # ---- shrinking ------------------------------------------------------------------------
    def simpler(self, case: Case) -> list[Case]:
        """Cases one step smaller than `case`, smallest first."""
        out: list[Case] = []

        def variant(**change: Any) -> None:
            c = {**{k: v for k, v in case.items() if k != "craft"}, **change}
            craft = change.get("craft", case.get("craft"))
            c.pop("craft", None)
            if craft:
                c["craft"] = craft
            if c != case and c not in out:
                out.append(c)

        shape = [int(d) for d in case["shape"]]
        for axis, d in enumerate(shape):
            for smaller in {1, 2, d // 2, d - 1, *[p for p in (self.primes[axis] if axis <
                                                               len(self.primes) else [])
                                                  if d // 2 < p < d][:1]}:
                if 1 <= smaller < d:
                    variant(shape=[*shape[:axis], smaller, *shape[axis + 1:]])
        craft = [dict(s) for s in case.get("craft") or []]
        for i in range(len(craft)):
            variant(craft=craft[:i] + craft[i + 1:])
            if craft[i]["op"] == "special" and float(craft[i]["density"]) > 0.01:
                thinner = [*craft[:i], {**craft[i], "density": float(craft[i]["density"]) / 4},
                           *craft[i + 1:]]
                variant(craft=thinner)
        if case.get("distribution") != "normal" and "normal" in self.distributions:
            variant(distribution="normal")
        return sorted(out, key=size_of)

    def shrink(self, probe: Probe, case: Case, result: dict[str, Any]
               ) -> tuple[Case, dict[str, Any]]:
        """Greedy: the smallest simpler case that still fails, until none does."""
        for _ in range(SHRINK_ROUNDS):
            options = self.simpler(case)[:SHRINK_BATCH]
            if not options:
                break
            results = self._probe(probe, options)
            if any(r.get("fault") for r in results):
                found = self._singly(probe, options[:3])
            else:
                found = [(c, r) for c, r in zip(options, results) if r.get("problem")]
            if not found:
                break
            case, result = min(found, key=lambda cr: size_of(cr[0]))
        return case, result
