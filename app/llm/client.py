"""A chat-completions client for any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, LM Studio)
through the openai package, hardened for a long unattended run.

- retries with exponential backoff on 429 (honouring Retry-After), 5xx, dropped connections and
  timeouts; other errors (bad key, bad request) fail at once;
- a wall-clock deadline per request and a cap on reply length: an endless reply is cut, not
  waited for (streaming, so the cut happens as the bytes arrive);
- usage (tokens, cost, seconds, outcome) recorded for every attempt, with run totals and a
  token / cost budget that stops further requests once spent;
- at most `max_concurrent` requests in flight, shared by every agent using this client;
- the API key never leaves the openai client: error texts are redacted before they are kept.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import openai

from app.llm.settings import LLMSettings, redact, resolve_api_key

log = logging.getLogger(__name__)

# Outcomes of one attempt (RequestRecord.status).
OK = "ok"
TRUNCATED = "truncated"  # cut at max_tokens / the character cap
RATE_LIMITED = "rate_limited"
SERVER_ERROR = "server_error"
TIMEOUT = "timeout"
CONNECTION = "connection_error"
REJECTED = "rejected"  # 4xx other than 429: bad key, unknown model, bad request
EMPTY = "empty_reply"
BUDGET = "budget_exhausted"

CHARS_PER_TOKEN = 4  # estimate for servers that report no usage
RETRYABLE = {RATE_LIMITED, SERVER_ERROR, TIMEOUT, CONNECTION}


@dataclass
class RequestRecord:
    """One attempt at one request: what it cost and how it ended."""

    agent: str
    model: str
    status: str
    attempt: int
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    seconds: float = 0.0
    finish_reason: str = ""
    usage_estimated: bool = False
    error: str = ""
    at: float = field(default_factory=time.time)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Reply:
    text: str
    finish_reason: str
    records: list[RequestRecord]

    @property
    def truncated(self) -> bool:
        return self.records[-1].status == TRUNCATED if self.records else False


class LLMError(RuntimeError):
    """A request failed for good (after retries where retrying made sense)."""

    def __init__(self, status: str, message: str, records: list[RequestRecord] | None = None) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message
        self.records = records or []


class _Attempt(Exception):
    def __init__(self, status: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


class LLMClient:
    def __init__(self, settings: LLMSettings, *, api_key: str | None = None,
                 on_record: Callable[[RequestRecord], None] | None = None,
                 sleep: Callable[[float], None] = time.sleep, seed: int = 0) -> None:
        self.settings = settings.validate()
        key = api_key if api_key is not None else resolve_api_key(settings)
        if not key:
            raise LLMError(REJECTED, "no API key: set KERNELSWARM_LLM_API_KEY (or OPENAI_API_KEY) "
                           "or store one in the OS keyring; local servers need none")
        self._key = key
        # Our own retries (max_retries=0 below) so every attempt is recorded and budgeted.
        self._openai = openai.OpenAI(base_url=settings.base_url, api_key=key,
                                     timeout=settings.timeout_s, max_retries=0)
        self._on_record = on_record
        self._sleep = sleep
        self._rng = random.Random(seed)
        self._gate = threading.BoundedSemaphore(settings.max_concurrent)
        self._lock = threading.Lock()
        self._records: list[RequestRecord] = []
        self._use_max_completion_tokens = False
        self._stream_usage = True

    def __repr__(self) -> str:  # never show the key
        return f"LLMClient(base_url={self.settings.base_url!r}, model={self.settings.model!r})"

    # ---- accounting ----------------------------------------------------------------------
    def totals(self) -> dict[str, Any]:
        with self._lock:
            recs = list(self._records)
        by_status: dict[str, int] = {}
        for r in recs:
            by_status[r.status] = by_status.get(r.status, 0) + 1
        return {"requests": len(recs),
                "prompt_tokens": sum(r.prompt_tokens for r in recs),
                "completion_tokens": sum(r.completion_tokens for r in recs),
                "tokens": sum(r.prompt_tokens + r.completion_tokens for r in recs),
                "cost": sum(r.cost for r in recs), "by_status": by_status}

    @property
    def records(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._records)

    def budget_left(self) -> bool:
        s = self.settings
        t = self.totals()
        if s.run_token_budget and t["tokens"] >= s.run_token_budget:
            return False
        if s.run_cost_budget and t["cost"] >= s.run_cost_budget:
            return False
        return True

    def _record(self, rec: RequestRecord) -> None:
        rec.error = redact(rec.error, self._key)
        with self._lock:
            self._records.append(rec)
        if self._on_record is not None:
            try:
                self._on_record(rec)
            except Exception:  # recording is not allowed to break a run
                log.exception("recording an LLM request failed")

    def _cost(self, prompt: int, completion: int) -> float:
        s = self.settings
        return (prompt * s.price_prompt_per_mtok + completion * s.price_completion_per_mtok) / 1e6

    # ---- requests ------------------------------------------------------------------------
    def complete(self, messages: list[dict[str, str]], *, agent: str = "") -> Reply:
        """One chat completion; raises LLMError when it failed for good."""
        records: list[RequestRecord] = []
        s = self.settings
        for attempt in range(1, s.max_retries + 2):
            if not self.budget_left():
                rec = RequestRecord(agent, s.model, BUDGET, attempt,
                                    error="the run's LLM token/cost budget is spent")
                self._record(rec)
                records.append(rec)
                raise LLMError(BUDGET, rec.error, records)
            t0 = time.monotonic()
            retry_after: float | None = None
            with self._gate:
                try:
                    text, finish, usage, estimated, status = self._attempt(messages)
                    error = ""
                except _Attempt as exc:
                    text, finish, usage, estimated = "", "", (0, 0), True
                    status, error = exc.status, exc.message
                    retry_after = exc.retry_after
            if status in (OK, TRUNCATED, EMPTY) and not usage[0]:
                prompt_chars = sum(len(m.get("content", "")) for m in messages)
                usage = (prompt_chars // CHARS_PER_TOKEN, usage[1] or len(text) // CHARS_PER_TOKEN)
            rec = RequestRecord(agent, s.model, status, attempt, usage[0], usage[1],
                                self._cost(*usage), time.monotonic() - t0, finish, estimated, error)
            self._record(rec)
            records.append(rec)
            if status in (OK, TRUNCATED):
                return Reply(text=text, finish_reason=finish, records=records)
            if status not in RETRYABLE or attempt > s.max_retries:
                raise LLMError(status, rec.error or "the reply had no content", records)
            delay = min(s.max_backoff_s, s.backoff_s * 2 ** (attempt - 1))
            delay *= 0.75 + 0.5 * self._rng.random()  # jitter: agents don't retry in lockstep
            if retry_after is not None:
                delay = min(max(retry_after, 0.0), max(s.max_backoff_s, 0.0))
            log.info("LLM request %s (attempt %d), retrying in %.2fs", status, attempt, delay)
            self._sleep(delay)
        raise AssertionError("unreachable")

    def _params(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        s = self.settings
        params: dict[str, Any] = {"model": s.model, "messages": messages,
                                  "temperature": s.temperature, "stream": s.stream}
        params["max_completion_tokens" if self._use_max_completion_tokens else "max_tokens"] = \
            s.max_tokens
        if s.stream and self._stream_usage:
            params["stream_options"] = {"include_usage": True}
        return params

    def _attempt(self, messages: list[dict[str, str]]) -> tuple[str, str, tuple[int, int], bool, str]:
        """(text, finish_reason, (prompt, completion) tokens, usage estimated?, status)."""
        for _ in range(3):  # adapt once to servers that reject max_tokens / stream_options
            try:
                return self._call(messages)
            except openai.BadRequestError as exc:
                msg = str(exc)
                if "max_completion_tokens" in msg and not self._use_max_completion_tokens:
                    self._use_max_completion_tokens = True
                    continue
                if "stream_options" in msg and self._stream_usage:
                    self._stream_usage = False
                    continue
                raise _Attempt(REJECTED, _short(msg)) from None
            except openai.RateLimitError as exc:
                raise _Attempt(RATE_LIMITED, _short(str(exc)), _retry_after(exc)) from None
            except openai.InternalServerError as exc:
                raise _Attempt(SERVER_ERROR, _short(str(exc)), _retry_after(exc)) from None
            except openai.APITimeoutError:
                raise _Attempt(TIMEOUT, f"no reply within {self.settings.timeout_s:g}s") from None
            except openai.APIConnectionError as exc:
                raise _Attempt(CONNECTION, _short(f"{exc}: {exc.__cause__ or ''}")) from None
            except openai.APIStatusError as exc:
                status = SERVER_ERROR if exc.status_code >= 500 else REJECTED
                raise _Attempt(status, _short(f"HTTP {exc.status_code}: {exc}")) from None
            except openai.APIError as exc:  # malformed body, broken stream
                raise _Attempt(SERVER_ERROR, _short(f"malformed reply: {exc}")) from None
            except ValueError as exc:  # a body that is not JSON at all
                raise _Attempt(SERVER_ERROR, _short(f"malformed reply: {exc}")) from None
        raise _Attempt(REJECTED, "the server rejected every request form")

    def _call(self, messages: list[dict[str, str]]) -> tuple[str, str, tuple[int, int], bool, str]:
        s = self.settings
        deadline = time.monotonic() + s.timeout_s
        max_chars = s.max_tokens * CHARS_PER_TOKEN * 2  # servers that ignore max_tokens
        if not s.stream:
            resp = self._openai.chat.completions.create(**self._params(messages))
            if not getattr(resp, "choices", None):
                raise _Attempt(EMPTY, "the reply had no choices")
            choice = resp.choices[0]
            text = (choice.message.content or "") if choice.message else ""
            usage = resp.usage
            tokens = (usage.prompt_tokens or 0, usage.completion_tokens or 0) if usage else (0, 0)
            finish = choice.finish_reason or ""
            return _finish(text, finish, tokens, usage is None, max_chars)
        stream = self._openai.chat.completions.create(**self._params(messages))
        # A watchdog closes the connection at the deadline: a server that trickles bytes (or
        # keep-alives) forever cannot hold this thread.
        cut = threading.Event()

        def close_at_deadline() -> None:
            cut.set()
            stream.response.close()

        watchdog = threading.Timer(max(0.0, deadline - time.monotonic()), close_at_deadline)
        watchdog.daemon = True
        watchdog.start()
        parts: list[str] = []
        n_chars = 0
        finish = ""
        tokens: tuple[int, int] = (0, 0)
        got_usage = False
        try:
            for chunk in stream:
                if getattr(chunk, "usage", None):
                    tokens = (chunk.usage.prompt_tokens or 0, chunk.usage.completion_tokens or 0)
                    got_usage = True
                for choice in chunk.choices or ():
                    piece = choice.delta.content if choice.delta else None
                    if piece:
                        parts.append(piece)
                        n_chars += len(piece)
                    if choice.finish_reason:
                        finish = choice.finish_reason
                if time.monotonic() > deadline:
                    cut.set()
                    break
                if n_chars > max_chars:
                    finish = "length"
                    break
        except Exception as exc:
            if not cut.is_set():
                raise
            if not parts:
                raise _Attempt(TIMEOUT, f"no complete reply within {s.timeout_s:g}s") from exc
            finish = "length"
        finally:
            watchdog.cancel()
            stream.close()
        text = "".join(parts)
        if cut.is_set():
            if not text.strip():
                raise _Attempt(TIMEOUT, f"no complete reply within {s.timeout_s:g}s")
            finish = "length"
        return _finish(text, finish, tokens, not got_usage, max_chars)


def _finish(text: str, finish: str, tokens: tuple[int, int], estimated: bool,
            max_chars: int) -> tuple[str, str, tuple[int, int], bool, str]:
    if not text.strip():
        raise _Attempt(EMPTY, "the reply was empty")
    if len(text) > max_chars:
        text, finish = text[:max_chars], "length"
    status = TRUNCATED if finish == "length" else OK
    return text, finish, tokens, estimated, status


def _retry_after(exc: openai.APIStatusError) -> float | None:
    try:
        value = exc.response.headers.get("retry-after")
        return float(value) if value is not None else None
    except (AttributeError, ValueError, TypeError):
        return None


def _short(text: str, limit: int = 500) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "..."
