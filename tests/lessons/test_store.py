"""LessonStore: opening, sessions, tasks, episodes and curation, lessons, evaluations, stats."""

from __future__ import annotations

import os
import socket
import sqlite3
import sys
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from lesson_texts import DISTINCT_LESSONS
from sqlalchemy import create_engine, event, select
from sqlalchemy import text as sql_text

from lessons.db.schema import EpisodeRow
from lessons.library.curation import Provenance
from lessons.library.store import (
    EpisodeRecord,
    LessonStore,
    RolloutRecord,
    StoreError,
    normalise_lesson_text,
)
from lessons.ops import AddOp, LessonTag, Reflection

# --------------------------------------------------------------------------- helpers


@dataclass
class FakeTask:
    task_key: str
    family: str = "chain_sum"
    split: str = "train"
    question: str = "What is 2 + 3?"
    answer: str = "5"
    source: str = "reasoning_gym"
    metadata: dict[str, Any] = field(default_factory=dict)


def rollout(idx: int, reward: float, guided: bool = False) -> RolloutRecord:
    return RolloutRecord(
        idx=idx,
        messages=[{"role": "system", "content": "sys"}, {"role": "user", "content": "q"}],
        completion=f"answer {idx}",
        extracted_answer=str(idx),
        reward=reward,
        critique="ok" if reward >= 1 else "wrong",
        prompt_tokens=10,
        completion_tokens=5,
        finish_reason="stop",
        latency_s=0.5,
        guided=guided,
    )


def episode(
    session_id: int,
    key: str,
    task_key: str = "chain_sum/train/00000",
    rewards: tuple[float, ...] = (1.0, 0.0),
    context: list[str] | None = None,
    add: list[AddOp] | None = None,
    tags: list[LessonTag] | None = None,
    reflection: bool = True,
    rnd: int = 1,
) -> EpisodeRecord:
    return EpisodeRecord(
        session_id=session_id,
        episode_key=key,
        round=rnd,
        task_key=task_key,
        system_prompt="You are a solver.",
        lessons_in_context=context or [],
        rollouts=[rollout(i, r) for i, r in enumerate(rewards)],
        reflection=Reflection(analysis="the winners added carefully", add=add or [], tags=tags or [])
        if reflection
        else None,
        reflection_raw="{...}",
    )


def count(path: Path, table: str) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]


@pytest.fixture
def sid(store: LessonStore) -> int:
    session_id = store.create_session("s1", {"rollouts": 2}, seed=7)
    store.upsert_tasks(session_id, [FakeTask(f"chain_sum/train/{i:05d}") for i in range(3)])
    return session_id


# --------------------------------------------------------------------------- opening


def test_open_fresh_db_uses_wal(store: LessonStore, db_path: Path) -> None:
    assert db_path.exists()
    assert store.sqlite_path == db_path
    assert store.url.startswith("sqlite:///")
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with store._engine.connect() as conn:  # per-connection pragmas of the store's own pool
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


def test_url_and_bare_path_open_the_same_file(store: LessonStore, db_path: Path) -> None:
    store.create_session("via-path", {}, 1)
    with LessonStore(f"sqlite:///{db_path}") as other:
        assert other.sqlite_path == db_path
        assert other.get_session("via-path") is not None


def test_writes_take_the_writers_lock_and_reads_do_not(store: LessonStore) -> None:
    """SQLite: a write begins IMMEDIATE (the file's write lock), a read plain BEGIN. PostgreSQL: a write
    takes the writers' advisory lock first thing, a read takes none."""
    statements: list[str] = []
    event.listen(store._engine, "before_cursor_execute", lambda c, cur, stmt, *a: statements.append(stmt))
    store.create_session("s", {}, 1)
    n_write = len(statements)
    store.get_session("s")
    if store.is_sqlite:
        assert [s for s in statements if s.startswith("BEGIN")] == ["BEGIN IMMEDIATE", "BEGIN"]
    else:
        locks = [i for i, s in enumerate(statements) if "pg_advisory_xact_lock" in s]
        assert locks == [0] and n_write > 1  # the write's first statement; the read took none


