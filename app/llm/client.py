"""A chat-completions client for any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, LM Studio),
hardened for a long unattended run against an endpoint that may misbehave or be hostile.

The HTTP exchange is the standard library's http.client on a socket this module owns, so every
limit holds on the wire and not only per read:

- a wall-clock deadline covers the whole request (connect, TLS, headers, body, stream): a
  watchdog shuts the socket down at the deadline, so a server that trickles headers or a body
  one byte at a time cannot hold the calling thread past `timeout_s`;
- the reply is read in chunks up to a byte cap in every mode (streamed or not); a body
  announced or found larger is refused without being read whole;
- retries with exponential backoff and jitter on 429, 5xx, dropped connections and timeouts;
  `Retry-After` can only lengthen a wait (0 or missing still waits the minimum), each wait is
  capped and so is their total; other errors (bad key, bad request) fail at once;
- the token/cost budget is reserved (prompt estimate + max_tokens) before a request is sent and
  settled with the real usage after, so concurrent requests cannot overspend it;
- at most `max_concurrent` requests in flight, shared by every agent using this client;
- redirects are never followed (they could carry the key elsewhere); the API key is redacted
  from every error text that is kept.
"""

from __future__ import annotations

import http.client
import json
import logging
import random
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from app.llm.billing import billed_usage
from app.llm.records import (
    BUDGET,
    CHARS_PER_TOKEN,
    CLOSED,
    CONNECTION,
    EMPTY,
    ERROR_BODY_CAP,
    MAX_TOTAL_BACKOFF_S,
    MIN_RETRY_DELAY_S,
    OK,
    PROMPT_CHARS_PER_TOKEN,
    RATE_LIMITED,
    REJECTED,
    RETRYABLE,
    SERVER_ERROR,
    TIMEOUT,
    TOO_LARGE,
    TRUNCATED,
    LLMError,
    Reply,
    RequestRecord,
)
from app.llm.settings import LLMSettings, redact, resolve_api_key
from app.llm.wire import (
    READ_CHUNK,
    AttemptFailed,
    BadRequest,
    ByteCap,
    Watchdog,
    finish_reply,
    retry_after_s,
    short,
    sse_events,
    usage_tokens,
)

log = logging.getLogger(__name__)

__all__ = ["BUDGET", "CLOSED", "CONNECTION", "EMPTY", "MIN_RETRY_DELAY_S", "OK", "RATE_LIMITED",
           "REJECTED", "SERVER_ERROR", "TIMEOUT", "TOO_LARGE", "TRUNCATED", "LLMClient",
           "LLMError", "ModelQuirks", "Reply", "RequestRecord", "model_quirks", "reply_byte_cap"]

@dataclass(frozen=True)
class ModelQuirks:
    temperature: bool = True  # the model accepts a sampling temperature
    max_completion_tokens: bool = False  # the reply cap is named max_completion_tokens


# OpenAI's reasoning families reject `temperature` and `max_tokens` (o1, o3, o4-mini, gpt-5,
# with or without a provider prefix such as "openai/").
_REASONING_FAMILY = re.compile(r"(^|[/:])(o[1345](-[\w.-]*)?|gpt-5[\w.-]*)$", re.IGNORECASE)


def model_quirks(model: str) -> ModelQuirks:
    """What a model family accepts, known before the first request (a 400 naming a parameter
    still adapts the client for families not listed here)."""
    if _REASONING_FAMILY.search((model or "").strip()):
        return ModelQuirks(temperature=False, max_completion_tokens=True)
    return ModelQuirks()


def reply_byte_cap(max_tokens: int) -> int:
    """Bytes of HTTP body read at most for one reply: room for max_tokens of content in SSE
    framing (hundreds of bytes of JSON per chunk), never unbounded."""
    return 256 * 1024 + max_tokens * 400


def prompt_estimate(messages: list[dict[str, str]]) -> int:
    """Tokens a prompt may cost at most (a reservation, before the server counts them)."""
    chars = sum(len(m.get("content", "")) for m in messages)
    return chars // PROMPT_CHARS_PER_TOKEN + 8 * len(messages) + 8


