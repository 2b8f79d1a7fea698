"""lessons.library.life_cycle: a lesson's status replayed from its audit log (hand-made events)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from lessons.library.life_cycle import StatusHistory, added_status, replay_status

T0 = datetime(2025, 3, 14, 9, 0, tzinfo=UTC)


class Ev(NamedTuple):
    op: str
    before: str | None = None
    after: str | None = None
    target: int | None = None
    episode_id: int | None = None
    created_at: datetime = T0


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_a_teacher_lesson_promoted_then_retired():
    h = replay_status("retired", [
        Ev("ADD", after="text", episode_id=1),
        Ev("UPVOTE", created_at=at(1)),
        Ev("PROMOTE", "candidate", "active", created_at=at(2)),
        Ev("RETIRE", "active", "retired", created_at=at(5)),
    ])
    assert h == StatusHistory("candidate", ((at(2), "active"), (at(5), "retired")))
    assert [h.at(at(m)) for m in (0, 2, 4, 5, 9)] == ["candidate", "active", "active", "retired", "retired"]


def test_a_merge_source_starts_as_its_add_gave_it():
    hand = replay_status("retired", [Ev("ADD", after="text"), Ev("MERGE", "text", "merged", target=7, created_at=at(3))])
    assert (hand.at(at(0)), hand.at(at(3))) == ("active", "retired")  # hand-written: active from the start
    assert added_status(4) == "candidate" and added_status(None) == "active"


def test_no_status_change_keeps_the_current_status():
    # the lesson a MERGE made (its own MERGE event has no target), edits and votes change no status
    h = replay_status("active", [Ev("MERGE", "a\nb", "merged"), Ev("EDIT", "x", "y"), Ev("DOWNVOTE")])
    assert h == StatusHistory("active")
    # a DISTILL with a status outside the vocabulary is ignored
    assert replay_status("distilled", [Ev("DISTILL", "active", "bogus")]) == StatusHistory("distilled")