def test_missing_directory_is_a_one_line_store_error(tmp_path: Path) -> None:
    path = tmp_path / "no-such-dir" / "arena.db"
    with pytest.raises(StoreError) as err:
        LessonStore(str(path))
    msg = str(err.value)
    assert msg.startswith(f"cannot open database {path}: ") and "does not exist" in msg
    assert "\n" not in msg
    assert not path.parent.exists()  # never created


def test_parent_is_a_file_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("x")
    with pytest.raises(StoreError, match="is not a directory") as err:
        LessonStore(str(tmp_path / "plain" / "arena.db"))
    assert "\n" not in str(err.value)


def test_path_is_a_directory_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is a directory"):
        LessonStore(str(tmp_path))


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_directory_is_a_store_error(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(StoreError, match="not writable") as err:
            LessonStore(str(ro / "arena.db"))
        assert "\n" not in str(err.value)
    finally:
        ro.chmod(0o700)


@pytest.mark.parametrize("target", ["directory", "file"])
def test_unwritable_path_is_a_store_error_even_as_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str
) -> None:
    """The permission check itself, with os.access faked (root passes every real check)."""
    path = tmp_path / "arena.db"
    path.write_bytes(b"")
    denied = tmp_path if target == "directory" else path
    real_access = os.access
    monkeypatch.setattr(
        "lessons.db.engine.os.access", lambda p, mode: False if Path(p) == denied else real_access(p, mode)
    )
    with pytest.raises(StoreError, match=f"{target} is not writable|{target} .* is not writable"):
        LessonStore(str(path))


def test_non_database_file_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(os.urandom(8192))
    with pytest.raises(StoreError, match="not a database") as err:
        LessonStore(str(path))
    assert str(err.value).startswith(f"cannot open database {path}: ")
    assert "\n" not in str(err.value)


def test_newer_schema_revision_is_a_store_error(db_path: Path) -> None:
    LessonStore(str(db_path)).close()
    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999_from_the_future'")
    with pytest.raises(StoreError, match="9999_from_the_future") as err:
        LessonStore(str(db_path))
    assert "does not know" in str(err.value) and "\n" not in str(err.value)


# --------------------------------------------------------------------------- sessions


def test_create_and_get_session(store: LessonStore) -> None:
    sid = store.create_session("s1", {"rollouts": 4, "families": ["chain_sum"]}, seed=42)
    info = store.get_session("s1")
    assert info is not None
    assert (info.id, info.name, info.seed, info.status) == (sid, "s1", 42, "running")
    assert info.config == {"rollouts": 4, "families": ["chain_sum"]}
    assert info.created_at.tzinfo is UTC and info.finished_at is None and info.summary is None
    assert store.get_session("nope") is None

    store.set_session_status(sid, "finished", summary={"pass_at_1": 0.5})
    info = store.get_session("s1")
    assert info.status == "finished" and info.summary == {"pass_at_1": 0.5}
    assert info.finished_at is not None and info.finished_at >= info.created_at
    store.set_session_status(sid, "running")  # resumed: summary kept, finished_at cleared
    info = store.get_session("s1")
    assert info.status == "running" and info.finished_at is None and info.summary == {"pass_at_1": 0.5}
    with pytest.raises(ValueError):
        store.set_session_status(sid, "done")
    with pytest.raises(StoreError, match="no session"):
        store.set_session_status(999, "failed")


def test_duplicate_session_name(store: LessonStore) -> None:
    store.create_session("s1", {}, 1)
    with pytest.raises(StoreError) as err:
        store.create_session("s1", {}, 2)
    assert str(err.value) == "session s1 already exists; use --resume s1 or pick another --session"


