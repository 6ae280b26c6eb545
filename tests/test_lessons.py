"""Lessons agree with each other and with the data: a later claim on a subject replaces the
earlier one, and the lessons a run ends with hold for its final best configurations."""

from __future__ import annotations

from project_paths import SPACES

from app.core.types import Evaluation
from app.goal import Goal, StopRules, SwarmSettings
from app.session import RunSession
from app.store import Store
from app.swarm.lessons import LessonBook, current_lessons, good_regions


def _ev(i: int, value: float, **config) -> Evaluation:
    return Evaluation(key=f"k{i}", config=config, ok=True, value=value)


def test_a_new_claim_on_a_subject_supersedes_the_old_one_and_a_lost_claim_is_retracted():
    book = LessonBook()
    early = [_ev(i, 1.0 + i, VWN=2, tile=4) for i in range(5)]
    first = book.update(good_regions(early, as_of=30), as_of=30)
    assert {lesson.evidence["value"] for lesson in first} == {2, 4}
    late = [_ev(i, 0.5 + i, VWN=4 if i % 2 else 1, tile=8) for i in range(5)]
    changed = book.update(good_regions(late, as_of=60), as_of=60)
    kinds = sorted(lesson.kind for lesson in changed)
    assert kinds == ["good_region", "retracted"]  # tile=8 replaces tile=4; VWN no longer holds
    tile = next(lesson for lesson in changed if lesson.kind == "good_region")
    assert "tile=8" in tile.text and "tile=4" in tile.evidence["supersedes"]
    stored = [{"kind": lesson.kind, "text": lesson.text, "evidence": lesson.evidence}
              for lesson in first + changed]
    assert [row["text"] for row in current_lessons(stored)] == [tile.text]
    assert [lesson.text for lesson in book.current()] == [tile.text]


def test_the_lessons_a_run_ends_with_hold_for_its_final_best(tmp_path):
    goal = Goal(name="lessons", space=str(SPACES / "gemm_RTX_3090.json.gz"), backend="replay",
                stop=StopRules(max_evals=137),
                swarm=SwarmSettings(agents=["explorer", "local", "evolution"], workers=1, seed=4))
    with Store(tmp_path / "h.sqlite") as store:
        session = RunSession(goal, store=store)
        result = session.run()
        stored = store.lessons(run_id=session.run_id)
    current = current_lessons(stored)
    assert [row["text"] for row in current] == [lesson.text for lesson in result.lessons]
    subjects = [row["evidence"]["subject"] for row in current]
    assert len(subjects) == len(set(subjects)), "two current lessons on one subject"
    ok = sorted((e for e in result.history if e.ok), key=lambda e: e.value)[:5]
    for row in current:
        if row["kind"] == "good_region":
            param, value = row["evidence"]["param"], row["evidence"]["value"]
            assert all(e.config[param] == value for e in ok), (row["text"], [e.config[param] for e in ok])
            assert row["evidence"]["as_of"] <= result.evaluations  # claimed since then, still true
