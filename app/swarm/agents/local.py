"""Local search around elites: first-improvement hill climbing over the neighbourhood of the
best configurations the board knows (the global elites and this agent's own), with an
iterated-local-search kick when every elite's neighbourhood has been searched.

Evidence is shared, so whichever agent finds a better configuration, the next proposals
climb from there."""

from __future__ import annotations

import random

from app.swarm.agents.base import Agent, Config
from app.swarm.agents.moves import Picker, mutate, random_free, repair
from app.swarm.blackboard import Blackboard
from app.swarm.space import SearchSpace


class LocalAgent(Agent):
    name = "local"
    strategy = "hill climbing around elites with iterated-local-search kicks"

    def __init__(self, space: SearchSpace, rng: random.Random, minimize: bool = True,
                 n_elites: int = 5) -> None:
        super().__init__(space, rng, minimize)
        self.n_elites = n_elites

    def _centres(self, board: Blackboard) -> list[Config]:
        centres: list[Config] = []
        keys: set[str] = set()
        for e in board.elites(self.n_elites) + board.elites(2, agent=self.name):
            if e.key not in keys:
                keys.add(e.key)
                centres.append(e.config)
        return centres

    def propose(self, board: Blackboard, n: int = 1) -> list[Config]:
        picker = Picker(self.space, board)
        out: list[Config] = []
        centres = self._centres(board)
        for centre in centres:
            # Adjacent values first (the usual tuning neighbourhood), then any single change.
            for moves in (self.space.neighbours(centre), self.space.hamming_neighbours(centre)):
                self.rng.shuffle(moves)
                for cand in moves:
                    if len(out) >= n:
                        return out
                    if picker.is_free(cand):
                        out.append(picker.take(cand))
            if len(out) >= n:
                return out
        while len(out) < n:
            if centres:  # every elite's neighbourhood is searched: kick the best and repair
                target = mutate(self.space, centres[0], self.rng, n_changes=self.rng.randint(2, 3))
                cand = repair(self.space, target, picker.is_free, self.rng)
            else:  # nothing has succeeded yet: start somewhere
                cand = random_free(self.space, picker.is_free, self.rng)
            if cand is None:
                break
            out.append(picker.take(cand))
        return out