def test_new_session_name_adds_suffix_when_taken(store: LessonStore) -> None:
    now = datetime(2025, 3, 4, 5, 6, 7)
    assert store.new_session_name(now) == "run-20250304-050607"
    store.create_session("run-20250304-050607", {}, 1)
    assert store.new_session_name(now) == "run-20250304-050607-2"
    store.create_session("run-20250304-050607-2", {}, 1)
    assert store.new_session_name(now) == "run-20250304-050607-3"


def test_upsert_tasks_is_idempotent(store: LessonStore, db_path: Path) -> None:
    sid = store.create_session("s1", {}, 1)
    tasks = [FakeTask("chain_sum/train/00000", metadata={"terms": 2}), FakeTask("chain_sum/heldout/00000", split="heldout")]
    ids = store.upsert_tasks(sid, tasks)
    assert set(ids) == {t.task_key for t in tasks} and len(set(ids.values())) == 2
    assert store.upsert_tasks(sid, tasks + [tasks[0]]) == ids
    more = store.upsert_tasks(sid, [FakeTask("chain_sum/train/00001"), tasks[1]])
    assert more["chain_sum/heldout/00000"] == ids["chain_sum/heldout/00000"]
    assert count(db_path, "tasks") == 3
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT metadata FROM tasks WHERE task_key='chain_sum/train/00000'").fetchone()[0] == '{"terms": 2}'
    other = store.create_session("s2", {}, 1)  # keys are unique per session, not globally
    assert store.upsert_tasks(other, tasks[:1])[tasks[0].task_key] != ids[tasks[0].task_key]
    with pytest.raises(ValueError, match="split"):
        store.upsert_tasks(sid, [FakeTask("x", split="test")])


# --------------------------------------------------------------------------- episodes and curation


def test_record_episode_writes_rollouts_lessons_and_events(store: LessonStore, sid: int, db_path: Path) -> None:
    rec = episode(
        sid,
        "r001-chain_sum/train/00000",
        rewards=(1.0, 0.0, 0.5),
        add=[
            AddOp(text="Add the numbers left to right.", scope="chain_sum", rationale="winners did"),
            AddOp(text="State the final answer on its own line.", rationale="format"),
        ],
    )
    res = store.record_episode(rec)
    assert res is not None
    assert res.lessons_added == ["chain_sum-00001", "global-00001"]
    assert (res.upvoted, res.downvoted, res.rejected_ops) == ([], [], [])
    assert store.finished_episode_keys(sid) == {"r001-chain_sum/train/00000"}
    assert count(db_path, "rollouts") == 3

    with sqlite3.connect(db_path) as conn:
        mean, refl = conn.execute("SELECT mean_reward, reflection FROM episodes WHERE id=?", (res.episode_id,)).fetchone()
        rollout_ids = [r[0] for r in conn.execute("SELECT id FROM rollouts WHERE episode_id=? ORDER BY idx", (res.episode_id,))]
    assert mean == pytest.approx(0.5)
    assert '"raw": "{...}"' in refl

    lesson = store.get_lesson("chain_sum-00001")
    assert lesson is not None
    assert (lesson.text, lesson.scope, lesson.status) == ("Add the numbers left to right.", "chain_sum", "candidate")
    assert (lesson.helpful, lesson.harmful, lesson.neutral, lesson.times_in_context) == (0, 0, 0, 0)
    (ev,) = store.lesson_events("chain_sum-00001")
    assert (ev.op, ev.before, ev.after, ev.rationale) == ("ADD", None, "Add the numbers left to right.", "winners did")
    assert ev.episode_id == res.episode_id and ev.rollout_ids == rollout_ids
    assert store.get_lesson("chain_sum-99999") is None and store.lesson_events("nope") == []


def test_record_episode_is_idempotent(store: LessonStore, sid: int, db_path: Path) -> None:
    rec = episode(sid, "r001-a", add=[AddOp(text="Check the sign of every term.", scope="chain_sum")])
    assert store.record_episode(rec) is not None
    before = {t: count(db_path, t) for t in ("episodes", "rollouts", "lessons", "lesson_events")}
    assert store.record_episode(rec) is None
    assert {t: count(db_path, t) for t in before} == before == {
        "episodes": 1, "rollouts": 2, "lessons": 1, "lesson_events": 1,
    }  # fmt: skip


