"""Structure from the model, numbers from the swarm: a classical agent searches the tunables
an LLM-written kernel declared (app.llm.tunables), with that kernel's source as its template.

One `StructureTuning` per LLM structure that declared tunables and came back correct. Its space
is the operator's parameters plus the declared ones (the operator's restrictions still hold),
its evidence a private blackboard keyed in that space, seeded with the untuned kernel's own
evaluation (its declared defaults). The searcher is the swarm's local search (a neighbourhood
climb fits a handful of small integer lists). What it proposes are ordinary candidates that
carry the LLM source; their agent name joins the LLM agent and the searcher
("llm-memory+local"), so the coordinator credits both for what tuning finds.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from app.core.space import SearchSpace
from app.core.types import Candidate, Evaluation
from app.swarm.agents.local import LocalAgent
from app.swarm.blackboard import Blackboard

MAX_TUNING_EVALS = 24  # per structure: the numbers are worth a few evaluations, not the run


class StructureTuning:
    def __init__(self, seed: Evaluation, source: str, tunables: dict[str, list[int]],
                 defaults: dict[str, int], base: SearchSpace, rng: random.Random, minimize: bool,
                 *, owner: str, key_fn: Callable[[dict[str, Any], str], str],
                 used: set[str] | None = None) -> None:
        self.source = source
        self.tunables = {k: list(v) for k, v in tunables.items()}
        self.seed_key = seed.key
        self.key_fn = key_fn
        self.name = f"{owner}+{LocalAgent.name}"
        # the operator's parameters the kernel still reads are searched too; the others are
        # held at the seed's values (trying them would re-time the same kernel)
        used = set(base.params) if used is None else used
        params = {k: (list(v) if k in used or k not in seed.config else [seed.config[k]])
                  for k, v in base.params.items()}
        params.update(self.tunables)
        self.space = SearchSpace(params, restrictions=list(getattr(base, "restrictions", [])))
        self.board = Blackboard(self.space, minimize=minimize)
        self.searcher = LocalAgent(self.space, rng, minimize)
        self._sub: dict[str, str] = {}  # run key -> key in this space
        self.proposed = 0
        self._used_up = False  # the searcher found nothing free: its space is explored
        start = {**defaults, **seed.config}
        start = {k: start[k] for k in params}  # the declared defaults complete the seed config
        self._record(replace(seed, config=start), self.space.key(start))

    def _record(self, evaluation: Evaluation, sub_key: str) -> None:
        self.board.claim(sub_key)
        self.board.record(replace(evaluation, key=sub_key))

    def done(self) -> bool:
        return self._used_up or self.proposed >= MAX_TUNING_EVALS

    def propose(self, run_board: Blackboard, n: int = 1) -> list[Candidate]:
        out: list[Candidate] = []
        if self.done():
            return out
        for _ in range(4 * n):
            configs = self.searcher.propose(self.board, 1)
            if not configs:
                self._used_up = True
                break
            cfg = configs[0]
            sub_key = self.space.key(cfg)
            self.board.claim(sub_key)
            key = self.key_fn(cfg, self.source)
            if run_board.known(key):
                continue
            self._sub[key] = sub_key
            self.proposed += 1
            tuned = ", ".join(f"{k}={cfg[k]}" for k in self.tunables)
            out.append(Candidate(config=dict(cfg), key=key, agent=self.name, source=self.source,
                                 parent_key=self.seed_key, note=f"tuning the LLM kernel: {tuned}"))
            if len(out) >= n or self.done():
                break
        return out

    def observe(self, evaluation: Evaluation) -> None:
        sub_key = self._sub.get(evaluation.key)
        if sub_key is not None and self.board.get(sub_key) is None:
            self._record(evaluation, sub_key)

    def owns(self, key: str) -> bool:
        return key in self._sub
