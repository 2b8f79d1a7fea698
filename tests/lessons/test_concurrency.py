"""Episodes in flight (`--concurrency`): same stored results as one at a time, no duplicate rows.

Fake policies (no model) that sleep a little per call, so episodes really overlap in threads.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import time

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver

from agents.backends.fake import FakePolicy
from arena.config import SessionConfig
from arena.episode.context import Roles
from arena.session.rounds import run_bounded
from arena.session.runner import run_session
from arena.tasks.sources import load_tasks
from lessons.library.store import LessonStore


def write_tasks(path, n=10):
    lines = [json.dumps({"question": f"Compute {10 + i} plus {20 + 3 * i}.", "answer": str(30 + 4 * i), "family": "adding"})
             for i in range(n)]
    path.write_text("\n".join(lines) + "\n")
    return path


class Overlap:
    """Counts calls in flight at once; sleeps a call-dependent few milliseconds so threads interleave."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0

    def __call__(self, key: str) -> None:
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(0.002 + (sum(map(ord, key)) % 7) / 1000)
        with self.lock:
            self.now -= 1


def make_roles(overlap: Overlap, crash_on: int | None = None) -> Roles:
    """Solver: right on rollout 0 only for tasks whose first number is even, and on rollout 1 too
    once lessons are in its prompt; so rewards depend on what the library held when the episode
    started. Teacher: one lesson per task (numbered by the task's first number) and a helpful tag for
    every lesson shown; hints are the fixed feedback/answer templates."""
    teacher_calls = {"n": 0}
    lock = threading.Lock()

    def solver(messages, i):
        q = messages[-1]["content"]
        overlap(q + str(i))
        a, b = map(int, re.findall(r"\d+", q.split("Hint")[0])[:2])
        with_lessons = "<lessons>" in messages[0]["content"]
        right = (a % 2 == 0 and i == 0) or (with_lessons and i == 1) or "Hint" in q and i == 2
        return f"{a} + {b}. <answer>{a + b if right else a + b + 1}</answer>"

    def teacher(messages, i):
        text = messages[-1]["content"]
        overlap(text[:200] + str(i))
        with lock:
            teacher_calls["n"] += 1
            n = teacher_calls["n"]
        if crash_on is not None and n == crash_on:
            raise KeyboardInterrupt  # Ctrl-C / kill in the middle of a round
        nums = re.findall(r"Compute (\d+)", text)
        first = nums[0] if nums else "0"
        shown = re.findall(r"^- (\S+):", text, re.M)
        return json.dumps({
            "analysis": "Attempts that added the tens separately were right.",
            "add": [{"text": f"Check the tens column twice before answering, rule {'abcdefghij'[int(first) % 10]}.",
                     "scope": "adding"}],
            "tags": [{"lesson_id": lid, "tag": "helpful"} for lid in shown],
        })

    return Roles(FakePolicy(solver, "solver"), FakePolicy(teacher, "teacher"))


def stored(db: str) -> dict[str, list]:
    """Every stored result that matters, in a comparable form (no ids of other tables, times or latencies)."""
    con = sqlite3.connect(db)
    q = lambda sql: [tuple(r) for r in con.execute(sql)]  # noqa: E731
    out = {
        "episodes": q("SELECT e.episode_key, e.round, e.system_prompt, e.lessons_in_context, e.reflection, "
                      "e.reflection_error, e.mean_reward FROM episodes e ORDER BY e.id"),
        "rollouts": q("SELECT e.episode_key, r.idx, r.guided, r.messages, r.completion, r.extracted_answer, r.reward, "
                      "r.critique, r.finish_reason FROM rollouts r JOIN episodes e ON e.id = r.episode_id ORDER BY r.id"),
        "lessons": q("SELECT lesson_id, text, scope, status, helpful, harmful, neutral, times_in_context FROM lessons ORDER BY id"),
        "events": q("SELECT l.lesson_id, ev.op, ev.before, ev.after, e.episode_key FROM lesson_events ev "
                    "JOIN lessons l ON l.id = ev.lesson_id LEFT JOIN episodes e ON e.id = ev.episode_id ORDER BY ev.id"),
        "hints": q("SELECT t.task_key, h.mode, h.text, h.times_used, h.successes FROM hints h JOIN tasks t ON t.id = h.task_id ORDER BY h.id"),
        "evaluations": q("SELECT name, pass_at_1, n FROM evaluations ORDER BY id"),
    }
    con.close()
    return out