def test_latest_session_with_episodes(store: LessonStore, sid: int) -> None:
    assert store.latest_session_with_episodes() is None  # a session without episodes does not count
    store.record_episode(episode(sid, "r001-a"))
    later = store.create_session("s2", {}, seed=1)  # newer, but no episodes yet
    assert later > sid and store.latest_session_with_episodes() == "s1"


def test_repositories_open_alone(db_path: Path) -> None:
    from lessons.library.sessions import SessionRepository

    with SessionRepository(str(db_path)) as repo:
        repo.create_session("alone", {}, seed=0)
    with LessonStore(str(db_path)) as st:
        assert st.get_session("alone") is not None


def test_record_episode_without_reflection(store: LessonStore, sid: int, db_path: Path) -> None:
    res = store.record_episode(episode(sid, "r001-a", reflection=False))
    assert res is not None and res.lessons_added == [] and count(db_path, "lesson_events") == 0


def test_unknown_task_key_is_a_store_error(store: LessonStore, sid: int, db_path: Path) -> None:
    with pytest.raises(StoreError, match="upsert_tasks"):
        store.record_episode(episode(sid, "r001-a", task_key="nope/train/00000"))
    assert count(db_path, "episodes") == 0  # rolled back


def test_tags_update_counters_only_for_lessons_in_context(store: LessonStore, sid: int) -> None:
    store.record_episode(
        episode(
            sid,
            "r001-a",
            add=[
                AddOp(text="Add the numbers left to right.", scope="chain_sum"),
                AddOp(text="Write the answer as a bare integer.", scope="chain_sum"),
                AddOp(text="Re-read the question before answering.", scope="global"),
            ],
        )
    )
    res = store.record_episode(
        episode(
            sid,
            "r001-b",
            context=["chain_sum-00001", "chain_sum-00002", "chain_sum-00001", "ghost-00001"],
            tags=[
                LessonTag(lesson_id="chain_sum-00001", tag="helpful"),
                LessonTag(lesson_id="chain_sum-00002", tag="HARMFUL"),
                LessonTag(lesson_id="global-00001", tag="helpful"),  # not in context
                LessonTag(lesson_id="chain_sum-00001", tag="harmful"),  # second tag of one lesson
                LessonTag(lesson_id="ghost-00001", tag="neutral"),  # in context, not in library
            ],
        )
    )
    assert res is not None
    assert res.upvoted == ["chain_sum-00001"] and res.downvoted == ["chain_sum-00002"] and res.neutral == []
    assert len(res.rejected_ops) == 3
    assert any("global-00001" in r and "not in context" in r for r in res.rejected_ops)
    res = store.record_episode(
        episode(sid, "r001-c", context=["chain_sum-00002"], tags=[LessonTag(lesson_id="chain_sum-00002", tag="neutral")])
    )
    assert res.neutral == ["chain_sum-00002"]

    one, two, glob = (store.get_lesson(i) for i in ("chain_sum-00001", "chain_sum-00002", "global-00001"))
    assert (one.helpful, one.harmful, one.neutral, one.times_in_context) == (1, 0, 0, 1)
    assert (two.helpful, two.harmful, two.neutral, two.times_in_context) == (0, 1, 1, 2)
    assert (glob.helpful, glob.harmful, glob.neutral, glob.times_in_context) == (0, 0, 0, 0)
    assert [e.op for e in store.lesson_events("chain_sum-00001")] == ["ADD", "UPVOTE"]
    assert [e.op for e in store.lesson_events("chain_sum-00002")] == ["ADD", "DOWNVOTE", "TAG_NEUTRAL"]
    assert store.lesson_events("chain_sum-00001")[1].rationale == "the winners added carefully"


