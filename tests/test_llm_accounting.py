"""What a provider bills is what the run records, against the real loopback
server: empty replies at the length cap and timed-out replies are billed (the server's usage
where it says, else estimated and marked), requests that never reached the model are not, and
the reasoning-effort setting reaches the endpoint."""

from __future__ import annotations

import pytest
from llm_server import ChatServer, Reply, Stall, Status

from app.llm import spending
from app.llm.client import LLMClient, LLMError
from app.llm.settings import LLMSettings, LLMSettingsError
from app.llm.usage import UsageLog, run_usage
from app.store import Store

KEY = "sk-test-accounting"
MSG = [{"role": "user", "content": "x" * 4000}]  # 1000 tokens at 4 characters a token


def _client(server: ChatServer, **overrides) -> LLMClient:
    s = LLMSettings(base_url=server.base_url, model="scripted", timeout_s=2.0, backoff_s=0.01,
                    max_backoff_s=0.05, max_tokens=4096, max_retries=0)
    return LLMClient(LLMSettings(**{**s.to_dict(), **overrides}), api_key=KEY)


@pytest.mark.parametrize("stream", [True, False])
def test_an_empty_reply_at_the_cap_records_what_the_server_billed(stream):
    with ChatServer([Reply("", "length", prompt_tokens=1200, completion_tokens=4096)]) as srv:
        c = _client(srv, stream=stream)
        with pytest.raises(LLMError) as info:
            c.complete(MSG)
    rec = info.value.records[-1]
    assert rec.status == "empty_reply" and rec.finish_reason == "length"
    assert (rec.prompt_tokens, rec.completion_tokens, rec.usage_estimated) == (1200, 4096, False)
    assert "length cap" in rec.error


def test_an_empty_reply_at_the_cap_without_usage_is_estimated_at_the_cap():
    # the server refuses stream_options, so the stream then carries no usage at all
    with ChatServer([Status(400, "unknown parameter: stream_options"),
                     Reply("", "length", completion_tokens=4096)]) as srv:
        c = _client(srv)
        with pytest.raises(LLMError) as info:
            c.complete(MSG)
    rec = info.value.records[-1]
    assert "stream_options" not in srv.requests[-1]
    assert rec.usage_estimated and rec.completion_tokens == 4096
    assert rec.prompt_tokens == pytest.approx(1000, abs=10)


def test_a_timed_out_reply_is_billed_as_estimated():
    with ChatServer([Stall(5.0)]) as srv:
        c = _client(srv, timeout_s=0.4)
        with pytest.raises(LLMError) as info:
            c.complete(MSG)
    rec = info.value.records[-1]
    assert rec.status == "timeout" and rec.usage_estimated
    assert rec.completion_tokens == 4096 and rec.prompt_tokens == pytest.approx(1000, abs=10)


def test_a_request_that_never_reached_a_model_bills_nothing():
    with ChatServer([Status(401, "bad key")]) as srv:
        c = _client(srv)
        with pytest.raises(LLMError) as info:
            c.complete(MSG)
    rec = info.value.records[-1]
    assert rec.status == "rejected" and (rec.prompt_tokens, rec.completion_tokens) == (0, 0)


def test_a_three_request_reasoning_run_records_every_billed_token(tmp_path):
    """The issue's run: three requests, all spent thinking, 12,288 completion tokens billed."""
    script = [Reply("", "length", prompt_tokens=900, completion_tokens=4096),
              Stall(5.0),
              Reply("", "length", prompt_tokens=900, completion_tokens=4096)]
    with Store(tmp_path / "h.db") as store, ChatServer(script) as srv:
        run_id = 1
        log = UsageLog(store, run_id)
        s = LLMSettings(base_url=srv.base_url, model="o4-mini", timeout_s=0.4, max_tokens=4096,
                        max_retries=0)
        c = LLMClient(s, api_key=KEY, on_record=log.record)
        for _ in range(3):
            with pytest.raises(LLMError):
                c.complete(MSG, agent="llm-memory")
        totals = run_usage(store, run_id)
    assert c.totals()["completion_tokens"] == 3 * 4096 == 12_288
    assert totals["completion_tokens"] == 12_288
    assert totals["by_status"] == {"empty_reply": 2, "timeout": 1}
    assert totals["estimated_tokens"] == 4096 + c.records[1].prompt_tokens  # the timeout only


@pytest.mark.parametrize("stream", [True, False])
def test_reasoning_effort_is_sent_when_set_and_only_then(stream):
    with ChatServer([Reply("```c\nint a;\n```"), Reply("```c\nint b;\n```")]) as srv:
        _client(srv, stream=stream, reasoning_effort="high").complete(MSG)
        _client(srv, stream=stream).complete(MSG)
    assert srv.requests[0]["reasoning_effort"] == "high"
    assert "reasoning_effort" not in srv.requests[1]


def test_an_endpoint_refusing_reasoning_effort_gets_the_request_without_it():
    with ChatServer([Status(400, "Unrecognized request argument supplied: reasoning_effort"),
                     Reply("```c\nint a;\n```")]) as srv:
        reply = _client(srv, reasoning_effort="low").complete(MSG)
    assert reply.text and "reasoning_effort" not in srv.requests[-1]


def test_reasoning_effort_setting_is_checked_read_from_the_environment_and_guarded():
    with pytest.raises(LLMSettingsError, match="reasoning_effort"):
        LLMSettings(reasoning_effort="extreme").validate()
    s = LLMSettings.from_env({"KERNELSWARM_LLM_REASONING_EFFORT": "low"})
    assert s.reasoning_effort == "low"
    assert spending.raises({"reasoning_effort": "high"}, s)  # a goal may not make it dearer
    assert not spending.raises({"reasoning_effort": "minimal"}, s)
    assert spending.raises({"reasoning_effort": "medium"}, LLMSettings()) == []
