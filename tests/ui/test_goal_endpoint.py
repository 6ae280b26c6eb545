"""A goal file whose [llm] base_url is not the user's endpoint: the window asks before the API
key goes there, and does not start the run when the user says no."""

from __future__ import annotations

from app.goal import Goal, StopRules, SwarmSettings


def _llm_goal() -> Goal:
    goal = Goal(name="llm goal", space="pnpoly_RTX_3090.json.gz", backend="replay",
                stop=StopRules(max_evals=5), swarm=SwarmSettings(agents=["explorer", "llm"], workers=1))
    goal.llm = {"base_url": "http://127.0.0.1:9/v1", "model": "m"}
    return goal


def test_run_does_not_start_when_the_user_declines(window, monkeypatch):
    monkeypatch.setenv("KERNELSWARM_LLM_BASE_URL", "http://127.0.0.1:8/v1")
    monkeypatch.delenv("KERNELSWARM_LLM_APPROVED_ENDPOINTS", raising=False)
    asked = []
    window.confirm = lambda question: asked.append(question) or False
    window.form.set_goal(_llm_goal())
    window.run_goal()
    assert asked and "127.0.0.1:9" in asked[0] and "127.0.0.1:8" in asked[0]
    assert not window.controller.running and window.controller.state == "idle"
    assert "not started" in window.statusBar().currentMessage()


def test_a_confirmed_endpoint_is_approved_for_the_engine(window, monkeypatch):
    from app.llm import settings as llm_settings

    monkeypatch.setenv("KERNELSWARM_LLM_BASE_URL", "http://127.0.0.1:8/v1")
    monkeypatch.setenv(llm_settings.APPROVED_ENV, "")  # restored after the test
    window.confirm = lambda question: True
    window.form.set_goal(_llm_goal())
    window.run_goal()
    try:
        assert llm_settings.endpoint_needs_confirmation(
            _llm_goal().llm, llm_settings.user_endpoint_settings()) is None
    finally:
        if window.controller.running:
            window.controller.stop_and_wait(20)