def test_duplicate_add_becomes_upvote(store: LessonStore, sid: int, db_path: Path) -> None:
    store.record_episode(episode(sid, "r001-a", add=[AddOp(text="Add the numbers, left to right.", scope="chain_sum")]))
    res = store.record_episode(
        episode(
            sid,
            "r001-b",
            add=[
                AddOp(text="  add the numbers left   to right ", scope="chain_sum", rationale="again"),
                AddOp(text="Add the numbers, left to right.", scope="global"),  # other scope: a new lesson
            ],
        )
    )
    assert res.lessons_added == ["global-00001"] and res.upvoted == ["chain_sum-00001"]
    assert count(db_path, "lessons") == 2
    lesson = store.get_lesson("chain_sum-00001")
    assert lesson.helpful == 1 and lesson.text == "Add the numbers, left to right."
    assert [e.op for e in store.lesson_events("chain_sum-00001")] == ["ADD", "UPVOTE"]
    assert normalise_lesson_text("Add the numbers, LEFT to right!") == "add the numbers left to right"


def test_duplicate_of_retired_lesson_is_a_new_lesson(store: LessonStore, sid: int, db_path: Path) -> None:
    store.record_episode(episode(sid, "r001-a", add=[AddOp(text="Carry the ones carefully.", scope="chain_sum")]))
    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE lessons SET status='retired'")
    res = store.record_episode(episode(sid, "r001-b", add=[AddOp(text="Carry the ones carefully.", scope="chain_sum")]))
    assert res.lessons_added == ["chain_sum-00002"] and res.upvoted == []


def test_lesson_ids_increase_per_scope(store: LessonStore, sid: int) -> None:
    res1 = store.record_episode(
        episode(
            sid,
            "r001-a",
            add=[AddOp(text="Carry the tens digit when a column overflows.", scope="chain_sum"), AddOp(text="Read the whole question before starting.")],
        )
    )
    res2 = store.record_episode(
        episode(
            sid,
            "r001-b",
            add=[AddOp(text="Keep the minus sign of negative terms.", scope="Chain_Sum"), AddOp(text="Spell the word out letter by letter.", scope="letter_counting")],
        )
    )
    assert res1.lessons_added == ["chain_sum-00001", "global-00001"]
    assert res2.lessons_added == ["chain_sum-00002", "letter_counting-00001"]


def test_active_lessons_ordering_and_filtering(store: LessonStore, sid: int, db_path: Path) -> None:
    store.record_episode(
        episode(
            sid,
            "r001-a",
            add=[
                AddOp(text="Carry the tens digit when a column overflows.", scope="chain_sum"),
                AddOp(text="Keep the minus sign of negative terms.", scope="chain_sum"),
                AddOp(text="Read the whole question before starting.", scope="global"),
                AddOp(text="Spell the word out letter by letter.", scope="letter_counting"),
            ],
        )
    )
    # chain_sum-00002: +1 helpful; global-00001: +2 helpful -1 harmful (net 1, older than none)
    store.record_episode(
        episode(
            sid,
            "r001-b",
            context=["chain_sum-00002", "global-00001"],
            tags=[LessonTag(lesson_id="chain_sum-00002", tag="helpful"), LessonTag(lesson_id="global-00001", tag="helpful")],
        )
    )
    store.record_episode(
        episode(sid, "r001-c", context=["chain_sum-00001"], tags=[LessonTag(lesson_id="chain_sum-00001", tag="harmful")])
    )
    ids = [lesson.lesson_id for lesson in store.live_lessons("chain_sum")]
    assert ids == ["chain_sum-00002", "global-00001", "chain_sum-00001"]  # net 1 (older first), net 1, net -1
    assert [lesson.lesson_id for lesson in store.live_lessons("letter_counting")] == [
        "global-00001",
        "letter_counting-00001",
    ]
    assert [lesson.lesson_id for lesson in store.live_lessons("other")] == ["global-00001"]
    assert len(store.live_lessons(None)) == 4

    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE lessons SET status='retired' WHERE lesson_id='global-00001'")
    assert [lesson.lesson_id for lesson in store.live_lessons("chain_sum")] == ["chain_sum-00002", "chain_sum-00001"]
    assert [lesson.lesson_id for lesson in store.list_lessons("retired")] == ["global-00001"]
    assert len(store.list_lessons()) == 4
    assert [lesson.lesson_id for lesson in store.list_lessons(scope="chain_sum")] == ["chain_sum-00001", "chain_sum-00002"]
    with pytest.raises(ValueError):
        store.list_lessons("bogus")


