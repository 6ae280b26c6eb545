"""What a provider bills for one attempt, when its reply does not say.

A server's own `usage` is taken as is. Where it says nothing, the tokens are estimated and the
record is marked estimated: the prompt from its characters, the completion from the text that
arrived, and, where the model was still generating when the reply ended (a timeout, an empty
reply or a cut at the length cap), the whole `max_tokens`: a reasoning model bills its hidden
thinking, and a provider keeps generating a request its client stopped waiting for. Requests
that never reached the model (refused, rate-limited, connection failures) bill nothing.
"""

from __future__ import annotations

from app.llm.records import CHARS_PER_TOKEN, CLOSED, EMPTY, OK, TIMEOUT, TRUNCATED

BILLED = (OK, TRUNCATED, EMPTY, TIMEOUT, CLOSED)  # outcomes where the model ran


def billed_usage(status: str, *, finish: str, usage: tuple[int, int], server_said: bool,
                 sent: bool, prompt_chars: int, text_chars: int, max_tokens: int
                 ) -> tuple[tuple[int, int], bool]:
    """((prompt, completion) tokens, estimated?) for one attempt."""
    if server_said and (usage[0] or usage[1]):
        return usage, False
    if status not in BILLED or not sent:
        return (0, 0), not server_said and status in BILLED
    prompt = usage[0] or prompt_chars // CHARS_PER_TOKEN
    completion = usage[1] or text_chars // CHARS_PER_TOKEN
    still_generating = status in (TIMEOUT, CLOSED) or (
        status in (EMPTY, TRUNCATED) and finish == "length")
    if still_generating:
        completion = max(completion, max_tokens)
    return (prompt, completion), True
