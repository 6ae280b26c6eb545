"""Evolution: a steady-state genetic algorithm over the board's evidence. Parents are chosen
by tournament among the best correct evaluations (whoever found them), one per niche (no two
parents one parameter change apart, so a basin another agent has climbed does not fill the
whole population), children are made by uniform crossover plus mutation and repaired onto the
nearest free valid configuration. Failed configurations never become parents."""

from __future__ import annotations

import random

from app.core.space import SearchSpace
from app.core.types import Evaluation
from app.swarm.agents.base import Agent, Config
from app.swarm.agents.moves import Picker, free_params, mutate, random_free, repair, spread_elites
from app.swarm.blackboard import Blackboard


class EvolutionAgent(Agent):
    name = "evolution"
    strategy = "tournament selection, uniform crossover and mutation over elites"

    def __init__(self, space: SearchSpace, rng: random.Random, minimize: bool = True,
                 tournament: int = 3, min_parents: int = 4, population: int = 20) -> None:
        super().__init__(space, rng, minimize)
        self.tournament = tournament
        self.population = population
        self.min_parents = min_parents
        self.names = free_params(space)

    def _select(self, pool: list[Evaluation], board: Blackboard) -> Evaluation:
        contenders = self.rng.sample(pool, min(self.tournament, len(pool)))
        return min(contenders, key=board.sort_key)

    def _child(self, a: Config, b: Config) -> Config:
        child = {name: (a[name] if self.rng.random() < 0.5 else b[name]) for name in a}
        # Each gene mutates with probability 1/d, and at least one always does, so a child
        # is never a copy of a parent.
        n_changes = max(1, sum(self.rng.random() < 1.0 / max(1, len(self.names))
                               for _ in self.names))
        return mutate(self.space, child, self.rng, n_changes=n_changes)

    def propose(self, board: Blackboard, n: int = 1) -> list[Config]:
        picker = Picker(self.space, board)
        pool = spread_elites(self.space, board, self.population)  # the best of each niche
        if len(pool) < self.min_parents:  # a board of few niches still breeds from its best
            pool = board.elites(self.population)
        out: list[Config] = []
        while len(out) < n:
            if len(pool) < self.min_parents:
                cand = random_free(self.space, picker.is_free, self.rng)
            else:
                a, b = self._select(pool, board), self._select(pool, board)
                cand = repair(self.space, self._child(a.config, b.config), picker.is_free, self.rng)
            if cand is None:
                break
            out.append(picker.take(cand))
        return out
