"""LLM agents: kernel rewrites from an OpenAI-compatible endpoint, in the same swarm as the
classical agents and judged by the same cascade.

Each agent has a role (memory-access specialist, tiling specialist, fixer of near misses). A
request runs on the agent's small thread pool, so `propose` never waits on the network: it
returns the candidates whose replies are ready and starts new requests up to the agent's
limit (the client's semaphore bounds requests across agents). Only when the rest of the space
is used up does `propose` wait for a reply in flight, so a short run is not ended early.

A candidate keeps the configuration of the kernel it started from (the tuning parameters still
arrive as -D macros) and carries its own source; its key hashes both.

A prompt's inspirations are the best kernels of other structural niches than CURRENT's
(app.llm.niches); the fixer's request is a conversation that continues the failed attempt (its
code as the model's turn, then the measured failure). `tokens_spent` feeds the coordinator's
budget allocation (cost per improvement).
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import logging
import random
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from app.core.space import SearchSpace, config_key
from app.core.types import (
    COMPILE_FAILED,
    RESOURCE_LIMIT,
    RUNTIME_FAILED,
    STATIC_CHECK,
    VERIFY_FAILED,
    Candidate,
    Evaluation,
)
from app.goal import Goal
from app.llm.client import BUDGET, EMPTY, REJECTED, LLMClient, LLMError, prompt_estimate
from app.llm.extract import ExtractionError, extract, final_answer
from app.llm.facts import is_measured_lesson
from app.llm.feedback import ptxas_report, vectorisation_report
from app.llm.guard import warm_start_refusal
from app.llm.lessons import Attempt, LessonBook
from app.llm.memory import AttemptMemory
from app.llm.niches import Structure, niche_elites, pick_inspirations, structure
from app.llm.normal import normalise
from app.llm.prompts import MAX_ELITES, PromptContext, build_messages, build_repair_messages
from app.llm.scrub import home_dirs, scrub
from app.llm.spec import KernelSpec
from app.llm.tunables import Declared, declared_tunables, used_params
from app.llm.usage import UsageLog
from app.swarm.agents.base import Agent
from app.swarm.agents.llm_tuning import StructureTuning
from app.swarm.blackboard import Blackboard

log = logging.getLogger(__name__)

NEAR_MISS_REASONS = {COMPILE_FAILED, VERIFY_FAILED, RESOURCE_LIMIT, STATIC_CHECK, RUNTIME_FAILED}
HARD_FAILURES_TO_STOP = 3  # consecutive rejected requests (bad key, unknown model): stop asking
USED_UP_MEMO_S = 0.25  # how long a "space used up" answer holds
# A reply with no code, or with a kernel the run already evaluated, gains nothing: after the
# first, the agent waits before asking again (doubling, capped), and stops after a streak.
# Without this a model that repeats itself is asked as fast as the endpoint answers.
IDLE_BACKOFF_S = 0.5
IDLE_BACKOFF_MAX_S = 30.0
IDLE_REPLIES_TO_STOP = 12
# Every CROSSOVER_EVERY-th request of a rewriting role combines CURRENT with a good kernel of
# another structural niche (when the archive holds one with its own source).
CROSSOVER_EVERY = 3
# A request refused because other requests in flight hold the budget (their reservations),
# while it would fit on its own: wait for them to settle and ask again (doubling, capped).
BUDGET_WAIT_S = 0.5
BUDGET_WAIT_MAX_S = 30.0


def candidate_key(config: dict[str, Any], source: str) -> str:
    """The key of a candidate that carries its own source (same keying as the backends)."""
    return config_key(config, extra={"source_sha": hashlib.sha256(source.encode()).hexdigest()})


@dataclass
class _Job:
    """What a request was asked to improve: the source edits apply to, its config and parent."""

    base_source: str
    config: dict[str, Any]
    parent_key: str | None
    parent_value: float | None
    parent_p10_ms: float | None = None  # the parent's timing spread: lessons claim a
    parent_p90_ms: float | None = None  # difference only outside it
    parent: Evaluation | None = None  # the kernel of those figures: re-timed when close
    from_failure: bool = False  # a repair: the edits apply to a failed attempt


class LLMAgent(Agent):
    strategy = "rewrites kernel source through an LLM"

    def __init__(self, space: SearchSpace, rng: random.Random, minimize: bool = True, *,
                 role: str, client: LLMClient, spec: KernelSpec, goal: Goal, book: LessonBook,
                 device: str = "", limits: dict[str, Any] | None = None,
                 usage: UsageLog | None = None, warm_start: list[dict[str, Any]] = (),
                 max_in_flight: int = 1, exhausted_wait_s: float | None = None,
                 key_fn: Callable[[dict[str, Any], str], str] = candidate_key) -> None:
        super().__init__(space, rng, minimize)
        self.role = role
        self.name = f"llm-{role}"
        self.strategy = f"LLM rewrites of the kernel source ({role})"
        self.client = client
        self.spec = spec
        self.goal = goal
        self.book = book
        self.device = device
        self.limits = dict(limits or {})
        self.usage = usage
        self.max_in_flight = max(1, max_in_flight)
        self.key_fn = key_fn  # the backend's keying when it has one (hash of what runs)
        self.exhausted_wait_s = (exhausted_wait_s if exhausted_wait_s is not None
                                 else client.settings.timeout_s)
        self._pool = cf.ThreadPoolExecutor(self.max_in_flight, thread_name_prefix=self.name)
        self._futures: list[cf.Future] = []
        self._ready: deque[Candidate] = deque()
        self._warm = list(warm_start)
        self._failures: deque[tuple[str, Evaluation]] = deque(maxlen=8)
        self._extraction_errors: deque[str] = deque(maxlen=3)
        self._near_misses: deque[Evaluation] = deque(maxlen=16)
        self._repaired: set[str] = set()
        self._niches: dict[str, Structure] = {}  # source -> its structural niche
        self._normal: dict[str, str] = {}  # source -> its normal form
        # what this agent tried and what it measured, in the product's words (app.llm.memory)
        self.memory = AttemptMemory(spec.language, minimize, spec.unit)
        self._board: Blackboard | None = None  # the board of the last propose
        self._budget_waits = 0  # consecutive refusals while others held the budget
        self._rewrites = 0  # rewrite requests prepared (every CROSSOVER_EVERY-th: a crossover)
        self._hard_failures = 0
        self._idle_replies = 0  # consecutive replies that brought nothing new
        self._quiet_until = 0.0  # no new request before this (time.monotonic())
        self._used_up_at: tuple[float, bool] = (float("-inf"), False)
        self.stopped_reason = ""
        self.stats = {"requests": 0, "candidates": 0, "no_code": 0, "request_failed": 0,
                      "tunables_declared": 0, "tunables_refused": 0, "tuning_candidates": 0,
                      "tokens": 0}
        self._tokens_lock = threading.Lock()
        self._declared: dict[str, tuple[str, Declared]] = {}  # key -> (source, its tunables)
        self.tunings: list[StructureTuning] = []

    # ---- the Agent interface ---------------------------------------------------------------
    def propose(self, board: Blackboard, n: int = 1) -> list[Candidate]:
        self._board = board  # the fixer asks for a repair as soon as a near miss is observed
        self._queue_warm_start(board)
        deadline = time.monotonic() + self.exhausted_wait_s
        while True:
            self._harvest()
            if not self.stopped_reason:
                self._submit(board)
            if not self._ready:
                self._ready.extend(self._tuning_proposals(board, n))
            if self._ready or not self._futures or not self._space_used_up(board):
                break
            # Nothing else left to evaluate: waiting for a reply costs the run nothing.
            left = deadline - time.monotonic()
            if left <= 0:
                break
            cf.wait(self._futures, timeout=left, return_when=cf.FIRST_COMPLETED)
        out: list[Candidate] = []
        while self._ready and len(out) < n:
            cand = self._ready.popleft()
            if not board.known(cand.key):
                out.append(cand)
                if cand.note != "warm start":
                    self._idle_replies = 0
            elif cand.note != "warm start":
                self._idle_reply("a kernel the run already evaluated")
        return out

    def _idle_reply(self, what: str) -> None:
        """A reply that brought nothing new: back off, and stop after a streak."""
        self._idle_replies += 1
        k = self._idle_replies
        if k >= IDLE_REPLIES_TO_STOP:
            self.stopped_reason = (f"the model answered {k} times in a row with nothing new "
                                   f"(last: {what})")
        elif k >= 2:
            wait = min(IDLE_BACKOFF_MAX_S, IDLE_BACKOFF_S * 2 ** (k - 2))
            self._quiet_until = max(self._quiet_until, time.monotonic() + wait)

    def _tuning_proposals(self, board: Blackboard, n: int) -> list[Candidate]:
        """The classical search of declared tunables: no request, no cost."""
        out: list[Candidate] = []
        for tuning in self.tunings:
            if len(out) >= n:
                break
            out += tuning.propose(board, n - len(out))
        self.stats["tuning_candidates"] += len(out)
        return out

    def ready(self) -> bool:
        """Whether replies already paid for wait to be proposed (a coordinator may serve such
        an agent before its allocator share comes round, so no paid candidate goes
        unevaluated)."""
        self._harvest()
        return bool(self._ready)

    def pending(self) -> bool:
        """True while requests are in flight or replies wait to be proposed."""
        return bool(self._futures or self._ready)

    def tune_when_correct(self, key: str, source: str, declared: Declared) -> None:
        """Search `declared`'s tunables once the evaluation under `key` comes back correct, as
        for a reply that declared them (a revived warm-start kernel's, app.llm.warm)."""
        self._declared[key] = (source, declared)

    def observe(self, evaluation: Evaluation) -> None:
        self.book.observe(evaluation)
        self.memory.observe(evaluation)
        for tuning in self.tunings:
            tuning.observe(evaluation)
        declared = self._declared.pop(evaluation.key, None)
        if declared is not None and evaluation.ok and evaluation.value is not None:
            source, tun = declared
            # the structure is correct: the swarm searches its numbers from here
            self.tunings.append(StructureTuning(
                evaluation, source, tun.params, tun.defaults, self.space,
                random.Random(f"{self.name}:{evaluation.key}"), self.minimize, owner=self.name,
                key_fn=self.key_fn, used=used_params(source, list(self.space.params))))
        if evaluation.ok or evaluation.source is None:
            return
        if evaluation.agent == self.name:
            # The model's idea line stays out of prompts: the outcome (reason, scrubbed detail
            # and log) is what the next request learns from.
            self._failures.append(("", evaluation))
        if evaluation.reason in NEAR_MISS_REASONS:
            self._near_misses.append(evaluation)
            if self.role == "fixer" and self._board is not None and not self.stopped_reason:
                # the repair is asked for now, not when the allocator next picks the fixer
                # (observe runs on the coordinator's thread, as propose does)
                self._submit(self._board)

    def close(self) -> None:
        self.book.flush()
        self._pool.shutdown(wait=False, cancel_futures=True)
        # The run is over: requests in flight are cut (the client is the run's, shared by its
        # LLM agents, all closed together), so the process can exit at once.
        self.client.close()

    # ---- proposals -------------------------------------------------------------------------
    def _queue_warm_start(self, board: Blackboard) -> None:
        """Earlier runs' best kernels go first, before any request is paid for."""
        while self._warm:
            k = self._warm.pop(0)
            refusal = warm_start_refusal(k.get("source"), self.spec, self.goal)
            if refusal:
                log.warning("%s: warm-start kernel of an earlier run dropped: the current source "
                            "policy refuses it (%s)", self.name, refusal)
                continue
            config = k.get("config") or {}
            if not self.space.is_valid(config):
                best = board.best
                config = dict(best.config) if best else self.space.sample(self.rng)
                if config is None:
                    continue
            source = normalise(k["source"])
            key = self.key_fn(config, source)
            self.book.note_attempt(Attempt(key, self.name, "warm start: best kernel of an earlier "
                                           "run", None, None))
            self._ready.append(Candidate(config=config, key=key, agent=self.name,
                                         source=source, note="warm start"))

    def _submit(self, board: Blackboard) -> None:
        if time.monotonic() < self._quiet_until:
            return
        while len(self._futures) < self.max_in_flight:
            prepared = self._prepare(board)
            if prepared is None:
                return
            messages, job = prepared
            self._futures.append(self._pool.submit(self._request, messages, job))

    def _prepare(self, board: Blackboard) -> tuple[list[dict[str, str]], _Job] | None:
        best = board.best
        start = best  # the kernel CURRENT shows: the best, or what a repaired attempt started from
        repair: Evaluation | None = None
        if self.role == "fixer":
            repair = self._pick_near_miss(board)
            if repair is None:
                return None  # nothing to repair yet
            self._repaired.add(repair.key)
            parent = board.get(repair.parent_key) if repair.parent_key else None
            if parent is not None and parent.ok:
                start = parent
        # Model-written sources are shown (and edited) without their comments: a comment is
        # free text that would otherwise ride along into every later prompt.
        current_source = (_code_only(start.source) if start and start.source
                          else self.spec.template)
        inspirations, structures = self._inspirations(board, start)
        elites = [replace(e, source=_code_only(e.source)) if e.source else e
                  for e in inspirations]
        if repair is not None:
            config = dict(repair.config)
        elif best is not None:
            config = dict(best.config)
        else:
            sampled = self.space.sample(self.rng)
            if sampled is None:
                return None
            config = sampled
        crossover = None
        if repair is None:
            self._rewrites += 1
            if self._rewrites % CROSSOVER_EVERY == 0:
                crossover = next((e for e in elites if e.source), None)
        ctx = PromptContext(
            goal=self.goal, spec=self.spec, device=self.device, limits=self.limits,
            current_source=current_source, current=start and _scrubbed(start), elites=elites,
            failures=[(idea, _scrubbed(e)) for idea, e in self._failures
                      if repair is None or e.key != repair.key],
            lessons=[scrub(t) for t in self.book.texts() if is_measured_lesson(t)],
            extraction_errors=[scrub(m) for m in self._extraction_errors],
            config=dict(config), tunables=self._tunables_of(start), structures=structures,
            history=self.memory.lines(), best=best and _scrubbed(best),
            compiler=self._compiler_feedback(current_source, config), crossover=crossover)
        if repair is not None:
            # a conversation: the task, the failed attempt's code as the model's turn, what
            # measuring it showed; the reply's edits apply to the attempt
            attempt = _code_only(repair.source)
            job = _Job(attempt, config, repair.key, best.value if best else None,
                       best.p10_ms if best else None, best.p90_ms if best else None, best,
                       from_failure=True)
            return _without_home(build_repair_messages(ctx, attempt, _scrubbed(repair))), job
        job = _Job(current_source, config, best.key if best else None,
                   best.value if best else None, best.p10_ms if best else None,
                   best.p90_ms if best else None, best)
        return _without_home(build_messages(self.role, ctx)), job

    def _inspirations(self, board: Blackboard, current: Evaluation | None
                      ) -> tuple[list[Evaluation], dict[str, str]]:
        """Elites of structural niches other than CURRENT's (MAP-Elites style), and the
        structure label of each kernel the prompt shows."""
        archive = niche_elites(board.successes(), self._niche, board.sort_key)
        picked = pick_inspirations(
            archive, self._niche(current) if current else None, current and current.key,
            MAX_ELITES, self.rng, board.sort_key, fallback=board.elites(4 * MAX_ELITES),
            identity=self._identity,
            current_identity=self._identity(current) if current else None)
        shown = picked + ([current] if current is not None else [])
        return picked, {e.key: self._niche(e).label for e in shown}

    def _compiler_feedback(self, source: str, config: dict[str, Any]) -> list[str]:
        """What the compiler says about CURRENT as shown (app.llm.feedback; cached)."""
        op = self.spec.operator
        if self.spec.language == "c":
            custom = op.spec if op is not None else None  # a user's kernel: its defines
            defines = {}
            if custom is not None and self.spec.shapes:
                defines = custom.param_defines(list(self.spec.shapes[0]))
            return vectorisation_report(source, {**defines, **config})
        if op is None or not self.spec.shapes:  # a CUDA spec's operator is a CUDA one
            return []
        cc = _compute_capability(self.device)
        if not cc:
            return []
        try:
            rendered = op.render(dict(config), list(self.spec.shapes[0]), self.spec.dtype,
                                 source=source)
            kernels = tuple(op.kernels(self.spec.dtype))
        except (KeyError, TypeError, ValueError):
            return []
        return ptxas_report(rendered, kernels, cc)

    def _identity(self, e: Evaluation) -> str:
        """A kernel's code identity: its normal form (the template's when it has no source)."""
        source = e.source or self.spec.template
        got = self._normal.get(source)
        if got is None:
            got = normalise(source)
            if len(self._normal) < 4096:
                self._normal[source] = got
        return got

    def _niche(self, e: Evaluation) -> Structure:
        """The structural niche of an evaluation's source (the template's when it has none)."""
        source = e.source or ""
        got = self._niches.get(source)
        if got is None:
            got = structure(source or self.spec.template, self.spec.language)
            if len(self._niches) < 4096:  # a run's distinct sources; the bound is a safeguard
                self._niches[source] = got
        return got

    def _tunables_of(self, best: Evaluation | None) -> dict[str, list[int]]:
        """The tunables the best kernel's structure declared (comments are not in its source)."""
        for tuning in self.tunings:
            if best is not None and (best.key == tuning.seed_key or tuning.owns(best.key)):
                return dict(tuning.tunables)
        return {}

    def _pick_near_miss(self, board: Blackboard) -> Evaluation | None:
        for e in reversed(self._near_misses):
            if e.key not in self._repaired and e.source:
                return e
        return None

    def _space_used_up(self, board: Blackboard) -> bool:
        """The coordinator's own last resort is a uniform draw: if draws find nothing new
        either, the run would end as 'exhausted' while our replies are still coming.
        Memoised briefly: the coordinator asks often, and rejection sampling in a tightly
        restricted space is slow enough to starve the threads waiting on replies."""
        now = time.monotonic()
        if now - self._used_up_at[0] < USED_UP_MEMO_S:
            return self._used_up_at[1]
        used_up = True
        for _ in range(64):
            cfg = self.space.sample(self.rng, max_tries=2_000)
            if cfg is None:
                break
            if not board.known(self.space.key(cfg)):
                used_up = False
                break
        self._used_up_at = (time.monotonic(), used_up)
        return used_up

    # ---- requests (pool threads) -----------------------------------------------------------
    def _request(self, messages: list[dict[str, str]], job: _Job) -> Candidate | str:
        """A candidate, or the reason the request gave none (recorded, fed back)."""
        try:
            reply = self.client.complete(messages, agent=self.name)
        except LLMError as exc:
            self._log_usage(exc.records, f"request_failed: {exc.status}")
            if exc.status == BUDGET and self._fits_alone(messages):
                exc.held_by_others = True  # type: ignore[attr-defined]
            raise
        try:
            got = extract(reply.text, job.base_source, self.spec.entry, truncated=reply.truncated)
            # identity is the normal form: a reply that changes only comments or whitespace
            # is the kernel it started from, and is never evaluated again
            raw = got.source  # with its comments: tunables are declared on comment lines
            source = normalise(got.source)
            if source == normalise(job.base_source):
                raise ExtractionError("the reply repeats the current kernel (only comments or "
                                      "whitespace differ)")
            if source == normalise(self.spec.template):
                source = self.spec.template  # the operator's own template: its own identity
            got = replace(got, source=source)
        except ExtractionError as exc:
            self._log_usage(reply.records, f"no_code: {exc}")
            return f"no_code: {exc}"
        key = self.key_fn(job.config, got.source)
        tun = declared_tunables(final_answer(reply.text), raw, set(self.spec.params) | set(job.config))
        self.stats["tunables_refused"] += len(tun.problems)
        if tun.problems:
            self._extraction_errors.append("kernel kept, but " + "; ".join(tun.problems)[:300])
        if tun.params:
            self.stats["tunables_declared"] += len(tun.params)
            self.tune_when_correct(key, got.source, tun)
        self.memory.started(key, job.base_source, job.parent_value, job.from_failure)
        self.book.note_attempt(Attempt(key, self.name, got.idea, job.parent_key, job.parent_value,
                                       job.parent_p10_ms, job.parent_p90_ms, job.parent))
        self._log_usage(reply.records, f"candidate {key}")
        return Candidate(config=dict(job.config), key=key, agent=self.name, source=got.source,
                         parent_key=job.parent_key, note=got.idea)

    def _fits_alone(self, messages: list[dict[str, str]]) -> bool:
        """Whether this request's worst case fits in what is left of the run's budget, so a
        refusal came from other requests' reservations (they settle, usually far below)."""
        s = self.client.settings
        if not self.client.budget_left():
            return False
        t = self.client.totals()
        prompt = prompt_estimate(messages)
        worst = prompt + s.max_tokens
        worst_cost = (prompt * s.price_prompt_per_mtok + s.max_tokens * s.price_completion_per_mtok) / 1e6
        return ((not s.run_token_budget or t["tokens"] + worst <= s.run_token_budget)
                and (not s.run_cost_budget or t["cost"] + worst_cost <= s.run_cost_budget))

    @property
    def tokens_spent(self) -> int:
        """Prompt and completion tokens of every request so far, failed ones included: the
        budget allocator weighs an agent's improvements by what they cost."""
        return self.stats["tokens"]

    def _log_usage(self, records: list, outcome: str) -> None:
        with self._tokens_lock:  # pool threads: one request each
            self.stats["tokens"] += sum(r.prompt_tokens + r.completion_tokens for r in records)
        if self.usage is None:
            return
        for i, rec in enumerate(records):
            try:
                self.usage.record(rec, outcome if i == len(records) - 1 else "retried")
            except Exception:  # accounting must not take a candidate down with it
                log.exception("recording LLM usage failed")

    def _harvest(self) -> None:
        done = [f for f in self._futures if f.done()]
        self._futures = [f for f in self._futures if not f.done()]
        for fut in done:
            self.stats["requests"] += 1
            try:
                result = fut.result()
            except cf.CancelledError:
                continue
            except LLMError as exc:
                self.stats["request_failed"] += 1
                log.warning("%s: LLM request failed: %s", self.name, exc)
                if exc.status == BUDGET and getattr(exc, "held_by_others", False):
                    # another request's reservation, not the budget: ask again later
                    self._budget_waits += 1
                    wait = min(BUDGET_WAIT_MAX_S, BUDGET_WAIT_S * 2 ** (self._budget_waits - 1))
                    self._quiet_until = max(self._quiet_until, time.monotonic() + wait)
                elif exc.status == BUDGET:
                    self.stopped_reason = "the run's LLM budget is spent"
                elif exc.status == EMPTY:
                    # fed back and backed off: asking the same way at once gets the same nothing
                    cap = "length cap" in (exc.message or "")
                    self._extraction_errors.append(
                        "your reply was empty" + (
                            f": it reached the max_tokens limit ({self.client.settings.max_tokens} "
                            "tokens) before any answer; think less, and write the Idea line and "
                            "the code first" if cap else ""))
                    self._idle_reply("an empty reply")
                elif exc.status == REJECTED:
                    self._hard_failures += 1
                    if self._hard_failures >= HARD_FAILURES_TO_STOP:
                        self.stopped_reason = f"the endpoint keeps rejecting requests: {exc.message}"
                continue
            except Exception:
                self.stats["request_failed"] += 1
                log.exception("%s: LLM request crashed", self.name)
                continue
            self._hard_failures = 0
            self._budget_waits = 0
            if isinstance(result, Candidate):
                self.stats["candidates"] += 1
                self._ready.append(result)
            else:
                self.stats["no_code"] += 1
                self._extraction_errors.append(result)
                self._idle_reply("no code")


def _scrubbed(e: Evaluation) -> Evaluation:
    """An evaluation as a prompt may show it: failure texts without the user's machine in
    them (paths, user name, tracebacks); the candidate's own file name is kept."""
    keep = ("candidate.c", "candidate.cu", "kernel.c", "kernel.cu")
    return replace(e, detail=scrub(e.detail, keep_names=keep), log=scrub(e.log, keep_names=keep))


def _without_home(messages: list[dict[str, str]]) -> list[dict[str, str]]:
    """Last line of defence for text the prompt builder added itself: the home directory
    never leaves the machine (kernel code is not otherwise touched: edits must match it)."""
    homes = sorted(home_dirs(), key=len, reverse=True)
    out = []
    for m in messages:
        content = m.get("content", "")
        for home in homes:
            content = content.replace(home, "~")
        out.append({**m, "content": content})
    return out


def _compute_capability(device: str) -> str:
    """'90' from a device summary such as 'NVIDIA H100 (cc 9.0, SMs 132, ...)'."""
    m = re.search(r"\bcc (\d+)\.?(\d)?", device)
    return "".join(g for g in m.groups() if g) if m else ""


def _code_only(source: str) -> str:
    """A kernel source in its normal form: no comments, indentation by brace depth."""
    return normalise(source)
