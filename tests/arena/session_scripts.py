"""Scripted sessions for the arena tests: a finished session on the tiny model, a task file, scripted solver/teacher replies."""

from __future__ import annotations

import json
import re
from pathlib import Path

from agents.roles.solver import LessonView, render_lessons, solver_messages
from arena.config import SessionConfig
from arena.tasks.sources import load_tasks
from lessons.db.schema import EpisodeRow, RolloutRow
from lessons.library.store import EpisodeRecord, LessonStore, RolloutRecord
from lessons.ops import AddOp, Reflection

LESSON = "Add the numbers from left to right, keeping the sign of each term."


def make_session(db: Path, tiny: Path, name: str = "demo", successes: bool = True) -> None:
    """A finished-looking session: 2 train tasks (one episode each), 4 held-out tasks, one lesson."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny)
    cfg = SessionConfig(db=str(db), train_tasks=2, heldout_tasks=4, session=name)
    splits = load_tasks(cfg.families, None, cfg.train_tasks, cfg.heldout_tasks, cfg.seed)
    store = LessonStore(str(db))
    sid = store.create_session(name, cfg.model_dump(mode="json"), 0)
    store.upsert_tasks(sid, [*splits.train, *splits.heldout])
    for i, task in enumerate(splits.train):
        lesson_ids = [les.lesson_id for les in store.live_lessons(task.family)]
        section = render_lessons([LessonView(lid, LESSON) for lid in lesson_ids], 512, lambda s: len(s.split()))[0]
        msgs = solver_messages(task.question, section)
        good = tok(f"<answer>{task.answer}</answer>", add_special_tokens=False)["input_ids"]
        bad = tok("<answer>0</answer>", add_special_tokens=False)["input_ids"]
        guided = [dict(m) for m in msgs]
        guided[-1]["content"] += f"\n\nHint:\nThe answer is {task.answer}."

        def roll(idx, ids, reward, is_guided=False, msgs=msgs, guided=guided):
            return RolloutRecord(idx, guided if is_guided else msgs, tok.decode(ids), None, reward, "c", 50, len(ids),
                                 "stop", 0.1, guided=is_guided, token_ids=ids, logprobs=[-0.5] * len(ids),
                                 unguided_messages=msgs if is_guided else None)

        rollouts = [roll(0, good if successes else bad, 1.0 if successes else 0.0), roll(1, bad, 0.0),
                    roll(2, good if successes else bad, 1.0 if successes else 0.0, True)]
        refl = Reflection(analysis="a", add=[AddOp(text=LESSON, scope=task.family, rationale="r")]) if i == 0 else None
        store.record_episode(EpisodeRecord(sid, f"r001-{task.task_key}", 1, task.task_key, msgs[0]["content"],
                                           lesson_ids, rollouts, refl))
    store.set_session_status(sid, "finished")
    store.close()


def write_tasks(path, n=8):
    path.write_text("".join(json.dumps({"question": f"What is {i} + {i + 1}?", "answer": str(2 * i + 1)}) + "\n"
                            for i in range(n)))
    return path


def solver_responder(messages, i):
    """Rollouts 0 and 1 answer correctly."""
    a, b = map(int, re.findall(r"\d+", messages[-1]["content"])[-2:])
    return f"{a} + {b} = {a + b} <answer>{a + b if i < 2 else a + b + 1}</answer>"


def teacher_responder(messages, i):
    return json.dumps({"analysis": "ok", "add": [], "tags": []})


def session_rollouts(store: LessonStore, name: str) -> list[RolloutRow]:
    """Every stored rollout row of session ``name`` (episode order, then rollout index), detached."""
    from sqlalchemy import select

    sid = store.get_session(name).id
    with store.read() as s:
        rows = s.scalars(select(RolloutRow).join(EpisodeRow).where(EpisodeRow.session_id == sid)
                         .order_by(EpisodeRow.id, RolloutRow.idx)).all()
        s.expunge_all()
    return list(rows)
