"""A real HTTP server on 127.0.0.1 that speaks the OpenAI chat-completions protocol and plays
scripted replies, for testing LLM agents without a model.

Each request takes the next step of the script (or asks `responder(request_body)` when given);
steps are Reply (text, streamed as SSE when the client asks for a stream), Status (an HTTP error
such as 429 with Retry-After, or a redirect), Stall (sleep before answering: timeouts), Endless
(a reply that never ends), Garbage (a 200 whose body is not JSON), TrickleHeaders / TrickleBody
(one byte a second: only a whole-request deadline ends them), Huge (a body far over any cap).
The server runs in a thread, counts connections, records every request body and its headers
(the Authorization header too), and stops itself after `lifetime_s`.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    text: str
    finish_reason: str = "stop"
    prompt_tokens: int = 100
    completion_tokens: int | None = None  # None: len(text) // 4


@dataclass
class Status:
    code: int
    message: str = "scripted error"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Stall:
    seconds: float
    then: Any = None  # what to send after the stall (if the client is still there)


@dataclass
class Endless:
    piece: str = "for (;;) { x += 1; } "
    max_s: float = 10.0  # the server's own bound, so a broken client cannot hang the test


@dataclass
class Garbage:
    body: bytes = b"<html>this is not json</html>"


@dataclass
class TrickleHeaders:
    """A 200 whose status line and headers arrive one byte every `interval_s` (never ending
    before `max_s`): a per-read timeout never fires, only a whole-request deadline can."""
    interval_s: float = 1.0
    max_s: float = 30.0


@dataclass
class TrickleBody:
    """Headers at once, then the body one byte every `interval_s` (JSON or SSE as asked)."""
    interval_s: float = 1.0
    max_s: float = 30.0


@dataclass
class Huge:
    """A reply of `size` bytes: a JSON body (announced with Content-Length, or not when
    `announce` is False) or, when streamed, SSE events carrying `piece` (or no content)."""
    size: int = 50_000_000
    announce: bool = True
    piece: str = ""


Step = Any


class ChatServer:
    def __init__(self, script: list[Step] | None = None, *,
                 responder: Callable[[dict], Step] | None = None, default: Step | None = None,
                 lifetime_s: float = 60.0, honour_max_tokens: bool = False) -> None:
        self._script = list(script or [])
        self._responder = responder
        self._default = default
        self._lock = threading.Lock()
        self.requests: list[dict] = []
        self.auth_headers: list[str] = []
        self.headers: list[dict[str, str]] = []  # every request's headers, as received
        self.connections = 0  # TCP connections accepted (a refused endpoint must see none)
        self.honour_max_tokens = honour_max_tokens
        self._stopped = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def setup(self) -> None:
                with server._lock:
                    server.connections += 1
                super().setup()

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    server.headers.append(dict(self.headers.items()))
                step = server._next(body, self.headers.get("Authorization", ""))
                server._play(self, body, step)

            def do_GET(self) -> None:
                server._json(self, 200, {"object": "list", "data": [{"id": "scripted"}]})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.handle_error = lambda *a: None  # clients hanging up is what tests provoke
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="llm-server",
                                        daemon=True)
        self._timer = threading.Timer(lifetime_s, self.stop)
        self._timer.daemon = True

    # ---- lifecycle ---------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> ChatServer:
        self._thread.start()
        self._timer.start()
        return self

    def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        self._timer.cancel()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> ChatServer:  # noqa: PYI034 - start() returns this very server
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def add(self, *steps: Step) -> None:
        with self._lock:
            self._script.extend(steps)

    # ---- playing steps -----------------------------------------------------------------
    def _next(self, body: dict, auth: str) -> Step:
        with self._lock:
            self.requests.append(body)
            self.auth_headers.append(auth)
            if self._script:
                return self._script.pop(0)
        if self._responder is not None:
            return self._responder(body)
        if self._default is not None:
            return self._default
        return Status(500, "script exhausted")

    def _play(self, h: BaseHTTPRequestHandler, body: dict, step: Step) -> None:
        try:
            if isinstance(step, Stall):
                if self._stopped.wait(step.seconds):
                    return
                step = step.then if step.then is not None else Reply("too late")
            if isinstance(step, str):
                step = Reply(step)
            if isinstance(step, Status):
                self._json(h, step.code, {"error": {"message": step.message, "type": "scripted",
                                                    "code": step.code}}, step.headers)
            elif isinstance(step, Garbage):
                h.send_response(200)
                h.send_header("Content-Type", "application/json")
                h.send_header("Content-Length", str(len(step.body)))
                h.end_headers()
                h.wfile.write(step.body)
            elif isinstance(step, TrickleHeaders):
                self._trickle(h, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                              b"X-Padding: " + b"x" * 100_000 + b"\r\n\r\n", step)
            elif isinstance(step, TrickleBody):
                stream = bool(body.get("stream"))
                h.send_response(200)
                h.send_header("Content-Type", "text/event-stream" if stream else "application/json")
                h.send_header("Connection", "close")  # no length: the body ends when it ends
                h.end_headers()
                h.wfile.flush()
                self._trickle(h, b"data: " if stream else b'{"choices": [', step)
            elif isinstance(step, Huge):
                self._huge(h, body, step)
            elif isinstance(step, Endless):
                self._endless(h, body, step)
            elif isinstance(step, Reply):
                if self.honour_max_tokens:
                    cap = body.get("max_tokens") or body.get("max_completion_tokens")
                    done = step.completion_tokens if step.completion_tokens is not None \
                        else len(step.text) // 4
                    if cap is not None and done > cap:
                        step = Reply(step.text, "length", step.prompt_tokens, cap)
                if body.get("stream"):
                    self._stream(h, body, step)
                else:
                    self._json(h, 200, _completion(body, step))
            else:
                raise TypeError(f"unknown script step {step!r}")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client hung up (timeouts, cut replies): that is what was tested

    @staticmethod
    def _json(h: BaseHTTPRequestHandler, code: int, payload: dict,
              headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        h.send_response(code)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        h.end_headers()
        h.wfile.write(data)

    @staticmethod
    def _sse_start(h: BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Cache-Control", "no-cache")
        h.send_header("Connection", "close")
        h.end_headers()
        h.close_connection = True

    @staticmethod
    def _event(h: BaseHTTPRequestHandler, payload: dict | str) -> None:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        h.wfile.write(f"data: {data}\n\n".encode())
        h.wfile.flush()

    def _stream(self, h: BaseHTTPRequestHandler, body: dict, step: Reply) -> None:
        self._sse_start(h)
        text = step.text
        for i in range(0, len(text), 64):
            self._event(h, _chunk(body, {"content": text[i:i + 64]}, None))
        self._event(h, _chunk(body, {}, step.finish_reason))
        if (body.get("stream_options") or {}).get("include_usage"):
            self._event(h, {"id": "chatcmpl-scripted", "object": "chat.completion.chunk",
                            "created": int(time.time()), "model": body.get("model", ""),
                            "choices": [], "usage": _usage(step)})
        self._event(h, "[DONE]")

    def _trickle(self, h: BaseHTTPRequestHandler, prefix: bytes,
                 step: TrickleHeaders | TrickleBody) -> None:
        """Write `prefix` one byte at a time, then spaces, until max_s or the client leaves."""
        t_end = time.monotonic() + step.max_s
        i = 0
        while time.monotonic() < t_end and not self._stopped.is_set():
            h.wfile.write(prefix[i:i + 1] if i < len(prefix) else b" ")
            h.wfile.flush()
            i += 1
            if self._stopped.wait(step.interval_s):
                return
        h.close_connection = True

    def _huge(self, h: BaseHTTPRequestHandler, body: dict, step: Huge) -> None:
        h.close_connection = True
        if body.get("stream"):
            self._sse_start(h)
            sent = 0
            while sent < step.size and not self._stopped.is_set():
                event = (f"data: {json.dumps(_chunk(body, {'content': step.piece}, None))}\n\n"
                         if step.piece else ": " + "k" * 65_000 + "\n\n").encode()
                h.wfile.write(event)
                sent += len(event)
            return
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        if step.announce:
            h.send_header("Content-Length", str(step.size))
        h.send_header("Connection", "close")
        h.end_headers()
        head = b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "'
        h.wfile.write(head)
        block = b"A" * 65_536
        sent = len(head)
        while sent < step.size and not self._stopped.is_set():
            h.wfile.write(block)
            sent += len(block)

    def _endless(self, h: BaseHTTPRequestHandler, body: dict, step: Endless) -> None:
        if not body.get("stream"):
            # Non-streaming endless reply: a body that trickles and never completes.
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", "100000000")
            h.end_headers()
            t_end = time.monotonic() + step.max_s
            while time.monotonic() < t_end and not self._stopped.is_set():
                h.wfile.write(b" ")
                h.wfile.flush()
                time.sleep(0.05)
            return
        self._sse_start(h)
        t_end = time.monotonic() + step.max_s
        while time.monotonic() < t_end and not self._stopped.is_set():
            self._event(h, _chunk(body, {"content": step.piece}, None))
            time.sleep(0.002)


def _usage(step: Reply) -> dict:
    completion = step.completion_tokens if step.completion_tokens is not None else len(step.text) // 4
    return {"prompt_tokens": step.prompt_tokens, "completion_tokens": completion,
            "total_tokens": step.prompt_tokens + completion}


def _chunk(body: dict, delta: dict, finish: str | None) -> dict:
    return {"id": "chatcmpl-scripted", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": body.get("model", ""),
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _completion(body: dict, step: Reply) -> dict:
    return {"id": "chatcmpl-scripted", "object": "chat.completion", "created": int(time.time()),
            "model": body.get("model", ""),
            "choices": [{"index": 0, "message": {"role": "assistant", "content": step.text},
                         "finish_reason": step.finish_reason}],
            "usage": _usage(step)}