# --------------------------------------------------------------------------- evaluations and stats


def test_evaluations_upsert(store: LessonStore, sid: int, db_path: Path) -> None:
    store.record_evaluation(sid, "heldout_before", "heldout", False, [1.0, 0.0, 0.999999999999, 0.5], (0.1, 0.9), {"k": 1})
    ev = store.evaluations(sid)["heldout_before"]
    assert (ev.split, ev.with_lessons, ev.n, ev.passes, ev.pass_at_1) == ("heldout", False, 4, 2, 0.5)
    assert (ev.ci_lo, ev.ci_hi) == (0.1, 0.9)
    assert ev.details == {"k": 1, "rewards": [1.0, 0.0, 0.999999999999, 0.5]}

    store.record_evaluation(sid, "heldout_before", "heldout", True, [1.0], (0.2, 1.0), {"rewards": {"t1": 1.0}})
    store.record_evaluation(sid, "heldout_after", "heldout", True, [], (0.0, 0.0), {})
    evs = store.evaluations(sid)
    assert list(evs) == ["heldout_before", "heldout_after"]
    assert (evs["heldout_before"].n, evs["heldout_before"].passes, evs["heldout_before"].with_lessons) == (1, 1, True)
    assert evs["heldout_before"].details == {"rewards": {"t1": 1.0}}
    assert (evs["heldout_after"].n, evs["heldout_after"].pass_at_1) == (0, 0.0)
    assert count(db_path, "evaluations") == 2
    assert store.evaluations(999) == {}


def test_session_stats(store: LessonStore, sid: int) -> None:
    assert store.session_stats(sid) == {
        "episodes": 0, "rollouts": 0, "guided_rollouts": 0, "mean_reward": 0.0, "lessons_added": 0, "lessons_active": 0,
        "lessons_candidate": 0, "lessons_retired": 0, "reflections_failed": 0, "curation_rejected": 0,
    }  # fmt: skip
    store.record_episode(episode(sid, "r001-a", rewards=(1.0, 0.0, 0.0, 1.0), add=[AddOp(text="Lesson from a.", scope="chain_sum")]))
    rec = episode(sid, "r001-b", rewards=(0.0, 0.0), add=[AddOp(text="Lesson from a.", scope="chain_sum")])  # dup
    rec.rollouts += [rollout(0, 1.0, guided=True), rollout(1, 1.0, guided=True)]
    rec.reflection_error = "tag for unknown lesson"
    rec.reflection.tags = [LessonTag(lesson_id="chain_sum-00009", tag="helpful")]  # not in context: the curator refuses
    store.record_episode(rec)
    with store.read() as s:  # stored with the episode, one line with the reason
        (refused,) = s.scalars(select(EpisodeRow.curation_rejected).where(EpisodeRow.episode_key == "r001-b")).all()
    assert len(refused) == 1 and "chain_sum-00009" in refused[0] and "not in context" in refused[0]
    other = store.create_session("s2", {}, 1)
    store.upsert_tasks(other, [FakeTask("chain_sum/train/00000")])
    store.record_episode(episode(other, "r001-a", rewards=(1.0,), add=[AddOp(text="Lesson from the other session.")]))

    assert store.session_stats(sid) == {
        "episodes": 2,
        "rollouts": 8,
        "guided_rollouts": 2,
        "mean_reward": pytest.approx(2 / 6),
        "lessons_added": 1,
        "lessons_active": 0,
        "lessons_candidate": 2,  # the library, all sessions; the dup ADD upvoted once (< 2 promotes)
        "lessons_retired": 0,
        "reflections_failed": 1,
        "curation_rejected": 1,
    }
    assert store.session_stats(other) == {
        "episodes": 1, "rollouts": 1, "guided_rollouts": 0, "mean_reward": 1.0, "lessons_added": 1, "lessons_active": 0,
        "lessons_candidate": 2, "lessons_retired": 0, "reflections_failed": 0, "curation_rejected": 0,
    }  # fmt: skip
    store.record_episode(episode(sid, "r002-a", rewards=(0.25, 0.75), rnd=2))
    assert store.round_rewards(sid) == {1: [[1.0, 0.0, 0.0, 1.0], [0.0, 0.0]], 2: [[0.25, 0.75]]}
    assert store.round_rewards(999) == {}