class LLMClient:
    def __init__(self, settings: LLMSettings, *, api_key: str | None = None,
                 on_record: Callable[[RequestRecord], None] | None = None,
                 sleep: Callable[[float], None] = time.sleep, seed: int = 0) -> None:
        self.settings = settings.validate()  # also: plain http only to loopback
        key = api_key if api_key is not None else resolve_api_key(settings)
        if not key:
            raise LLMError(REJECTED, "no API key: set KERNELSWARM_LLM_API_KEY (or OPENAI_API_KEY) "
                           "or store one in the OS keyring; local servers need none")
        self._key = key
        url = urlsplit(settings.base_url)
        self._https = url.scheme == "https"
        self._host = url.hostname or ""
        self._port = url.port or (443 if self._https else 80)
        self._path = (url.path.rstrip("/") or "") + "/chat/completions"
        self._on_record = on_record
        self._sleep = sleep
        self._rng = random.Random(seed)
        self._gate = threading.BoundedSemaphore(settings.max_concurrent)
        self._lock = threading.Lock()
        self._records: list[RequestRecord] = []
        self._reserved_tokens = 0
        self._reserved_cost = 0.0
        quirks = model_quirks(settings.model)
        self._use_max_completion_tokens = quirks.max_completion_tokens
        self._send_temperature = quirks.temperature
        self._stream_usage = True
        self._send_effort = True
        self._closed = threading.Event()
        self._in_flight: set[Watchdog] = set()

    def close(self) -> None:
        """End of run: requests in flight are cut now and no new one or retry starts, so no
        thread (and no process exit) waits on the endpoint."""
        self._closed.set()
        with self._lock:
            watchdogs = list(self._in_flight)
        for w in watchdogs:
            w.fire()

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
        return not (s.run_cost_budget and t["cost"] >= s.run_cost_budget)

    def _reserve(self, messages: list[dict[str, str]]) -> tuple[int, float] | None:
        """Hold the worst case of one request against the budget, or None when it does not fit
        beside what is spent and what requests in flight hold."""
        s = self.settings
        worst = prompt_estimate(messages) + s.max_tokens
        worst_cost = self._cost(worst - s.max_tokens, s.max_tokens)
        with self._lock:
            spent = sum(r.prompt_tokens + r.completion_tokens for r in self._records)
            spent_cost = sum(r.cost for r in self._records)
            if s.run_token_budget and spent + self._reserved_tokens + worst > s.run_token_budget:
                return None
            if s.run_cost_budget and spent_cost + self._reserved_cost + worst_cost > s.run_cost_budget:
                return None
            self._reserved_tokens += worst
            self._reserved_cost += worst_cost
        return worst, worst_cost

    def _release(self, held: tuple[int, float]) -> None:
        with self._lock:
            self._reserved_tokens -= held[0]
            self._reserved_cost -= held[1]

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
        slept = 0.0
        for attempt in range(1, s.max_retries + 2):
            retry_after: float | None = None
            if self._closed.is_set():
                raise LLMError(CLOSED, "the run ended; no more requests", records)
            with self._gate:
                held = self._reserve(messages)
                if held is None:
                    rec = RequestRecord(agent, s.model, BUDGET, attempt,
                                        error="the run's LLM token/cost budget is spent (or held "
                                              "by requests in flight)")
                    self._record(rec)
                    records.append(rec)
                    raise LLMError(BUDGET, rec.error, records)
                t0 = time.monotonic()
                try:
                    sent = True
                    try:
                        text, finish, usage, estimated, status = self._attempt(messages)
                        error = ""
                    except AttemptFailed as exc:
                        text, finish, usage, estimated = "", exc.finish, exc.usage, \
                            not exc.server_said
                        status, error, sent = exc.status, exc.message, exc.sent
                        retry_after = exc.retry_after
                    usage, estimated = billed_usage(
                        status, finish=finish, usage=usage, server_said=not estimated, sent=sent,
                        prompt_chars=sum(len(m.get("content", "")) for m in messages),
                        text_chars=len(text), max_tokens=s.max_tokens)
                    rec = RequestRecord(agent, s.model, status, attempt, usage[0], usage[1],
                                        self._cost(*usage), time.monotonic() - t0, finish,
                                        estimated, error)
                    self._record(rec)  # the real usage replaces the reservation
                finally:
                    self._release(held)
            records.append(rec)
            if status in (OK, TRUNCATED):
                return Reply(text=text, finish_reason=finish, records=records)
            if status not in RETRYABLE or attempt > s.max_retries or self._closed.is_set():
                raise LLMError(status, rec.error or "the reply had no content", records)
            delay = self._backoff(attempt, retry_after)
            if slept + delay > MAX_TOTAL_BACKOFF_S:
                raise LLMError(status, f"{rec.error} (gave up: retry waits would pass "
                               f"{MAX_TOTAL_BACKOFF_S:g}s)", records)
            slept += delay
            log.info("LLM request %s (attempt %d), retrying in %.2fs", status, attempt, delay)
            if self._sleep is time.sleep:
                if self._closed.wait(delay):  # closing ends the wait too
                    raise LLMError(CLOSED, "the run ended; no more requests", records)
            else:
                self._sleep(delay)
        raise AssertionError("unreachable")

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        """Exponential, jittered (agents don't retry in lockstep), never below the floor;
        Retry-After can lengthen the wait up to max_backoff_s but never shorten it."""
        s = self.settings
        jitter = 0.75 + 0.5 * self._rng.random()
        delay = max(min(s.max_backoff_s, s.backoff_s * 2 ** (attempt - 1)), MIN_RETRY_DELAY_S)
        delay *= jitter
        if retry_after is not None and retry_after > delay:
            delay = min(retry_after, max(s.max_backoff_s, MIN_RETRY_DELAY_S))
        return delay

    def _params(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        s = self.settings
        params: dict[str, Any] = {"model": s.model, "messages": messages, "stream": s.stream}
        if self._send_temperature:
            params["temperature"] = s.temperature
        params["max_completion_tokens" if self._use_max_completion_tokens else "max_tokens"] = \
            s.max_tokens
        if s.stream and self._stream_usage:
            params["stream_options"] = {"include_usage": True}
        if s.reasoning_effort and self._send_effort:
            params["reasoning_effort"] = s.reasoning_effort
        return params

    def _attempt(self, messages: list[dict[str, str]]) -> tuple[str, str, tuple[int, int], bool, str]:
        """(text, finish_reason, (prompt, completion) tokens, usage estimated?, status)."""
        for _ in range(5):  # adapt once to servers that reject a parameter by name
            try:
                return self._call(messages)
            except BadRequest as exc:
                msg = exc.message
                if "max_completion_tokens" in msg and not self._use_max_completion_tokens:
                    self._use_max_completion_tokens = True
                    continue
                if "temperature" in msg and self._send_temperature:
                    self._send_temperature = False
                    continue
                if "reasoning_effort" in msg and self._send_effort:
                    # a model without the setting: say so once, then send without it
                    log.warning("the endpoint refuses reasoning_effort for %s; sending without it",
                                self.settings.model)
                    self._send_effort = False
                    continue
                if "stream_options" in msg and self._stream_usage:
                    self._stream_usage = False
                    continue
                raise AttemptFailed(REJECTED, short(f"HTTP 400: {msg}")) from None
        raise AttemptFailed(REJECTED, "the server rejected every request form")

    def _call(self, messages: list[dict[str, str]]) -> tuple[str, str, tuple[int, int], bool, str]:
        state = {"sent": False}
        try:
            return self._exchange(messages, state)
        except AttemptFailed as exc:
            exc.sent = state["sent"]  # only a request that reached the server can be billed
            raise

    def _exchange(self, messages: list[dict[str, str]], state: dict[str, bool]
                  ) -> tuple[str, str, tuple[int, int], bool, str]:
        s = self.settings
        deadline = time.monotonic() + s.timeout_s
        watchdog = Watchdog(deadline)
        with self._lock:
            self._in_flight.add(watchdog)
        if self._closed.is_set():
            watchdog.fire()
        conn: http.client.HTTPConnection | None = None
        try:
            conn = self._connection(s.timeout_s)

            def connect(*args: Any, **kwargs: Any) -> socket.socket:
                sock = socket.create_connection(*args, **kwargs)
                watchdog.watch(sock, dup=True)
                return sock

            conn._create_connection = connect  # type: ignore[attr-defined]
            body = json.dumps(self._params(messages)).encode()
            conn.connect()
            watchdog.watch(conn.sock)
            conn.request("POST", self._path, body=body, headers={
                "Authorization": f"Bearer {self._key}", "Content-Type": "application/json",
                "Accept": "text/event-stream" if s.stream else "application/json",
                "User-Agent": "kernelswarm"})
            state["sent"] = True
            resp = conn.getresponse()
            self._check_status(resp)
            cap = reply_byte_cap(s.max_tokens)
            if s.stream and "text/event-stream" in (resp.getheader("Content-Type") or ""):
                return self._read_stream(resp, cap, watchdog)
            return self._read_whole(resp, cap)
        except AttemptFailed:
            if watchdog.fired.is_set():
                raise AttemptFailed(TIMEOUT, f"no complete reply within {s.timeout_s:g}s") from None
            raise
        except BadRequest:
            raise
        except TimeoutError:
            raise AttemptFailed(TIMEOUT, f"no complete reply within {s.timeout_s:g}s") from None
        except (http.client.HTTPException, OSError, ValueError) as exc:
            if watchdog.fired.is_set():
                raise AttemptFailed(TIMEOUT, f"no complete reply within {s.timeout_s:g}s") from None
            if isinstance(exc, (ConnectionError, socket.gaierror)) or (
                    isinstance(exc, OSError) and not isinstance(exc, ssl.SSLError)):
                raise AttemptFailed(CONNECTION, short(f"{type(exc).__name__}: {exc}")) from None
            raise AttemptFailed(SERVER_ERROR, short(f"malformed reply: {type(exc).__name__}: {exc}")
                           ) from None
        finally:
            watchdog.cancel()
            with self._lock:
                self._in_flight.discard(watchdog)
            if conn is not None:
                conn.close()

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _check_status(self, resp: http.client.HTTPResponse) -> None:
        if resp.status < 300:
            return
        if resp.status < 400:  # a redirect could send the key to another host: never followed
            raise AttemptFailed(REJECTED, f"HTTP {resp.status}: redirects are not followed "
                           f"(to {resp.getheader('Location', '?')!r}); configure the final URL")
        raw = resp.read(ERROR_BODY_CAP)
        message = raw.decode("utf-8", "replace")
        try:
            payload = json.loads(raw)
            err = payload.get("error") if isinstance(payload, dict) else None
            if isinstance(err, dict) and err.get("message"):
                message = str(err["message"])
            elif isinstance(err, str):
                message = err
        except ValueError:
            pass
        if resp.status == 400:
            raise BadRequest(message)
        retry_after = retry_after_s(resp.getheader("Retry-After"))
        if resp.status == 429:
            raise AttemptFailed(RATE_LIMITED, short(f"HTTP 429: {message}"), retry_after)
        if resp.status >= 500:
            raise AttemptFailed(SERVER_ERROR, short(f"HTTP {resp.status}: {message}"), retry_after)
        raise AttemptFailed(REJECTED, short(f"HTTP {resp.status}: {message}"))

    def _read_whole(self, resp: http.client.HTTPResponse, cap: int
                    ) -> tuple[str, str, tuple[int, int], bool, str]:
        s = self.settings
        announced = resp.getheader("Content-Length")
        if announced and announced.strip().isdigit() and int(announced) > cap:
            raise AttemptFailed(TOO_LARGE, f"the reply announces {int(announced)} bytes; the cap is "
                           f"{cap} (max_tokens {s.max_tokens})")
        data = bytearray()
        while True:
            piece = resp.read1(READ_CHUNK)
            if not piece:
                break
            data += piece
            if len(data) > cap:
                raise AttemptFailed(TOO_LARGE, f"the reply passed the {cap}-byte cap "
                               f"(max_tokens {s.max_tokens}); not read further")
        payload = json.loads(bytes(data))
        choices = payload.get("choices") if isinstance(payload, dict) else None
        if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
            raise AttemptFailed(EMPTY, "the reply had no choices")
        choice = choices[0]
        message = choice.get("message") or {}
        text = (message.get("content") or "") if isinstance(message, dict) else ""
        usage = payload.get("usage")
        tokens = usage_tokens(usage)
        return finish_reply(str(text), str(choice.get("finish_reason") or ""), tokens,
                       not isinstance(usage, dict), self._max_chars())

    def _read_stream(self, resp: http.client.HTTPResponse, cap: int, watchdog: Watchdog
                     ) -> tuple[str, str, tuple[int, int], bool, str]:
        s = self.settings
        max_chars = self._max_chars()
        parts: list[str] = []
        n_chars = 0
        finish = ""
        tokens: tuple[int, int] = (0, 0)
        got_usage = False
        try:
            for data in sse_events(resp, cap):
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if not isinstance(chunk, dict):
                    continue
                if isinstance(chunk.get("usage"), dict):
                    tokens, got_usage = usage_tokens(chunk["usage"]), True
                for choice in chunk.get("choices") or ():
                    if not isinstance(choice, dict):
                        continue
                    delta = choice.get("delta") or {}
                    piece = delta.get("content") if isinstance(delta, dict) else None
                    if isinstance(piece, str) and piece:
                        parts.append(piece)
                        n_chars += len(piece)
                    if choice.get("finish_reason"):
                        finish = str(choice["finish_reason"])
                if n_chars > max_chars:
                    finish = "length"
                    break
        except ByteCap:
            finish = "length"
            if not "".join(parts).strip():
                raise AttemptFailed(TOO_LARGE, f"the streamed reply passed the {cap}-byte cap with "
                               "no content; not read further") from None
        except (OSError, http.client.HTTPException, ValueError):
            # the watchdog cut the stream (or the server broke it) after some text arrived:
            # what came is a truncated reply; with no text it is a timeout / broken reply
            if not watchdog.fired.is_set() or not "".join(parts).strip():
                raise
            finish = "length"
        if watchdog.fired.is_set():
            finish = "length"
        text = "".join(parts)
        if not text.strip() and watchdog.fired.is_set():
            raise AttemptFailed(TIMEOUT, f"no complete reply within {s.timeout_s:g}s")
        return finish_reply(text, finish, tokens, not got_usage, max_chars)

    def _max_chars(self) -> int:
        return self.settings.max_tokens * CHARS_PER_TOKEN * 2  # servers that ignore max_tokens


