"""Sessions for the ``arena report`` tests, written through the store as ``arena run`` writes them.

``build(path)`` writes a library with:

- ``global-00001`` "Write the final answer alone on the last line." (active, by hand, before any session);
- session ``wake-sleep`` (cycles 2, 1 round each, k = 4, library budget 200 tokens, finished):
  round 1: task A rewards 1 0 0 1 (ADDs ``chain_sum-00001``), task B 0 0 0 0 with a hint, guided 1 0;
  round 2: task A 1 1 1 0, task B 0 0 0 0 with a hint, guided 0 0. ``chain_sum-00001`` is in the
  context of episodes 2–4 (tagged helpful twice: PROMOTEd to active), ``global-00001`` of 2–3.
  Held-out (10 tasks, :data:`HELDOUT`): before 0.2, cycle 1 0.4 / 0.3 without lessons, after 0.7 /
  0.4 without. ``adapter-0001`` (cycle 1, 3 examples over 3 rollouts) distils ``chain_sum-00001``;
- session ``rubric-run`` (reward rubric-explicit, k = 4): one group with judge rewards
  :data:`JUDGE` against verifier rewards :data:`VERIFIER`, rollout 2 flagged ``verifier_disagrees``;
  held-out before 0.5;
- session ``fresh``: no evaluation yet.

Numbers by hand are in the tests that read them.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from arena.stats import wilson_interval
from lessons.library.adapters import AdapterRecord, AdapterStore
from lessons.library.curation import Provenance
from lessons.library.store import EpisodeRecord, HintRecord, LessonStore, RolloutRecord
from lessons.ops import AddOp, LessonTag, Reflection
from lessons.outcomes import count_passes

HELDOUT = {
    "heldout_before": [1, 0, 0, 0, 0, 1, 0, 0, 0, 0],
    "heldout_cycle1": [1, 1, 0, 0, 0, 1, 1, 0, 0, 0],
    "heldout_cycle1_no_lessons": [1, 0, 1, 0, 0, 1, 0, 0, 0, 0],
    "heldout_after": [1, 1, 1, 1, 0, 1, 1, 1, 0, 0],
    "heldout_after_no_lessons": [1, 1, 0, 0, 0, 1, 1, 0, 0, 0],
}
JUDGE = [0.9, 0.2, 0.85, 0.1]
VERIFIER = [1.0, 0.0, 0.0, 0.0]
LESSON = "Carry the tens before adding the next number."


class Task:
    def __init__(self, key: str, question: str, answer: str, split: str = "train", family: str = "chain_sum") -> None:
        self.task_key, self.question, self.answer, self.split, self.family = key, question, answer, split, family
        self.source, self.metadata = "reasoning_gym", {}


def _rollout(idx: int, reward: float, guided: bool = False) -> RolloutRecord:
    msgs = [{"role": "system", "content": "You are a careful solver."}, {"role": "user", "content": "q"}]
    return RolloutRecord(idx=idx, messages=msgs, completion=f"answer {idx}", extracted_answer=str(idx), reward=reward,
                         critique="", prompt_tokens=20, completion_tokens=5, finish_reason="stop", latency_s=0.1,
                         guided=guided, unguided_messages=msgs if guided else None)


def evaluate(store: LessonStore, sid: int, name: str, rewards: list[float]) -> None:
    """Record held-out evaluation `name` with one reward per task `chain_sum/heldout/{i:05d}`, as the session records it."""
    rows = [{"task_key": f"chain_sum/heldout/{i:05d}", "reward": float(r), "lessons": []} for i, r in enumerate(rewards)]
    store.record_evaluation(sid, name, "heldout", not name.endswith("no_lessons"), rewards,
                            wilson_interval(count_passes(rewards), len(rewards)), {"tasks": rows})


def episode(sid: int, key: str, rnd: int, task: str, lessons: list[str], rewards: list[float],
             guided: list[float] | None = None, reflection: Reflection | None = None) -> EpisodeRecord:
    rollouts = [_rollout(i, r) for i, r in enumerate(rewards)] + [_rollout(i, r, True) for i, r in enumerate(guided or [])]
    return EpisodeRecord(sid, key, rnd, task, "You are a careful solver.", lessons, rollouts,
                         reflection or Reflection(analysis="-"), reflection_raw="{}",
                         hint=HintRecord("feedback", "Carry the ones.") if guided else None)


def build(path: Path) -> Path:
    """Write the report fixture library at ``path`` (a new SQLite file) and return ``path``."""
    tasks = [Task("chain_sum/train/00000", "1 + 2", "3"), Task("chain_sum/train/00001", "45 + 38", "83")]
    with LessonStore(str(path)) as store:
        with store.curate() as c:
            c.add("Write the final answer alone on the last line.", "global", "hand-written",
                  Provenance(origin={"by": "cli"}), status="active")
        config = {"families": ["chain_sum"], "rounds": 1, "rollouts": 4, "cycles": 2, "library_tokens": 200}
        sid = store.create_session("wake-sleep", config, seed=0)
        store.upsert_tasks(sid, tasks)
        evaluate(store, sid, "heldout_before", HELDOUT["heldout_before"])
        a, b = (t.task_key for t in tasks)
        helpful = Reflection(analysis="carry", tags=[LessonTag(lesson_id="chain_sum-00001", tag="helpful")])
        store.record_episode(episode(sid, "r001-a", 1, a, [], [1, 0, 0, 1], reflection=Reflection(
            analysis="carried", add=[AddOp(text=LESSON, scope="chain_sum", rationale="rollouts 0 and 3")])))
        store.record_episode(episode(sid, "r001-b", 1, b, ["chain_sum-00001", "global-00001"], [0, 0, 0, 0], [1, 0],
                                      reflection=helpful))
        evaluate(store, sid, "heldout_cycle1", HELDOUT["heldout_cycle1"])
        evaluate(store, sid, "heldout_cycle1_no_lessons", HELDOUT["heldout_cycle1_no_lessons"])
        store.record_episode(episode(sid, "r002-a", 2, a, ["chain_sum-00001", "global-00001"], [1, 1, 1, 0],
                                      reflection=helpful))
        store.record_episode(episode(sid, "r002-b", 2, b, ["chain_sum-00001"], [0, 0, 0, 0], [0, 0]))
        rollout_ids = [r.rollout_id for r in AdapterStore(store).training_rollouts("wake-sleep")][:3]
        ev = {"base": {"pass_at_1": 0.2, "n": 10, "passes": 2, "ci95": [0.057, 0.51]},
              "adapter": {"pass_at_1": 0.4, "n": 10, "passes": 4, "ci95": [0.168, 0.687]}, "heldout_tasks": 10}
        AdapterStore(store).register_adapter(AdapterRecord(
            adapter_id="adapter-0001", path=str(path.parent / "adapter-0001"), base_model="smollm2@test",
            objective="distill", session_id=sid, config={}, data={"session": "wake-sleep", "examples": 3,
                                                                    "rollout_ids": rollout_ids},
            metrics={}, eval=ev, in_context=["chain_sum-00001"], distilled={"chain_sum-00001": "by hand"}, cycle=1))
        evaluate(store, sid, "heldout_after", HELDOUT["heldout_after"])
        evaluate(store, sid, "heldout_after_no_lessons", HELDOUT["heldout_after_no_lessons"])
        store.set_session_status(sid, "finished", {})

        rid = store.create_session("rubric-run", {"families": [], "rollouts": 4, "reward": "rubric-explicit",
                                                  "success_threshold": 0.8}, seed=1)
        store.upsert_tasks(rid, tasks)
        evaluate(store, rid, "heldout_before", [1, 0])
        store.record_episode(episode(rid, "r001-a", 1, a, [], JUDGE))
        store.create_session("fresh", {"families": ["chain_sum"]}, seed=2)
    with sqlite3.connect(path) as conn:  # the judge's grading fields, as record_episode stores them with a rubric reward
        ids = [i for (i,) in conn.execute(
            "SELECT r.id FROM rollouts r JOIN episodes e ON r.episode_id = e.id JOIN sessions s ON e.session_id = s.id "
            "WHERE s.name = 'rubric-run' ORDER BY r.idx")]
        for i, (rid_, v) in enumerate(zip(ids, VERIFIER, strict=True)):
            conn.execute("UPDATE rollouts SET reward_kind = 'rubric-explicit', verifier_reward = ?, hack_flags = ? WHERE id = ?",
                         (v, json.dumps(["verifier_disagrees"] if i == 2 else []), rid_))
    return path


def one_session(path: Path, name: str, heldout: list[float]) -> Path:
    """A library at ``path`` with one session ``name``: held-out before ``heldout``, one group rewarded 1 0."""
    with LessonStore(str(path)) as store:
        sid = store.create_session(name, {"families": ["chain_sum"], "rollouts": 2}, seed=0)
        store.upsert_tasks(sid, [Task("chain_sum/train/00000", "1 + 2", "3")])
        evaluate(store, sid, "heldout_before", heldout)
        store.record_episode(episode(sid, "r001-a", 1, "chain_sum/train/00000", [], [1, 0]))
    return path


def heldout_library(path: Path, questions: list[str], evaluations: dict[str, list[float]]) -> str:
    """A bench-like library at ``path``: one session (named by the file's stem, ``--max-tokens 96``) whose
    held-out tasks ``chain_sum/heldout/{i:05d}`` are ``questions``, with each of ``evaluations`` (name → one
    reward per task)."""
    with LessonStore(str(path)) as store:
        sid = store.create_session(path.stem, {"families": ["chain_sum"], "max_tokens": 96}, seed=0)
        store.upsert_tasks(sid, [Task(f"chain_sum/heldout/{i:05d}", q, "0", split="heldout")
                                 for i, q in enumerate(questions)])
        for name, rewards in evaluations.items():
            evaluate(store, sid, name, rewards)
    return str(path)
