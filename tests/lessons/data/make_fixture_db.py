"""Write ``fixture.db`` and ``fixture_reads.json`` with the code as it was BEFORE the redesign (issue 13).

The database is written through the old public APIs only (``lessons.store``, ``lessons.rubric_store``,
``lessons.adapter_store``, ``lessons.curriculum_store``, ``arena.runner.run_session`` with the fake
policies of ``agents/fake.py``; no model is loaded), and the JSON file holds what the old code reads
back from it. ``tests/lessons/test_fixture_db.py`` opens a copy of the database with today's code and
checks that every read gives the same values: the redesign must not change what a library on disk means.

Run it against the commit before the redesign (baff35b), from a checkout of that commit::

    git worktree add /tmp/old-main baff35b
    cd /tmp/old-main && PYTHONPATH=/tmp/old-main python /path/to/repo/tests/lessons/data/make_fixture_db.py
    git worktree remove --force /tmp/old-main

It builds in the fixed directory ``/tmp/lesson-arena-fixture`` (the session config stores the task
file's absolute path, so a fixed place keeps the file reproducible) and writes ``fixture.db`` and
``fixture_reads.json`` next to this script (``--out DIR`` to write elsewhere).

What the database holds:

- session ``run-alpha`` (id 1, finished): 3 tasks, 3 episodes, 14 rollouts (2 guided, with a hint),
  lesson ``chain_sum-00001`` added (candidate) then promoted to active by two helpful votes, then
  distilled into ``adapter-0001``; held-out evaluations before/after; curriculum steps for rounds 1
  and 2 and two task proposals (one accepted, which adds a proposer task);
- session ``run-beta`` (id 2, running, nothing else);
- session ``sky-rubric`` (id 3, finished): a 2-round ``run_session`` with rubric rewards
  (``rubric-explicit``) on a JSONL task file, scripted solver / judge / teacher: rubrics and an online
  rubric version, per-criterion verdicts, hack flags, ungraded rollouts, held-out evaluations and the
  teacher's lessons;
- by hand: ``global-00001`` (active), ``global-00002`` (retired with a reason), ``global-00003`` edited.

``read_all(api)`` lists every read; the test calls it with today's classes, so the two sides can only
differ in the code under test. ``jsonable`` turns the results into plain JSON values (dataclasses to
dicts, datetimes to ISO strings, tuples to lists, dict keys to strings).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import shutil
import sqlite3
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

BUILD_DIR = Path("/tmp/lesson-arena-fixture")
HERE = Path(__file__).resolve().parent
DB_NAME = "fixture.db"
READS_NAME = "fixture_reads.json"

T0 = datetime(2025, 3, 14, 9, 0, tzinfo=UTC)
LESSON_TEXT = "Add the numbers from left to right and check each carry."

# --------------------------------------------------------------------------- the rubric session's scripts

RUBRIC = [
    {"title": "Mentions scattering", "description": "Essential Criteria: Says that sunlight is scattered by the air.", "weight": 5},
    {"title": "Blue scatters more", "description": "Important Criteria: Says blue light is scattered more than red light.", "weight": 3},
    {"title": "Ocean reflection", "description": "Pitfall Criteria: Claims the sky reflects the ocean.", "weight": -2},
]
GOOD = "Air molecules scatter the incoming sunlight in all directions, and blue light scatters more than red. <answer>blue</answer>"
BARE = "<answer>Paris</answer>"
GARBLE = "GARBLE"
BAD = "I do not know."
RESPONSES = [GOOD, BARE, GARBLE, BAD]
SKY_LESSON = "Name the physical process before giving the final answer."
NEW_CRITERION = {"title": "Names wavelength", "description": "Important Criteria: Explains that blue light has a shorter wavelength.", "weight": 3}


def _solver(messages: list[dict[str, str]], i: int) -> str:
    return RESPONSES[i % 4]


def _judge(messages: list[dict[str, str]], i: int) -> str:
    prompt = next(m["content"] for m in reversed(messages) if "Student response:" in m["content"])
    response = prompt.split("Student response:\n", 1)[1].rsplit("\nWrite the JSON object now.", 1)[0]
    if GARBLE in response:
        return "I cannot decide."
    positive = response in (GOOD, BARE)
    verdicts = []
    for line in re.findall(r"^\d+\. (.*)$", prompt.split("Student response:")[0], re.M):
        pitfall = "Pitfall Criteria" in line
        verdicts.append({"id": len(verdicts) + 1, "met": (not pitfall) and positive, "reason": "scripted"})
    return json.dumps({"verdicts": verdicts})


def _teacher(online_system: str):
    def teacher(messages: list[dict[str, str]], i: int) -> str:
        if messages[0]["content"] == online_system:
            return json.dumps({"analysis": "A names the process; B does not.", "criteria": [NEW_CRITERION]})
        return json.dumps({"analysis": "The good attempt named the process.", "add": [{"text": SKY_LESSON, "scope": "sky"}],
                           "tags": []})

    return teacher


# --------------------------------------------------------------------------- building (old APIs)


@dataclasses.dataclass
class Task:
    task_key: str
    question: str
    answer: str
    family: str = "chain_sum"
    split: str = "train"
    source: str = "reasoning_gym"
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)


TASKS = [
    Task("chain_sum/train/00000", "What is 12 + 7?", "19"),
    Task("chain_sum/train/00001", "What is 45 + 38?", "83"),
    Task("chain_sum/heldout/00000", "What is 3 + 4?", "7", split="heldout"),
]


def _at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def build(db: Path) -> None:
    """Write the fixture library at ``db`` with the OLD code (imports resolve against the old tree)."""
    # old-tree modules: ruff cannot tell they are ours (several no longer exist), so it would split them
    from langgraph.checkpoint.memory import InMemorySaver  # noqa: I001

    from agents.fake import FakePolicy
    from arena.config import SessionConfig
    from arena.graph import Roles
    from arena.online_rubrics import ONLINE_SYSTEM
    from arena.runner import run_session
    from arena.tasks import load_tasks
    from lessons.adapter_store import AdapterRecord, AdapterStore
    from lessons.curation import Provenance
    from lessons.curriculum_store import CurriculumRecords, ProposalRecord
    from lessons.ops import AddOp, LessonTag, Reflection
    from lessons.store import EpisodeRecord, HintRecord, LessonStore, RolloutRecord

    def rollout(idx: int, reward: float, answer: str, guided: bool = False) -> RolloutRecord:
        msgs = [{"role": "system", "content": "You are a careful solver."}, {"role": "user", "content": "q"}]
        return RolloutRecord(
            idx=idx, messages=msgs, completion=f"Let me add. The answer is {answer}.", extracted_answer=answer,
            reward=reward, critique="correct" if reward >= 1 else f"expected a different answer than {answer}",
            prompt_tokens=40, completion_tokens=9, finish_reason="stop", latency_s=0.25, guided=guided,
            unguided_messages=msgs if guided else None, token_ids=[5, 6, 7], logprobs=[-0.1, -0.2, -0.3],
        )

    with LessonStore(str(db)) as store:
        # ------------------------------------------------ session run-alpha: hand-made episodes
        sid = store.create_session("run-alpha", {"families": ["chain_sum"], "rounds": 2, "rollouts": 4}, seed=0)
        store.upsert_tasks(sid, TASKS)
        store.record_evaluation(sid, "heldout_before", "heldout", True, [1, 0, 0, 0], (0.05, 0.70), {})
        store.record_episode(EpisodeRecord(
            sid, "r001-chain_sum/train/00000", 1, "chain_sum/train/00000", "You are a careful solver.", [],
            [rollout(0, 1.0, "19"), rollout(1, 0.0, "18"), rollout(2, 0.0, "21"), rollout(3, 1.0, "19")],
            Reflection(analysis="the winners carried the ten",
                       add=[AddOp(text=LESSON_TEXT, scope="chain_sum", rationale="rollouts 0 and 3 carried")]),
            reflection_raw="{}", started_at=_at(1), finished_at=_at(2),
        ))
        store.record_episode(EpisodeRecord(
            sid, "r001-chain_sum/train/00001", 1, "chain_sum/train/00001", "You are a careful solver.",
            ["chain_sum-00001"],
            [rollout(i, 0.0, a) for i, a in enumerate(["73", "82", "84", "93"])]
            + [rollout(0, 1.0, "83", guided=True), rollout(1, 0.0, "73", guided=True)],
            Reflection(analysis="carry mistakes", tags=[LessonTag(lesson_id="chain_sum-00001", tag="helpful")]),
            reflection_raw="{}", hint=HintRecord("feedback", "Your sums miss the carry from the ones column."),
            started_at=_at(3), finished_at=_at(4),
        ))
        store.record_episode(EpisodeRecord(
            sid, "r002-chain_sum/train/00000", 2, "chain_sum/train/00000", "You are a careful solver.",
            ["chain_sum-00001"],
            [rollout(0, 1.0, "19"), rollout(1, 1.0, "19"), rollout(2, 0.0, "17"), rollout(3, 1.0, "19")],
            Reflection(analysis="carrying helped", tags=[LessonTag(lesson_id="chain_sum-00001", tag="helpful")]),
            reflection_raw="{}", started_at=_at(5), finished_at=_at(6),
        ))
        store.record_evaluation(sid, "heldout_after", "heldout", True, [1, 1, 0, 0], (0.15, 0.85), {})
        # curriculum: two rounds of one family, then one accepted and one rejected proposal
        cur = CurriculumRecords(store)
        cur.start_step(sid, 1, "chain_sum", 0, {"digits": 1}, {})
        cur.finish_step(sid, 1, "chain_sum", 2, 0.25, "up", 1)
        cur.start_step(sid, 2, "chain_sum", 1, {"digits": 2}, {"max_digits": 2})
        cur.finish_step(sid, 2, "chain_sum", 1, 0.75, "stay", 1)
        proposed = Task("chain_sum/train/p0001", "What is 19 + 26?", "45", source="proposer",
                        metadata={"parent": "chain_sum/train/00000"})
        cur.record_proposals(sid, 2, "chain_sum", [
            ProposalRecord("chain_sum/train/00000", "fake-teacher", "accepted", proposed.question, proposed.answer,
                           "one more carry", None, None, "verifier", {"ok": True}, ["{}"], task=proposed),
            ProposalRecord("chain_sum/train/00001", "fake-teacher", "rejected", "What is 2 + 2?", "5", "easy",
                           "wrong_answer", "the verifier says 4", "verifier", {"expected": "4"}, ["{}"]),
        ])
        store.set_session_status(sid, "finished", {"episodes": 3})
        store.create_session("run-beta", {"families": ["chain_sum"]}, seed=1)

        # ------------------------------------------------ by hand: several statuses and an edit
        by_hand = Provenance(origin={"by": "cli"})
        with store.curate() as c:
            c.add("Write the final answer alone on the last line.", "global", "hand-written", by_hand, status="active")
            c.add("Restate the question before solving it.", "global", "hand-written", by_hand, status="active")
            c.add("Check the units of the answer.", "global", "hand-written", by_hand)
        with store.curate() as c:
            c.retire("global-00002", "restating wastes the token budget", by_hand)
            c.edit("global-00003", "Check the units and the sign of the answer.", "sign errors too", by_hand)

        # ------------------------------------------------ an adapter that distils chain_sum-00001
        adapters = AdapterStore(store)
        adapters.register_adapter(AdapterRecord(
            adapter_id=adapters.next_adapter_id(), path="/runs/adapters/adapter-0001", base_model="smollm2@abc",
            objective="distill", session_id=sid, config={"r": 16, "lr": 0.0002}, data={"rollouts": 14},
            metrics={"steps": 120, "final_loss": 0.4321}, eval={"base": {"pass_at_1": 0.25, "n": 4}},
            in_context=["chain_sum-00001", "global-00001"], distilled={"chain_sum-00001": "pass@1 0.25 -> 0.5"},
        ))

        # ------------------------------------------------ session sky-rubric: run_session with fake roles
        tasks_file = BUILD_DIR / "sky.jsonl"
        tasks_file.write_text("".join(
            json.dumps({"question": f"Question {i}: why is the sky blue?", "family": "sky", "rubric": RUBRIC,
                        "answer": "blue", "requires_work": True}) + "\n" for i in range(4)
        ))
        cfg = SessionConfig(db=str(db), families=[], tasks_file=tasks_file, train_tasks=2, heldout_tasks=2, rounds=2,
                            rollouts=4, reward="rubric-explicit", critic="local", success_threshold=0.8,
                            online_rubrics=2)
        roles = Roles(FakePolicy(_solver, "solver"), FakePolicy(_teacher(ONLINE_SYSTEM), "teacher"),
                      FakePolicy(_judge, "judge"))
        splits = load_tasks([], tasks_file, n_train=2, n_heldout=2, seed=1)
        run_session(cfg, store, roles, splits, "sky-rubric", checkpointer=InMemorySaver())
    pin_timestamps(db)


def pin_timestamps(path: Path) -> None:
    """Replace the wall-clock timestamps of ``run-alpha``, ``run-beta`` and the by-hand writes with T0 + k minutes.

    The sky-rubric session keeps the times ``run_session`` wrote; they are data like any other.
    """
    fmt = "%Y-%m-%d %H:%M:%S.000000"
    conn = sqlite3.connect(path)
    with conn:  # one transaction
        for sid, start, fin in ((1, 0, 10), (2, 20, None)):
            conn.execute("UPDATE sessions SET created_at = ?, finished_at = ? WHERE id = ?",
                         (_at(start).strftime(fmt), _at(fin).strftime(fmt) if fin is not None else None, sid))
        conn.execute("UPDATE evaluations SET created_at = ? WHERE session_id = 1", (_at(7).strftime(fmt),))
        conn.execute("UPDATE hints SET created_at = ? WHERE task_id IN (SELECT id FROM tasks WHERE session_id = 1)", (_at(3).strftime(fmt),))
        conn.execute("UPDATE adapters SET created_at = ?", (_at(40).strftime(fmt),))
        for eid, ep in conn.execute(
            "SELECT e.id, e.episode_id FROM lesson_events e JOIN lessons l ON l.id = e.lesson_id "
            "WHERE l.scope != 'sky' ORDER BY e.id"
        ).fetchall():
            at = _at(2 * ep) if ep is not None else _at(30 + eid)
            conn.execute("UPDATE lesson_events SET created_at = ? WHERE id = ?", (at.strftime(fmt), eid))
        for (lid,) in conn.execute("SELECT id FROM lessons WHERE scope != 'sky'").fetchall():
            first = conn.execute("SELECT min(created_at), max(created_at) FROM lesson_events WHERE lesson_id = ?",
                                 (lid,)).fetchone()
            conn.execute("UPDATE lessons SET created_at = ?, updated_at = ? WHERE id = ?", (first[0], first[1], lid))
    # the store keeps the file in WAL mode: fold the log into the file so that fixture.db alone holds everything
    conn.execute("VACUUM")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    for suffix in ("-wal", "-shm"):
        if Path(f"{path}{suffix}").exists() and Path(f"{path}{suffix}").stat().st_size:
            raise RuntimeError(f"{path}{suffix} still holds pages; the copy would lose them")


# --------------------------------------------------------------------------- reading (old or new APIs)


def jsonable(value: Any) -> Any:
    """A plain JSON value for a read result: dataclasses → dicts, datetimes → ISO strings, tuples/sets → lists.

    Dict keys become strings; a float NaN or infinity becomes the string ``"nan"`` / ``"inf"``.
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return sorted(jsonable(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"no JSON form for {type(value).__name__}: {value!r}")


def read_all(api: SimpleNamespace, db: Path) -> dict[str, Any]:
    """Every public read of the fixture library, keyed by a readable name, as JSON values.

    Args:
        api: the classes to read with: ``LessonStore``, ``ArenaData``, ``open_store``, ``RubricStore``,
            ``AdapterStore``, ``CurriculumRecords`` (old names at baff35b, today's in the test).
        db: the fixture database (a copy: opening it may migrate it).
    """
    out: dict[str, Any] = {}
    store = api.open_store(db)
    try:
        names = ["run-alpha", "run-beta", "sky-rubric"]
        sessions = {n: store.get_session(n) for n in names}
        out["get_session"] = sessions
        out["get_session(missing)"] = store.get_session("nope")
        out["stored_tasks"] = store.stored_tasks()
        out["stored_tasks(run-alpha, heldout)"] = store.stored_tasks("run-alpha", "heldout")
        out["list_lessons"] = store.list_lessons()
        for status in ("candidate", "active", "retired", "distilled"):
            out[f"list_lessons({status})"] = store.list_lessons(status=status)
        out["list_lessons(global, page 2)"] = store.list_lessons(scope="global", limit=1, offset=1)
        out["live_lessons(chain_sum)"] = store.live_lessons("chain_sum")
        out["live_lessons(chain_sum, distilled)"] = store.live_lessons("chain_sum", include_distilled=True)
        out["live_lessons(None)"] = store.live_lessons(None)
        out["active_lessons(sky)"] = store.active_lessons("sky")
        out["top_lessons(sky, 2)"] = store.top_lessons("sky", 2)
        out["top_lessons(None, 10)"] = store.top_lessons(None, 10)
        out["count_lessons"] = store.count_lessons()
        out["library_tokens_used"] = store.library_tokens_used()
        out["has_fts"] = store.has_fts()
        for terms in (["answer"], ["carry", "numbers"], ["physical", "process"], ["units"]):
            out[f"search_lessons({' '.join(terms)})"] = store.search_lessons(terms)
        out["search_lessons(answer, statuses None)"] = store.search_lessons(["answer"], statuses=None)
        out["search_lessons(answer, sky)"] = store.search_lessons(["answer"], family="sky")
        lesson_ids = [les.lesson_id for les in store.list_lessons()]
        out["get_lesson"] = {lid: store.get_lesson(lid) for lid in lesson_ids}
        out["lesson_events"] = store.lesson_events()
        out["lesson_events(by lesson)"] = {lid: store.lesson_events(lid) for lid in lesson_ids}
        out["utility_history"] = {lid: store.utility_history(lid) for lid in lesson_ids}
        for name, info in sessions.items():
            sid = info.id
            out[f"{name}: evaluations"] = store.evaluations(sid)
            out[f"{name}: session_stats"] = store.session_stats(sid)
            out[f"{name}: hints"] = store.hints(sid)
            out[f"{name}: group_outcomes"] = store.group_outcomes(sid)
            out[f"{name}: finished_episode_keys"] = store.finished_episode_keys(sid)
            out[f"{name}: rollouts_by_round"] = store.rollouts_by_round(sid)
            out[f"{name}: round_rewards"] = store.round_rewards(sid)
            out[f"{name}: utility_samples"] = store.utility_samples(sid)
            out[f"{name}: utility_checks"] = store.utility_checks(sid)
        out["hints(all)"] = store.hints()
        out["find_hint"] = store.find_hint(sessions["run-alpha"].id, "chain_sum/train/00001", "feedback")

        # rubrics, adapters, curriculum
        rubrics = api.RubricStore(store)
        sky = sessions["sky-rubric"].id
        sky_keys = [t.task_key for t in store.stored_tasks("sky-rubric")]
        out["rubric_history"] = {k: rubrics.rubric_history(sky, k) for k in sky_keys}
        out["current_rubric"] = {k: rubrics.current_rubric(sky, k) for k in sky_keys}
        out["grading_stats"] = rubrics.grading_stats(sky)
        out["calibration_pairs"] = rubrics.calibration_pairs()
        adapters = api.AdapterStore(store)
        out["list_adapters"] = adapters.list_adapters()
        out["get_adapter"] = adapters.get_adapter("adapter-0001")
        out["next_adapter_id"] = adapters.next_adapter_id()
        for name in ("run-alpha", "run-beta"):  # sky-rubric's ungraded rollouts (reward None) make it raise
            out[f"{name}: training_rollouts"] = adapters.training_rollouts(name)
        first_criterion = out["rubric_history"][sky_keys[0]][-1].criteria[0].id
        out["criterion_lineage"] = rubrics.criterion_lineage(first_criterion)
        curriculum = api.CurriculumRecords(store)
        for name, info in sessions.items():
            out[f"{name}: curriculum steps"] = curriculum.steps(info.id)
            out[f"{name}: session_tasks"] = curriculum.session_tasks(info.id)
            out[f"{name}: proposals"] = curriculum.proposals(info.id)
            out[f"{name}: proposal_counts"] = curriculum.proposal_counts(info.id)

        # the TUI's read models
        data = api.ArenaData(store)
        out["tui: is_empty"] = data.is_empty()
        out["tui: sessions"] = data.sessions()
        episode_ids = []
        for info in sessions.values():
            eps = data.episodes(info.id)
            episode_ids += [e.id for e in eps]
            out[f"tui: {info.name}: episodes"] = eps
            out[f"tui: {info.name}: learning_curve"] = data.learning_curve(info.id)
        out["tui: episode"] = {str(eid): data.episode(eid) for eid in episode_ids}
        out["tui: episode(missing)"] = data.episode(9999)
        rollout_ids = [r.id for eid in episode_ids for r in data.episode(eid).rollouts]
        out["verdicts"] = {str(rid): rubrics.verdicts(rid) for rid in rollout_ids}
        out["tui: families"] = data.families()
        out["tui: lesson_page"] = data.lesson_page()
        out["tui: lesson_page(1, size 2)"] = data.lesson_page(1, page_size=2)
        out["tui: lesson_page(active)"] = data.lesson_page(status="active")
        out["tui: lesson_page(global)"] = data.lesson_page(family="global")
        for text in ("answer", "carr", "final answer", "zebra"):
            out[f"tui: search({text})"] = data.search(text)
        out["tui: search(answer, retired)"] = data.search("answer", status="retired")
        out["tui: lesson_detail"] = {lid: data.lesson_detail(lid) for lid in lesson_ids}
        out["tui: adapters"] = data.adapters()
    finally:
        store.close()
    return jsonable(out)


OLD_API_MODULES = {  # name -> module at baff35b
    "LessonStore": "lessons.store",
    "ArenaData": "tui.data",
    "open_store": "tui.data",
    "RubricStore": "lessons.rubric_store",
    "AdapterStore": "lessons.adapter_store",
    "CurriculumRecords": "lessons.curriculum_store",
}


def load_api(modules: dict[str, str]) -> SimpleNamespace:
    """A namespace of the named objects, each imported from its module."""
    import importlib

    return SimpleNamespace(**{name: getattr(importlib.import_module(mod), name) for name, mod in modules.items()})


def main() -> None:
    """Build the database with the old code, read it back, write both files (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE, help="directory for fixture.db and fixture_reads.json")
    args = parser.parse_args()
    shutil.rmtree(BUILD_DIR, ignore_errors=True)
    BUILD_DIR.mkdir(parents=True)
    os.chdir(BUILD_DIR)
    db = BUILD_DIR / DB_NAME
    build(db)
    args.out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(db, args.out / DB_NAME)
    scratch = BUILD_DIR / "read-copy.db"
    shutil.copyfile(db, scratch)
    reads = read_all(load_api(OLD_API_MODULES), scratch)
    (args.out / READS_NAME).write_text(json.dumps(reads, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    print(f"wrote {args.out / DB_NAME} ({(args.out / DB_NAME).stat().st_size} bytes) and {args.out / READS_NAME}")


if __name__ == "__main__":
    main()
