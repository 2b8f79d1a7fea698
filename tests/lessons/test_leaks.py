"""`arena lessons leaks`: held-out questions and distinctive answers in lessons or hints are reported."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from lessons.library.leaks import find_leaks
from lessons.library.store import EpisodeRecord, HintRecord, LessonStore, RolloutRecord
from lessons.ops import AddOp, Reflection

PREFIX = "State the final answer to the following arithmetic problem: "


def task(key, split, question, answer):
    return SimpleNamespace(task_key=key, family="chain_sum", split=split, question=question, answer=answer,
                           source="jsonl", metadata={})


def add_lessons(store, sid, texts, hint=None):
    for i, text in enumerate(texts):
        store.record_episode(EpisodeRecord(
            session_id=sid, episode_key=f"e-{text}", round=1, task_key="chain_sum/train/00000", system_prompt="s",
            lessons_in_context=[],
            rollouts=[RolloutRecord(0, [{"role": "user", "content": "q"}], "c", "1", 0.0, "x", 1, 1, "stop", 0.1)],
            reflection=Reflection(add=[AddOp(text=text, scope="chain_sum")]),
            hint=HintRecord("plan", hint) if hint and i == 0 else None,
        ))


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "a.db"
    store = LessonStore(str(path))
    sid = store.create_session("s", {}, 0)
    store.upsert_tasks(sid, [
        task("chain_sum/train/00000", "train", PREFIX + "12 + 30 =", "42"),
        task("chain_sum/train/00001", "train", PREFIX + "3 + 3 =", "6"),
        task("chain_sum/heldout/00000", "heldout", PREFIX + "15 - 43 =", "-28"),
        task("chain_sum/heldout/00001", "heldout", PREFIX + "812 + 1419 =", "2231"),
        task("chain_sum/heldout/00002", "heldout", PREFIX + "2 + 4 =", "6"),
    ])
    yield path, store, sid
    store.close()


def test_true_leaks_are_reported_with_the_task(db):
    path, store, sid = db
    add_lessons(store, sid, [
        "Remember that 15-43 comes out negative.",  # the question's fingerprint, spacing changed
        "Large sums like 2231 need care with carries.",  # a distinctive answer on its own
    ], hint="For 812 + 1419 line up the digits.")
    leaks = {(x.source, x.source_id, x.task_key, x.kind) for x in find_leaks(store)}
    assert leaks == {
        ("lesson", "chain_sum-00001", "chain_sum/heldout/00000", "question"),
        ("lesson", "chain_sum-00002", "chain_sum/heldout/00001", "answer"),
        ("hint", "hint-1", "chain_sum/heldout/00001", "question"),
    }


def test_coincidences_with_common_answers_are_not_leaks(db):
    path, store, sid = db
    # "6" is a short number and the answer of two tasks: too common to be evidence alone;
    # "-28" is a short number too; "42" belongs to a train task, not a held-out one
    add_lessons(store, sid, ["Check that 6 is not the sum of a pair twice.", "A result of -28 means the second term was larger.",
                             "The sum 42 appears often."])
    assert find_leaks(store) == []
    # the same common answer *with* its question is a leak
    add_lessons(store, sid, ["Solve 2 + 4 = 6 by counting up."])
    [leak] = find_leaks(store)
    assert leak.task_key == "chain_sum/heldout/00002" and leak.kind == "question+answer"


def test_cli_exit_codes(db):
    path, store, sid = db

    def leaks_cli(*extra):
        return subprocess.run([sys.executable, "-m", "arena.cli", "lessons", "leaks", "--db", str(path), *extra],
                              capture_output=True, text=True, timeout=120)

    ok = leaks_cli()
    assert ok.returncode == 0 and "no leaks" in ok.stdout
    add_lessons(store, sid, ["Remember that 15 - 43 comes out negative."])
    bad = leaks_cli("--json")
    assert bad.returncode == 1
    assert [x["task_key"] for x in json.loads(bad.stdout)] == ["chain_sum/heldout/00000"]
    missing = subprocess.run([sys.executable, "-m", "arena.cli", "lessons", "leaks", "--db", str(path.parent / "nope.db")],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 2 and missing.stderr.startswith("arena: error: no database")
