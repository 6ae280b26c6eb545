"""Before a CPU run claims a speedup, its best and the baselines are timed again, interleaved,
and the re-timed baseline is the one the run stores and shows."""

from __future__ import annotations

import shutil

import pytest

from app.goal import Goal, StopRules, SwarmSettings
from app.session import RunSession
from app.store import Store

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


def test_the_claimed_speedup_is_re_timed_interleaved(tmp_path):
    goal = Goal(name="softmax final", backend="cpu", operator="softmax", shapes=[[64, 512]],
                stop=StopRules(max_evals=3), swarm=SwarmSettings(agents=["explorer"], workers=1))
    with Store(tmp_path / "h.sqlite") as store:
        session = RunSession(goal, store=store)
        start_baseline = session.coordinator.baseline_value
        result = session.run()
        run = store.get_run(session.run_id)
    again = result.comparison
    assert {"candidate_ms", "numpy_ms", "c_reference_ms", "baseline_value"} <= set(again)
    assert all(again[k] > 0 for k in ("candidate_ms", "numpy_ms", "c_reference_ms"))
    assert run["baseline_value"] == pytest.approx(again["baseline_value"])
    assert start_baseline is not None and start_baseline > 0
