"""The chat client against a real loopback HTTP server speaking the chat-completions protocol
(tests/llm_server.py): retries and backoff, timeouts, endless and malformed replies, budgets,
and the API key never leaking into what is kept."""

from __future__ import annotations

import logging
import time

import pytest
from llm_server import ChatServer, Endless, Garbage, Reply, Stall, Status

from app.llm.client import LLMClient, LLMError
from app.llm.settings import LLMSettings, LLMSettingsError, redact, resolve_api_key

KEY = "sk-test-0123456789-THE-SECRET-KEY"
MSG = [{"role": "user", "content": "make it faster"}]


def _client(server: ChatServer, **overrides) -> LLMClient:
    s = LLMSettings(base_url=server.base_url, model="scripted", timeout_s=2.0, backoff_s=0.05,
                    max_backoff_s=0.5, max_tokens=256, max_retries=3)
    return LLMClient(LLMSettings(**{**s.to_dict(), **overrides}), api_key=KEY)


@pytest.mark.parametrize("stream", [True, False])
def test_a_reply_with_usage_and_cost(stream):
    with ChatServer([Reply("```c\nvoid ks_kernel() {}\n```", prompt_tokens=1000,
                           completion_tokens=500)]) as srv:
        c = _client(srv, stream=stream, price_prompt_per_mtok=2.0, price_completion_per_mtok=8.0)
        reply = c.complete(MSG, agent="llm-memory")
    assert "ks_kernel" in reply.text and reply.finish_reason == "stop" and not reply.truncated
    rec = reply.records[-1]
    assert (rec.prompt_tokens, rec.completion_tokens, rec.usage_estimated) == (1000, 500, False)
    assert rec.cost == pytest.approx((1000 * 2.0 + 500 * 8.0) / 1e6)
    assert srv.requests[0]["max_tokens"] == 256 and srv.requests[0]["model"] == "scripted"
    assert srv.auth_headers[0] == f"Bearer {KEY}"  # the key is used for the request...


def test_429_backs_off_honouring_retry_after_then_succeeds():
    sleeps: list[float] = []
    with ChatServer([Status(429, "slow down", {"Retry-After": "0.2"}), Status(429),
                     Status(503, "overloaded"), Reply("```c\nint x;\n```")]) as srv:
        c = _client(srv)
        c._sleep = lambda s: (sleeps.append(s), time.sleep(s))  # record, still really wait
        reply = c.complete(MSG)
    assert [r.status for r in reply.records] == ["rate_limited", "rate_limited", "server_error", "ok"]
    assert sleeps[0] == pytest.approx(0.2)  # Retry-After wins over the computed backoff
    assert 0.05 <= sleeps[1] <= 0.5 and len(srv.requests) == 4
    assert c.totals()["by_status"] == {"rate_limited": 2, "server_error": 1, "ok": 1}


def test_persistent_429_gives_up_after_the_retries():
    with ChatServer(default=Status(429, headers={"Retry-After": "0"})) as srv:
        c = _client(srv, max_retries=2)
        with pytest.raises(LLMError) as info:
            c.complete(MSG)
    assert info.value.status == "rate_limited" and len(info.value.records) == 3
    assert len(srv.requests) == 3


def test_a_stalled_server_times_out_and_is_retried():
    with ChatServer([Stall(5.0), Reply("```c\nint y;\n```")]) as srv:
        c = _client(srv, timeout_s=0.5)
        t0 = time.monotonic()
        reply = c.complete(MSG)
    assert time.monotonic() - t0 < 3.0
    assert [r.status for r in reply.records] == ["timeout", "ok"]


def test_an_endless_reply_is_cut_by_length():
    with ChatServer([Endless(max_s=20)]) as srv:
        c = _client(srv, max_tokens=64, timeout_s=5.0)
        t0 = time.monotonic()
        reply = c.complete(MSG)
    assert time.monotonic() - t0 < 4.0
    assert reply.truncated and reply.finish_reason == "length"
    assert len(reply.text) <= 64 * 4 * 2


