"""The wire side of the LLM client: the whole-request deadline, server-sent events under a byte
cap, and reading usage and finish reasons out of replies. No accounting and no policy here."""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

from app.llm.records import EMPTY, OK, TRUNCATED

READ_CHUNK = 16 * 1024


class AttemptFailed(Exception):
    """One attempt failed; `usage`/`server_said`/`finish` keep what the server reported before
    it failed (an empty reply at the length cap still says what it billed), `sent` whether the
    request reached the server (only then can it bill)."""

    def __init__(self, status: str, message: str, retry_after: float | None = None, *,
                 usage: tuple[int, int] = (0, 0), server_said: bool = False,
                 finish: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after
        self.usage = usage
        self.server_said = server_said
        self.finish = finish
        self.sent = False


class Watchdog:
    """Shuts the request's socket down at the deadline: a blocked read, connect or TLS
    handshake then fails at once (shutdown wakes a blocked recv; close alone does not).
    The raw TCP socket is watched through a duplicate from the moment it connects, so the
    TLS handshake is covered too (wrapping detaches the original socket object)."""

    def __init__(self, deadline: float) -> None:
        self.fired = threading.Event()
        self._lock = threading.Lock()
        self._socks: list[socket.socket] = []
        self._dups: list[socket.socket] = []
        self._timer = threading.Timer(max(0.0, deadline - time.monotonic()), self.fire)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, sock: socket.socket | None, *, dup: bool = False) -> None:
        if sock is None:
            return
        if dup:
            sock = sock.dup()
        with self._lock:
            self._socks.append(sock)
            if dup:
                self._dups.append(sock)
            if self.fired.is_set():
                _shutdown(sock)

    def fire(self) -> None:
        with self._lock:
            self.fired.set()
            for sock in self._socks:
                _shutdown(sock)

    def cancel(self) -> None:
        self._timer.cancel()
        with self._lock:
            for sock in self._dups:
                sock.close()
            self._dups.clear()
            self._socks.clear()


def _shutdown(sock: socket.socket | None) -> None:
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class BadRequest(Exception):
    """HTTP 400: may name a parameter this server wants spelled differently."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ByteCap(Exception):
    """The streamed body reached the byte cap."""


def sse_events(resp: http.client.HTTPResponse, cap: int) -> Iterator[str]:
    """The data of each server-sent event, reading at most `cap` bytes in all."""
    buf = b""
    total = 0
    data_lines: list[bytes] = []
    while True:
        piece = resp.read1(READ_CHUNK)
        if not piece:
            break
        total += len(piece)
        if total > cap:
            raise ByteCap()
        buf += piece
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                break
            line, buf = buf[:nl].rstrip(b"\r"), buf[nl + 1:]
            if not line:
                if data_lines:
                    yield b"\n".join(data_lines).decode("utf-8", "replace")
                    data_lines = []
            elif line.startswith(b"data:"):
                data_lines.append(line[5:].lstrip())
    if data_lines:
        yield b"\n".join(data_lines).decode("utf-8", "replace")


def usage_tokens(usage: Any) -> tuple[int, int]:
    if not isinstance(usage, dict):
        return (0, 0)

    def count(name: str) -> int:
        v = usage.get(name)
        return v if isinstance(v, int) and v >= 0 else 0
    return (count("prompt_tokens"), count("completion_tokens"))


def finish_reply(text: str, finish: str, tokens: tuple[int, int], estimated: bool,
            max_chars: int) -> tuple[str, str, tuple[int, int], bool, str]:
    if not text.strip():
        at_cap = " at the length cap (max_tokens): the model may have spent it all thinking" \
            if finish == "length" else ""
        raise AttemptFailed(EMPTY, f"the reply was empty{at_cap}", usage=tokens,
                            server_said=not estimated, finish=finish)
    if len(text) > max_chars:
        text, finish = text[:max_chars], "length"
    status = TRUNCATED if finish == "length" else OK
    return text, finish, tokens, estimated, status


def retry_after_s(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:  # an HTTP date: the computed backoff applies
        return None


def short(text: str, limit: int = 500) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit] + "..."
