"""What one LLM request attempt cost and how it ended: outcomes, records, replies, errors."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

# Outcomes of one attempt (RequestRecord.status).
OK = "ok"
TRUNCATED = "truncated"  # cut at max_tokens / the character or byte cap
RATE_LIMITED = "rate_limited"
SERVER_ERROR = "server_error"
TIMEOUT = "timeout"
CONNECTION = "connection_error"
REJECTED = "rejected"  # 4xx other than 429: bad key, unknown model, bad request, redirects
EMPTY = "empty_reply"
BUDGET = "budget_exhausted"
TOO_LARGE = "reply_too_large"  # a body over the byte cap: refused without reading it whole
CLOSED = "closed"  # the run ended (client closed) while the request waited or ran

CHARS_PER_TOKEN = 4  # estimate for servers that report no usage
PROMPT_CHARS_PER_TOKEN = 3  # conservative (code tokenises densely): reservations over-, not under-
RETRYABLE = {RATE_LIMITED, SERVER_ERROR, TIMEOUT, CONNECTION}
MIN_RETRY_DELAY_S = 0.1  # floor of every retry wait, whatever Retry-After says
MAX_TOTAL_BACKOFF_S = 300.0  # all retry waits of one request together
ERROR_BODY_CAP = 16 * 1024  # an error body is read this far at most


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