def test_an_endless_trickle_is_cut_by_the_deadline():
    with ChatServer([Endless(piece="", max_s=20)]) as srv:  # keeps the stream open, sends nothing
        c = _client(srv, timeout_s=0.6, max_retries=0)
        t0 = time.monotonic()
        with pytest.raises(LLMError) as info:
            c.complete(MSG)
    assert time.monotonic() - t0 < 3.0 and info.value.status == "timeout"


@pytest.mark.parametrize("stream", [True, False])
def test_garbage_and_empty_replies_are_recorded_failures(stream):
    with ChatServer([Garbage(), Garbage(), Reply("   ")]) as srv:
        c = _client(srv, stream=stream, max_retries=1)
        with pytest.raises(LLMError) as first:
            c.complete(MSG)
        with pytest.raises(LLMError) as second:
            c.complete(MSG)
    assert first.value.status in ("server_error", "empty_reply")
    assert second.value.status == "empty_reply"
    assert c.totals()["requests"] == len(c.records) >= 2


def test_rejected_requests_are_not_retried():
    with ChatServer([Status(401, "invalid api key")]) as srv:
        c = _client(srv)
        with pytest.raises(LLMError) as info:
            c.complete(MSG)
    assert info.value.status == "rejected" and len(srv.requests) == 1


def test_the_run_budget_stops_requests():
    with ChatServer(default=Reply("```c\nint z;\n```", prompt_tokens=600, completion_tokens=600)) as srv:
        c = _client(srv, run_token_budget=2000)
        c.complete(MSG)
        assert c.budget_left()
        c.complete(MSG)
        assert not c.budget_left()
        with pytest.raises(LLMError) as info:
            c.complete(MSG)
    assert info.value.status == "budget_exhausted" and len(srv.requests) == 2


def test_the_key_never_shows_in_settings_reprs_or_errors(monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("KERNELSWARM_LLM_API_KEY", KEY)
    with ChatServer([Status(400, f"bad request for key {KEY}")]) as srv:
        s = LLMSettings(base_url=srv.base_url, model="scripted", max_retries=0)
        assert resolve_api_key(s) == KEY
        c = LLMClient(s)
        with pytest.raises(LLMError) as info:
            c.complete(MSG)
    kept = [repr(s), repr(c), str(s.to_dict()), str(info.value), str(c.records), caplog.text]
    assert srv.auth_headers[0] == f"Bearer {KEY}"
    assert not any(KEY in k or KEY[-8:] in k for k in kept)
    with pytest.raises(LLMSettingsError, match="never kept in settings"):
        LLMSettings.from_dict({"api_key": KEY})
    assert redact(f"echo {KEY}!", KEY) == "echo [redacted]!"


def test_settings_validation_and_environment(monkeypatch):
    with pytest.raises(LLMSettingsError, match="base_url"):
        LLMSettings(base_url="ftp://x").validate()
    with pytest.raises(LLMSettingsError, match="max_concurrent"):
        LLMSettings(max_concurrent=0).validate()
    with pytest.raises(LLMSettingsError, match="unknown role"):
        LLMSettings(roles=["poet"]).validate()
    s = LLMSettings.from_env({"KERNELSWARM_LLM_MODEL": "qwen2.5-coder",
                              "KERNELSWARM_LLM_BASE_URL": "http://127.0.0.1:11434/v1",
                              "KERNELSWARM_LLM_MAX_CONCURRENT": "3",
                              "KERNELSWARM_LLM_ROLES": "memory,fixer"})
    assert (s.model, s.max_concurrent, s.roles, s.is_local) == ("qwen2.5-coder", 3, ["memory", "fixer"], True)
    with pytest.raises(LLMSettingsError, match="TIMEOUT_S"):
        LLMSettings.from_env({"KERNELSWARM_LLM_TIMEOUT_S": "soon"})
    for var in ("KERNELSWARM_LLM_API_KEY", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    assert resolve_api_key(s) == "no-key-needed"  # local servers take any key
    assert resolve_api_key(LLMSettings()) == ""
    with pytest.raises(LLMError, match="no API key"):
        LLMClient(LLMSettings())
