"""A small, fully deterministic lesson library for the TUI tests and snapshots.

``build(path)`` writes, through :class:`LessonStore` and the curator (as ``arena run`` and
``arena lessons`` do), then pins every timestamp with plain SQL so snapshots are stable:

- session ``run-alpha`` (finished, 2 rounds, 3 episodes, 14 rollouts, held-out pass@1
  0.25 → 0.50) and session ``run-beta`` (running, no episode yet);
- episode 1 (round 1, task 00000, rewards 1 0 0 1) ADDs ``chain_sum-00001`` (candidate);
- episode 2 (round 1, task 00001, rewards 0 0 0 0, hint "feedback", guided 1 0) had
  ``chain_sum-00001`` in context and tags it helpful (helpful 1);
- episode 3 (round 2, task 00000, rewards 1 1 0 1) tags it helpful again: helpful 2 ≥
  ``promote_votes`` 2, so it is PROMOTEd to active;
- by hand: ``global-00001`` "Write the final answer alone on the last line." (active),
  ``global-00002`` "Restate the question before solving it." retired with a reason.

Numbers by hand: unguided rewards 4 + 4 + 4 = 12 rollouts, 2 + 0 + 3 = 5 successes → mean reward 5/12;
all rollouts 12 + 2 guided = 14. Round 1 mean (2 + 0) / 8 = 0.25, round 2 mean 3 / 4 = 0.75.
Active lessons at the end of round 1: none (chain_sum-00001 is a candidate, global ones are
added after the session); round 2: 1 (chain_sum-00001 promoted).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from lessons.library.curation import Provenance
from lessons.library.leases import LeaseOwner
from lessons.library.store import EpisodeRecord, HintRecord, LessonStore, RolloutRecord
from lessons.ops import AddOp, LessonTag, Reflection

T0 = datetime(2025, 3, 14, 9, 0, tzinfo=UTC)  # every timestamp is T0 + k minutes
LESSON_TEXT = "Add the numbers from left to right and check each carry."


@dataclass
class Task:
    task_key: str
    question: str
    answer: str
    family: str = "chain_sum"
    split: str = "train"
    source: str = "reasoning_gym"
    metadata: dict[str, Any] = field(default_factory=dict)


TASKS = [
    Task("chain_sum/train/00000", "What is 12 + 7?", "19"),
    Task("chain_sum/train/00001", "What is 45 + 38?", "83"),
    Task("chain_sum/heldout/00000", "What is 3 + 4?", "7", split="heldout"),
]


def _rollout(idx: int, reward: float, answer: str, guided: bool = False) -> RolloutRecord:
    msgs = [{"role": "system", "content": "You are a careful solver."}, {"role": "user", "content": "q"}]
    return RolloutRecord(
        idx=idx,
        messages=msgs,
        completion=f"Let me add. The answer is {answer}.",
        extracted_answer=answer,
        reward=reward,
        critique="correct" if reward >= 1 else f"expected a different answer than {answer}",
        prompt_tokens=40,
        completion_tokens=9,
        finish_reason="stop",
        latency_s=0.25,
        guided=guided,
        unguided_messages=msgs if guided else None,
    )


def _at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def build(path: Path | str) -> Path | str:
    """Write the fixture library at ``path`` (a new SQLite file, or the URL of an empty library) and return ``path``."""
    with LessonStore(str(path)) as store:
        sid = store.create_session("run-alpha", {"families": ["chain_sum"], "rounds": 2, "rollouts": 4}, seed=0)
        store.upsert_tasks(sid, TASKS)
        store.record_evaluation(sid, "heldout_before", "heldout", True, [1, 0, 0, 0], (0.05, 0.70), {})
        store.record_episode(
            EpisodeRecord(
                sid, "r001-chain_sum/train/00000", 1, "chain_sum/train/00000", "You are a careful solver.", [],
                [_rollout(0, 1.0, "19"), _rollout(1, 0.0, "18"), _rollout(2, 0.0, "21"), _rollout(3, 1.0, "19")],
                Reflection(
                    analysis="the winners carried the ten",
                    add=[AddOp(text=LESSON_TEXT, scope="chain_sum", rationale="rollouts 0 and 3 carried")],
                ),
                reflection_raw="{}",
                started_at=_at(1), finished_at=_at(2),
            )
        )
        store.record_episode(
            EpisodeRecord(
                sid, "r001-chain_sum/train/00001", 1, "chain_sum/train/00001", "You are a careful solver.",
                ["chain_sum-00001"],
                [_rollout(i, 0.0, a) for i, a in enumerate(["73", "82", "84", "93"])]
                + [_rollout(0, 1.0, "83", guided=True), _rollout(1, 0.0, "73", guided=True)],
                Reflection(analysis="carry mistakes", tags=[LessonTag(lesson_id="chain_sum-00001", tag="helpful")]),
                reflection_raw="{}",
                hint=HintRecord("feedback", "Your sums miss the carry from the ones column."),
                started_at=_at(3), finished_at=_at(4),
            )
        )
        store.record_episode(
            EpisodeRecord(
                sid, "r002-chain_sum/train/00000", 2, "chain_sum/train/00000", "You are a careful solver.",
                ["chain_sum-00001"],
                [_rollout(0, 1.0, "19"), _rollout(1, 1.0, "19"), _rollout(2, 0.0, "17"), _rollout(3, 1.0, "19")],
                Reflection(analysis="carrying helped", tags=[LessonTag(lesson_id="chain_sum-00001", tag="helpful")]),
                reflection_raw="{}",
                started_at=_at(5), finished_at=_at(6),
            )
        )
        store.record_evaluation(sid, "heldout_after", "heldout", True, [1, 1, 0, 0], (0.15, 0.85), {})
        store.set_session_status(sid, "finished", {"episodes": 3})
        # a live run: its lease (held for ten years) keeps it "running"; without one it would show "stopped"
        store.create_session("run-beta", {"families": ["chain_sum"]}, seed=1,
                             owner=LeaseOwner("fixture:1:0", "fixture", 1), lease_ttl_s=10 * 365 * 86400.0)
        by_hand = Provenance(origin={"by": "cli"})
        with store.curate() as c:
            c.add("Write the final answer alone on the last line.", "global", "hand-written", by_hand, status="active")
            c.add("Restate the question before solving it.", "global", "hand-written", by_hand, status="active")
        with store.curate() as c:
            c.retire("global-00002", "restating wastes the token budget", by_hand)
    pin_timestamps(path)
    return path


def pin_timestamps(path: Path | str) -> None:
    """Replace every wall-clock timestamp with T0 + k minutes, in write order (through SQLAlchemy: either backend)."""
    from sqlalchemy import create_engine, func, select, update

    from lessons.db.engine import parse_url
    from lessons.db.schema import Base

    t = Base.metadata.tables
    sessions, evaluations, hints, events, lessons = (t[n] for n in ("sessions", "evaluations", "hints", "lesson_events", "lessons"))
    engine = create_engine(parse_url(path))
    try:
        with engine.begin() as conn:
            # sessions: alpha at T0 (finished T0+10), beta at T0+20
            for sid, start, fin in ((1, 0, 10), (2, 20, None)):
                conn.execute(
                    update(sessions).where(sessions.c.id == sid)
                    .values(created_at=_at(start), finished_at=_at(fin) if fin is not None else None)
                )
            conn.execute(update(evaluations).values(created_at=_at(7)))
            conn.execute(update(hints).values(created_at=_at(3)))
            # events: the ones of episode e at T0 + 2e minutes; by-hand ones at T0+30, +31, ...
            for eid, ep in conn.execute(select(events.c.id, events.c.episode_id).order_by(events.c.id)).all():
                at = _at(2 * ep) if ep is not None else _at(30 + eid)
                conn.execute(update(events).where(events.c.id == eid).values(created_at=at))
            for (lid,) in conn.execute(select(lessons.c.id)).all():
                first, last = conn.execute(
                    select(func.min(events.c.created_at), func.max(events.c.created_at)).where(events.c.lesson_id == lid)
                ).one()
                conn.execute(update(lessons).where(lessons.c.id == lid).values(created_at=first, updated_at=last))
    finally:
        engine.dispose()


def add_adapter_tables(path: Path, with_rows: bool = True) -> None:
    """Adapter rows as `arena distill` writes them (issue 5); the tables exist since migration 0005 and are
    created here with plain SQL in that shape only for an older database."""
    with sqlite3.connect(path) as conn:
        conn.executescript(
            """
            CREATE TABLE IF NOT EXISTS adapters (
                id INTEGER PRIMARY KEY, adapter_id VARCHAR(50) UNIQUE NOT NULL, path TEXT NOT NULL,
                base_model VARCHAR(100) NOT NULL, objective VARCHAR(30) NOT NULL, session_id INTEGER,
                config JSON NOT NULL, data JSON NOT NULL, metrics JSON NOT NULL, eval JSON NOT NULL,
                created_at DATETIME NOT NULL);
            CREATE TABLE IF NOT EXISTS adapter_lessons (
                id INTEGER PRIMARY KEY, adapter_id INTEGER NOT NULL REFERENCES adapters(id) ON DELETE CASCADE,
                lesson_id INTEGER NOT NULL REFERENCES lessons(id) ON DELETE CASCADE, relation VARCHAR(20) NOT NULL);
            """
        )
        if with_rows:
            ev = (
                '{"base": {"pass_at_1": 0.25, "n": 32, "passes": 8, "ci95": [0.133, 0.421]}, '
                '"base_lessons": {"pass_at_1": 0.3125, "n": 32, "passes": 10, "ci95": [0.18, 0.486]}, '
                '"adapter": {"pass_at_1": 0.5, "n": 32, "passes": 16, "ci95": [0.336, 0.664]}, '
                '"adapter_lessons": {"pass_at_1": 0.46875, "n": 32, "passes": 15, "ci95": [0.309, 0.635]}, '
                '"heldout_tasks": 32, "distilled": ["chain_sum-00001"]}'
            )
            conn.execute(
                "INSERT INTO adapters (id, adapter_id, path, base_model, objective, session_id, config, data, metrics, eval, "
                "created_at) VALUES (1, 'adapter-0001', '/runs/adapters/adapter-0001', 'smollm2@abc', "
                "'guided', 1, '{\"r\": 16}', '{}', '{\"steps\": 120, \"final_loss\": 0.4321, \"tokens_per_s\": 310.5}', "
                "?, '2025-03-14 10:00:00.000000')",
                (ev,),
            )
            conn.execute("INSERT INTO adapter_lessons VALUES (1, 1, 1, 'in_context')")
            conn.execute("INSERT INTO adapter_lessons VALUES (2, 1, 1, 'distilled')")


async def settle(pilot) -> None:
    """Let workers finish, their call_from_thread updates land, and widgets lay out on idle
    (DataTable sizes its columns in an idle handler)."""
    quiet = 0
    for _ in range(200):  # until no worker has run for 3 rounds in a row (at most ~10 s on a loaded machine)
        await pilot.pause(0.02)
        busy = any(not w.is_finished for w in pilot.app.workers if w.group != "poll")
        quiet = 0 if busy else quiet + 1
        if quiet >= 3:
            break
