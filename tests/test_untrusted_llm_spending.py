"""A goal file spends the user's money only as far as the user allows: its
[llm] table may lower the saved spending limits, never raise them or switch the model unless
the user passes --trust-goal-llm (the window asks). Played through the real CLI against the
loopback chat server, which bills every request by the size of what it was sent."""

from __future__ import annotations

import os
import shutil

import pytest
from llm_server import ChatServer, Reply

from app.cli import main
from app.goal import Goal
from app.llm.settings import LLMSettings, run_settings, user_settings_path

KEY = "sk-spend-0123456789-SECRET"
needs_cc = pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                              reason="needs a C compiler")


class Billing:
    """The endpoint's bill: prompt tokens (a quarter of the characters sent) + completion."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, int]] = []

    def __call__(self, body: dict) -> Reply:
        prompt = sum(len(m.get("content", "")) for m in body["messages"]) // 4
        self.requests.append((body.get("model", ""), prompt + 20))
        return Reply("Try fusing the loops.", prompt_tokens=prompt, completion_tokens=20)

    @property
    def tokens(self) -> int:
        return sum(t for _, t in self.requests)


def _user(tmp_path, monkeypatch, srv: ChatServer, **saved) -> None:
    """The user's own settings: saved through the settings page (XDG config in tmp_path)."""
    for name in list(os.environ):
        if name.startswith("KERNELSWARM_LLM_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("KERNELSWARM_LLM_API_KEY", KEY)
    LLMSettings(base_url=srv.base_url, model="cheap-model", timeout_s=8, max_tokens=64,
                **saved).save(user_settings_path())


def _goal(tmp_path, **llm) -> str:
    goal = Goal(name="colleague's goal", operator="softmax", backend="cpu", shapes=[[8, 100]],
                llm=llm)
    goal.swarm.agents = ["explorer", "llm"]
    path = tmp_path / "goal.toml"
    path.write_text(goal.to_toml())
    return str(path)


def _run(tmp_path, goal: str, *extra: str) -> int:
    return main(["run", goal, "--db", str(tmp_path / "h.sqlite"), "--max-evals", "10",
                 "--quiet", *extra])


def test_a_goal_raising_the_budget_and_switching_the_model_is_refused(tmp_path, monkeypatch, capsys):
    bill = Billing()
    with ChatServer(responder=bill) as srv:
        _user(tmp_path, monkeypatch, srv, run_token_budget=20_000)
        rc = _run(tmp_path, _goal(tmp_path, run_token_budget=1_000_000, model="o1-pro"))
        err = capsys.readouterr().err.strip()
    assert rc != 0 and len(err.splitlines()) == 1, err
    for words in ("llm.run_token_budget", "1000000", "20000", "llm.model", "'o1-pro'",
                  "'cheap-model'", "--trust-goal-llm"):
        assert words in err, (words, err)
    assert srv.connections == 0 and bill.tokens == 0  # nothing billed, nothing sent


@needs_cc
@pytest.mark.slow
def test_a_lower_goal_budget_is_the_one_spent(tmp_path, monkeypatch, capsys):
    """The user's 20,000 tokens come from a variable (which outranks a goal's settings); the
    goal's lower budget still binds: the endpoint bills no more than it."""
    bill = Billing()
    with ChatServer(responder=bill) as srv:
        _user(tmp_path, monkeypatch, srv)
        monkeypatch.setenv("KERNELSWARM_LLM_RUN_TOKEN_BUDGET", "20000")
        rc = _run(tmp_path, _goal(tmp_path, run_token_budget=5000), "--max-evals", "16")
        err = capsys.readouterr().err
    assert rc == 0, err
    assert bill.requests and {m for m, _ in bill.requests} == {"cheap-model"}
    assert bill.tokens <= 5000, bill.requests


@needs_cc
@pytest.mark.slow
def test_trust_goal_llm_is_an_explicit_opt_in(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KERNELSWARM_LLM_APPROVED_SPENDING", "")  # approvals are per process: restored after the test
    bill = Billing()
    with ChatServer(responder=bill) as srv:
        _user(tmp_path, monkeypatch, srv, run_token_budget=20_000)
        rc = _run(tmp_path, _goal(tmp_path, model="o1-pro"), "--trust-goal-llm")
        err = capsys.readouterr().err
    assert rc == 0, err
    assert bill.requests and {m for m, _ in bill.requests} == {"o1-pro"}


def test_what_counts_as_raising_spending():
    from app.llm.spending import raises

    mine = LLMSettings(run_token_budget=20_000, run_cost_budget=5.0, max_tokens=2048,
                       price_prompt_per_mtok=2.5, roles=["memory", "tiling"])
    assert raises({"run_token_budget": 10_000, "max_tokens": 512, "run_cost_budget": 1.0,
                   "price_prompt_per_mtok": 3.0, "roles": ["memory"], "temperature": 0.1,
                   "model": mine.model}, mine) == []
    for goal_llm, name in (({"run_token_budget": 0}, "run_token_budget"),  # 0: no cap at all
                           ({"run_cost_budget": 50.0}, "run_cost_budget"),
                           ({"price_prompt_per_mtok": 0.0}, "price_prompt_per_mtok"),
                           ({"max_tokens": 100_000}, "max_tokens"),
                           ({"max_concurrent": 16}, "max_concurrent"),
                           ({"roles": ["memory", "fixer"]}, "roles"),
                           ({"model": "o1-pro"}, "model")):
        found = raises(goal_llm, mine)
        assert len(found) == 1 and found[0].startswith(f"llm.{name}:"), (goal_llm, found)
    # a user without a cap: any cap a goal sets is lower
    assert raises({"run_token_budget": 1_000_000}, LLMSettings(run_token_budget=0)) == []


def test_the_engine_refuses_it_too_unless_approved():
    from app.llm.settings import SpendingNotApproved
    from app.llm.spending import approve

    env: dict[str, str] = {}
    user = LLMSettings(run_token_budget=20_000, model="cheap-model")
    goal_llm = {"run_token_budget": 1_000_000, "model": "o1-pro"}
    with pytest.raises(SpendingNotApproved) as info:
        run_settings(goal_llm, env=env, user=user)
    assert "llm.run_token_budget" in str(info.value) and "llm.model" in str(info.value)
    approve(goal_llm, env)
    got = run_settings(goal_llm, env=env, user=user)
    assert got.run_token_budget == 1_000_000 and got.model == "o1-pro"
    # the approval is for exactly these values, not for the next raise
    with pytest.raises(SpendingNotApproved):
        run_settings({**goal_llm, "run_token_budget": 2_000_000}, env=env, user=user)
    lower = run_settings({"run_token_budget": 500}, env={"KERNELSWARM_LLM_RUN_TOKEN_BUDGET": "20000"},
                         user=user)
    assert lower.run_token_budget == 500


def test_the_window_asks_before_a_goal_raises_spending(tmp_path, monkeypatch):
    """The window's start path (app.ui.endpoint_check, called by the main window before a
    run): a raise is a question naming both values; no, and the run does not start."""
    from app.ui.endpoint_check import goal_endpoint_allowed

    monkeypatch.setenv("KERNELSWARM_LLM_APPROVED_SPENDING", "")
    with ChatServer() as srv:
        _user(tmp_path, monkeypatch, srv, run_token_budget=20_000)
        goal = Goal.load(_goal(tmp_path, run_token_budget=1_000_000))
        asked: list[str] = []
        ok, why = goal_endpoint_allowed(goal, lambda q: asked.append(q) or False)
        assert not ok and "llm.run_token_budget" in why and len(asked) == 1
        assert "1000000" in asked[0] and "20000" in asked[0]
        assert goal_endpoint_allowed(Goal.load(_goal(tmp_path, run_token_budget=500)),
                                     lambda q: False) == (True, "")
        ok, _ = goal_endpoint_allowed(goal, lambda q: True)
        assert ok and run_settings(goal.llm).run_token_budget == 1_000_000  # approved