def session(tmp_path, name: str, concurrency: int, overlap: Overlap, crash_on: int | None = None, resume: bool = False):
    db = str(tmp_path / f"{name}.db")
    tasks = write_tasks(tmp_path / "adding.jsonl")
    splits = load_tasks([], tasks, n_train=6, n_heldout=3, seed=2)
    cfg = SessionConfig(db=db, families=[], tasks_file=tasks, train_tasks=6, heldout_tasks=3, rounds=3, rollouts=4,
                        concurrency=concurrency)
    conn = sqlite3.connect(str(tmp_path / f"{name}.ckpt"), check_same_thread=False)
    store = LessonStore(db)
    try:
        return run_session(cfg, store, make_roles(overlap, crash_on), splits, "s", resume=resume,
                           checkpointer=SqliteSaver(conn)), db
    finally:
        store.close()
        conn.close()


def test_concurrency_does_not_change_stored_results(tmp_path):
    one, many = Overlap(), Overlap()
    summary1, db1 = session(tmp_path, "one", 1, one)
    summary4, db4 = session(tmp_path, "four", 4, many)
    assert one.most == 1 and many.most > 1  # the second session really ran episodes at once
    a, b = stored(db1), stored(db4)
    assert len(a["episodes"]) == 18 and len(a["rollouts"]) >= 18 * 4
    assert a["lessons"] and a["events"] and a["hints"]  # the comparison covers lessons, curation ops and hints
    for table in a:
        assert a[table] == b[table], table
    for key in ("episodes", "rollouts", "mean_reward", "lessons_added", "rounds", "heldout_after"):
        assert getattr(summary1, key) == getattr(summary4, key), key
    # round 1 saw an empty library, rounds 2 and 3 the lessons of the rounds before (rewards rise)
    assert [r.mean_reward for r in summary1.rounds] == sorted(r.mean_reward for r in summary1.rounds)
    assert summary1.rounds[0].mean_reward < summary1.rounds[1].mean_reward


def test_interrupted_concurrent_session_resumes_without_duplicate_rows(tmp_path):
    reference, _ = session(tmp_path, "ref", 1, Overlap())
    with pytest.raises(KeyboardInterrupt):
        session(tmp_path, "cut", 4, Overlap(), crash_on=9)  # a teacher call in round 2
    summary, db = session(tmp_path, "cut", 4, Overlap(), resume=True)
    con = sqlite3.connect(db)
    (episodes, distinct), = con.execute("SELECT COUNT(*), COUNT(DISTINCT session_id || '/' || episode_key) FROM episodes")
    (rollouts, distinct_r), = con.execute("SELECT COUNT(*), COUNT(DISTINCT episode_id || '/' || idx) FROM rollouts")
    (lessons, distinct_l), = con.execute("SELECT COUNT(*), COUNT(DISTINCT text) FROM lessons")
    (hint_rows, hinted_tasks), = con.execute("SELECT COUNT(*), COUNT(DISTINCT task_id || '/' || text) FROM hints")
    con.close()
    assert episodes == distinct == 18
    assert rollouts == distinct_r
    assert lessons == distinct_l
    assert hint_rows == hinted_tasks
    # the resumed session stored exactly what an uninterrupted, sequential one stores
    assert stored(db) == stored(str(tmp_path / "ref.db"))
    assert summary.rounds == reference.rounds and summary.lessons_added == reference.lessons_added


def test_run_bounded_keeps_at_most_n_in_flight_and_reraises_the_first_error():
    overlap = Overlap()
    done: list[int] = []

    def work(i: int) -> None:
        overlap(str(i) * 3)
        time.sleep(0.01)
        done.append(i)

    run_bounded(work, list(range(12)), 3)
    assert sorted(done) == list(range(12)) and overlap.most <= 3 and overlap.most > 1

    started: list[int] = []

    def fails(i: int) -> None:
        started.append(i)
        if i == 1:
            raise ValueError("episode 1 failed")
        time.sleep(0.05)

    with pytest.raises(ValueError, match="episode 1 failed"):
        run_bounded(fails, list(range(20)), 2)
    assert len(started) < 20  # no new item starts after the failure

    order: list[int] = []
    run_bounded(order.append, [3, 1, 2], 1)  # concurrency 1: in the caller's thread, in order
    assert order == [3, 1, 2]