# --------------------------------------------------------------------------- concurrency


def test_second_store_reads_while_first_is_open(store: LessonStore, sid: int, db_path: Path) -> None:
    reader = LessonStore(str(db_path))
    try:
        store.record_episode(episode(sid, "r001-a", add=[AddOp(text="Visible to the reader.", scope="chain_sum")]))
        assert [lesson.lesson_id for lesson in reader.live_lessons("chain_sum")] == ["chain_sum-00001"]
        assert reader.get_session("s1").id == sid
        # WAL: a reader is not blocked by a writer holding an open write transaction.
        writer = sqlite3.connect(db_path, isolation_level=None, timeout=0.1)
        try:
            writer.execute("BEGIN IMMEDIATE")
            writer.execute("UPDATE lessons SET helpful = 99")
            assert reader.get_lesson("chain_sum-00001").helpful == 0  # uncommitted, not seen, no wait
            writer.execute("COMMIT")
        finally:
            writer.close()
        assert reader.get_lesson("chain_sum-00001").helpful == 99
        assert reader.session_stats(sid)["episodes"] == 1
    finally:
        reader.close()


def test_concurrent_writers_serialise(store: LessonStore, sid: int, db_path: Path) -> None:
    second = LessonStore(str(db_path))
    errors: list[BaseException] = []

    def work(st: LessonStore, prefix: str) -> None:
        try:
            for i in range(10):
                st.record_episode(
                    episode(sid, f"{prefix}-{i}", add=[AddOp(text=DISTINCT_LESSONS[i + (10 if prefix == "b" else 0)], scope="chain_sum")])
                )
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(st, p)) for st, p in ((store, "a"), (second, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    second.close()
    assert errors == []
    ids = sorted(lesson.lesson_id for lesson in store.list_lessons())
    assert ids == [f"chain_sum-{n:05d}" for n in range(1, 21)]


# --------------------------------------------------------------------------- PostgreSQL: bad input


def _closed_loopback_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the socket is


def test_an_unreachable_postgres_server_is_a_one_line_store_error() -> None:
    url = f"postgresql://arena:secret@127.0.0.1:{_closed_loopback_port()}/library"
    with pytest.raises(StoreError) as err:
        LessonStore(url)
    msg = str(err.value)
    assert msg.startswith(f"cannot open database postgresql+psycopg://arena:***@127.0.0.1:{url.rsplit(':', 1)[1].split('/')[0]}/library: ")
    assert "Connection refused" in msg and "secret" not in msg and "\n" not in msg


def test_a_postgres_url_with_a_bad_port_or_a_query_password_is_one_line_without_the_password() -> None:
    with pytest.raises(StoreError) as err:
        LessonStore("postgresql://arena:secret@127.0.0.1:notaport/library")
    assert str(err.value) == "cannot open database postgresql://arena:***@127.0.0.1:notaport/library: the port must be a number"
    with pytest.raises(StoreError) as err:
        LessonStore(f"postgresql://arena@127.0.0.1:{_closed_loopback_port()}/library?password=secret")
    assert "password=***" in str(err.value) and "secret" not in str(err.value)


@pytest.mark.parametrize("scheme", ["postgresql", "postgresql+psycopg"])
def test_case_005_a_postgres_password_with_a_slash_never_reaches_a_store_error(scheme: str) -> None:
    """CASE-005: a base64-made password ("/", "+", "=") is masked whole, in both accepted schemes."""
    with pytest.raises(StoreError) as err:
        LessonStore(f"{scheme}://arena:ab/cd+e=@127.0.0.1:notaport/x")
    assert str(err.value) == f"cannot open database {scheme}://arena:***@127.0.0.1:notaport/x: the port must be a number"
    with pytest.raises(StoreError) as err:
        LessonStore(f"{scheme}://arena:ab/cd@127.0.0.1:{_closed_loopback_port()}/x")
    assert "postgresql+psycopg://arena:***@127.0.0.1:" in str(err.value) and "ab/cd" not in str(err.value)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://arena:Kq1@Zq2@127.0.0.1:{port}/db",  # a raw "@" inside the password
        "postgresql+psycopg://arena:@Zq2@127.0.0.1:{port}/db",  # the password starts with one
        "postgresql://arena:a@b@c@127.0.0.1:{port}/db",  # more than one
        "sqlite://arena:Kq1@Zq2@localhost/x.db",  # any backend
    ],
)
def test_case_005_a_raw_at_sign_in_a_password_is_refused_before_the_driver_sees_any_of_it(url: str) -> None:
    """CASE-005's kind: SQLAlchemy ends a password at its first "@" and gives the rest to the driver as the
    host, whose "failed to resolve host 'Zq2@127.0.0.1'" printed part of the password. Refused, no connection."""
    url = url.format(port=_closed_loopback_port())
    with pytest.raises(StoreError) as err:
        LessonStore(url)
    msg = str(err.value)
    scheme = url.split("://")[0]
    assert msg.startswith(f"cannot open database {scheme}://arena:***@127.0.0.1:") or msg.startswith(
        f"cannot open database {scheme}://arena:***@localhost/"
    )
    assert msg.endswith(": the user name or password holds a raw '@'; percent-encode it as %40")
    for part in ("Kq1", "Zq2", "@b", "b@c"):
        assert part not in msg


