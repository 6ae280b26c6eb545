"""Local search: iterated local search (ILS) with first-improvement hill climbing.

The agent climbs from a current point through its neighbourhood (adjacent values first, then
two steps away, and around the global best any single-parameter change) and moves as soon as
a neighbour is better. When the current point is a local optimum (its whole neighbourhood is
known), the climb restarts from the best elite on the board whose neighbourhood it has not
exhausted yet, whoever found it (the swarm's shared elite pool: another agent's basin), one
elite per niche (the best of each group one parameter change apart: after a climb, the
next restart is in another basin, not beside the one just exhausted); when
every elite is exhausted it kicks the best configuration (a few random changes, repaired onto
a free valid configuration) and climbs from there. Evidence is shared: when another agent
finds a new global best, the climb restarts from it.
"""

from __future__ import annotations

import random

from app.core.space import SearchSpace
from app.core.types import Evaluation
from app.swarm.agents.base import Agent, Config
from app.swarm.agents.moves import Picker, mutate, random_free, repair, spread_elites, take_free
from app.swarm.blackboard import Blackboard

ELITE_RESTARTS = 10  # how many niches' best configurations a climb may restart from


class LocalAgent(Agent):
    name = "local"
    strategy = "iterated local search: first-improvement hill climbing with kicks"

    def __init__(self, space: SearchSpace, rng: random.Random, minimize: bool = True) -> None:
        super().__init__(space, rng, minimize)
        self.current: Evaluation | None = None  # the climb's centre
        self._mine: set[str] = set()  # keys this agent proposed
        self._kick: str | None = None  # key of the last kick, once evaluated it starts a climb
        self._seen_best: str | None = None
        self._synced = 0
        self._exhausted: set[str] = set()  # centres whose whole neighbourhood is known

    def _better(self, e: Evaluation, than: Evaluation | None) -> bool:
        return e.ok and e.value is not None and (
            than is None or (e.value < than.value if self.minimize else e.value > than.value))

    def _follow(self, board: Blackboard) -> None:
        """Move the climb's centre according to the evidence that arrived since last time."""
        evaluations = board.evaluations
        for e in evaluations[self._synced:]:
            if e.key == self._kick and e.ok and e.value is not None:
                self.current, self._kick = e, None  # a kick lands: climb from there
            elif e.key in self._mine and self._better(e, self.current):
                self.current = e  # first improvement
        self._synced = len(evaluations)
        best = board.best
        if best is not None and best.key != self._seen_best:
            self._seen_best = best.key
            if self._better(best, self.current):
                self.current = best  # someone found better: climb from there

    def _neighbourhood(self, centre: Evaluation) -> list[Config]:
        """Adjacent values first, then two steps away; around the global best also every
        single-parameter change (the most valuable region gets the widest look)."""
        near = self.space.neighbours(centre.config)
        two = [c for c in self.space.neighbours(centre.config, radius=2) if c not in near]
        every = self.space.hamming_neighbours(centre.config) if centre.key == self._seen_best else []
        for moves in (near, two, every):
            self.rng.shuffle(moves)
        return near + two + every

    def _climb(self, centre: Evaluation, picker: Picker, n: int) -> list[Config]:
        out = take_free(self._neighbourhood(centre), picker, n)
        if not out:
            self._exhausted.add(centre.key)
        return out

    def propose(self, board: Blackboard, n: int = 1) -> list[Config]:
        self._follow(board)
        picker = Picker(self.space, board)
        out: list[Config] = []
        if self.current is not None:
            out = self._climb(self.current, picker, n)
        # A local optimum: restart from the best elite not yet climbed around.
        for elite in spread_elites(self.space, board, ELITE_RESTARTS):
            if len(out) >= n:
                break
            if elite.key in self._exhausted:
                continue
            more = self._climb(elite, picker, n - len(out))
            if more:
                self.current = elite
                out += more
        while len(out) < n:
            best = board.best
            if best is not None:  # local optimum: kick the best and repair
                target = mutate(self.space, best.config, self.rng, n_changes=self.rng.randint(2, 3))
                cand = repair(self.space, target, picker.is_free, self.rng)
            else:  # nothing has succeeded yet: start somewhere
                cand = random_free(self.space, picker.is_free, self.rng)
            if cand is None:
                break
            self._kick = self.space.key(cand)
            out.append(picker.take(cand))
        for cand in out:
            self._mine.add(self.space.key(cand))
        return out