def test_case_005_a_percent_encoded_at_sign_reaches_the_server_with_the_password_masked() -> None:
    url = f"postgresql://arena:Kq1%40Zq2@127.0.0.1:{_closed_loopback_port()}/db"
    with pytest.raises(StoreError) as err:
        LessonStore(url)
    msg = str(err.value)
    assert msg.startswith("cannot open database postgresql+psycopg://arena:***@127.0.0.1:") and "Connection refused" in msg
    assert "Kq1" not in msg and "Zq2" not in msg and "%40" not in msg


def test_a_postgres_url_without_the_driver_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg raises ImportError, as when it is not installed
    with pytest.raises(StoreError) as err:
        LessonStore("postgresql://arena@127.0.0.1:5432/library")
    msg = str(err.value)
    assert msg.startswith("cannot open database postgresql+psycopg://arena@127.0.0.1:5432/library: ")
    assert "pip install 'lesson-arena[postgres]'" in msg and "\n" not in msg


def test_a_postgres_library_of_a_newer_schema_is_refused_and_kept(postgres_url: str) -> None:
    with LessonStore(postgres_url) as st, st.curate() as c:
        c.add("Keep the minus sign of negative terms.", "chain_sum", "", Provenance(origin={"by": "cli"}))
    engine = create_engine(postgres_url)
    try:
        with engine.begin() as conn:
            conn.execute(sql_text("UPDATE alembic_version SET version_num = '9999_from_the_future'"))
        with pytest.raises(StoreError, match="9999_from_the_future") as err:
            LessonStore(postgres_url)
        assert "does not know" in str(err.value) and "\n" not in str(err.value)
        with engine.connect() as conn:  # nothing stored was touched
            assert conn.execute(sql_text("SELECT lesson_id FROM lessons")).scalars().all() == ["chain_sum-00001"]
    finally:
        engine.dispose()
