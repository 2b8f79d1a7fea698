"""Training data is only what the rules allow, in every crash window; work due at a kill runs after the resume.

A scripted rubric session (``rubric_scripts``: GOOD, BARE (reward-hack flagged), GARBLE (ungraded), BAD,
plus a GOOD reply the backend cut as ``oversized``) is killed at each write point of an episode and
resumed; then every objective's data and both export layouts must hold none of the rollouts
:func:`lessons.library.rubrics.exclusion_reason` excludes. The kills are ``KeyboardInterrupt`` raised at
the write boundary (inside the episode's transaction, or right after its commit), which is what
``run_session`` sees of a Ctrl-C there; the checkpoint file is the real ``SqliteSaver`` one, so the
resume takes the same path as after ``kill -9``.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from rubric_scripts import GARBLE, RUBRIC, judge, teacher, write_tasks

import arena.export as export
from agents.backends.fake import FakePolicy
from agents.capabilities import Capability
from arena.config import SessionConfig
from arena.distill.config import DistillConfig
from arena.distill.pipeline import collect_data
from arena.episode.context import Roles
from arena.export import ExportError, export_rollouts
from arena.objectives import objective_names
from arena.session import online_rubrics, utility
from arena.session.runner import run_session
from arena.tasks.sources import load_tasks
from lessons.library import episodes as episode_repo
from lessons.library.adapters import AdapterStore
from lessons.library.curation import Provenance
from lessons.library.rubrics import RubricStore
from lessons.library.store import LessonStore

OBJECTIVES = objective_names()
GOOD = "Air molecules scatter the incoming sunlight in all directions, and blue light scatters more than red. <answer>blue</answer>"
BARE = "<answer>Paris</answer>"
BAD = "I do not know."
REPLIES = [GOOD, BARE, GARBLE, BAD, GOOD]  # the fifth: a GOOD reply cut by the backend ("oversized")
LESSON = "Name the physical process before giving the final answer."


class CuttingSolver(FakePolicy):
    """The scripted solver with sampling log-probs (the policy-gradient objectives need π_old); its fifth reply
    of a group carries the backend's ``oversized`` fault (a reply cut to ``max_tokens``)."""

    capabilities = frozenset({Capability.SAMPLE, Capability.SAMPLE_LOGPROBS})

    def sample(self, messages, n=1, temperature=0.7, max_tokens=256, stop=None, seed=None):
        outs = super().sample(messages, n, temperature, max_tokens, stop, seed)
        return [replace(c, logprobs=[-0.5] * len(c.token_ids), fault="oversized" if i == 4 else None)
                for i, c in enumerate(outs)]


def rubric_roles() -> Roles:
    return Roles(CuttingSolver(lambda m, i: REPLIES[i % 5], "solver"), FakePolicy(teacher, "teacher"),
                 FakePolicy(judge, "judge"))


@pytest.fixture
def sky(tmp_path: Path):
    path = write_tasks(tmp_path / "sky.jsonl")
    store = LessonStore(str(tmp_path / "arena.db"))
    with store.curate() as c:  # lessons in context from the first episode: opcd's teachers see an active one
        c.add(LESSON, "sky", "", Provenance(origin={"by": "test"}), status="active")
    splits = load_tasks([], path, n_train=2, n_heldout=2, seed=1)
    cfg = SessionConfig(db=str(tmp_path / "arena.db"), families=[], tasks_file=path, train_tasks=2, heldout_tasks=2,
                        rounds=2, rollouts=5, reward="rubric-explicit", critic="local", success_threshold=0.8,
                        utility_every=0)
    yield store, splits, cfg, tmp_path
    store.close()


def kill_at(monkeypatch, owner, name, call: int, before: bool = True) -> list[str]:
    """Make ``owner.name`` raise KeyboardInterrupt on call number ``call``: before it runs (inside the caller's
    transaction) or after it returned (after its commit). Returns the list the kill appends the name to."""
    real, calls, killed = getattr(owner, name), [], []

    def wrapped(*args, **kwargs):
        calls.append(1)
        if len(calls) == call and before:
            killed.append(name)
            raise KeyboardInterrupt
        out = real(*args, **kwargs)
        if len(calls) == call and not before:
            killed.append(name)
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(owner, name, wrapped)
    return killed


def stored_rollouts(db: Path) -> list[tuple]:
    with sqlite3.connect(db) as c:
        return c.execute("select id, reward, grading_status, hack_flags, fault from rollouts order by id").fetchall()


def allowed_ids(rows: list[tuple]) -> set[int]:
    """Written out from the rule (docs/howto/distill.md, "Objectives": never ungraded, cut, undecided or flagged), independently of the code."""
    return {i for i, reward, status, flags, fault in rows
            if reward is not None and status == "graded" and json.loads(flags or "null") == [] and fault is None}


def training_ids(store: LessonStore, session: str, objective: str) -> tuple[set[int], dict[str, int]]:
    """The rollout ids in ``objective``'s examples and its skip counts (no model: data selection only)."""
    cfg = DistillConfig(objective=objective, success_threshold=0.8, train={"dropout": 0.0})
    _, data = collect_data(store, session, cfg, count_tokens=lambda t: len(t.split()))
    return {e.rollout_id for e in data.examples}, dict(data.skipped)


def assert_nothing_excluded_is_trained_or_exported(store: LessonStore, session: str, db: Path, out: Path) -> set[int]:
    rows = stored_rollouts(db)
    allowed = allowed_ids(rows)
    assert allowed and len(allowed) < len(rows)
    for objective in OBJECTIVES:
        ids, skipped = training_ids(store, session, objective)
        assert ids and ids <= allowed, (objective, sorted(ids - allowed))
        assert skipped["oversized"] == skipped["reward_hack_flagged"] == skipped["ungraded"] == 4, (objective, skipped)
    for fmt in ("hf", "verl"):
        export_rollouts(store, str(db), session, fmt, out / fmt)
        exported = set(json.loads((out / fmt / "arena_export.json").read_text())["rollout_ids"])
        assert exported == allowed
    return allowed


@pytest.mark.parametrize("before", [True, False], ids=["inside-the-episode-transaction", "after-its-commit"])
def test_a_kill_at_each_write_point_then_resume_trains_and_exports_no_excluded_rollout(sky, monkeypatch, before):
    store, splits, cfg, tmp = sky
    # inside: the lesson counter is the episode transaction's last write before commit; after: record_episode returned
    owner, name = (episode_repo, "_count_in_context") if before else (episode_repo.EpisodeRepository, "record_episode")
    killed = kill_at(monkeypatch, owner, name, call=2, before=before)
    with pytest.raises(KeyboardInterrupt):
        run_session(cfg, store, rubric_roles(), splits, "s")  # the real SqliteSaver beside the database
    assert killed == [name]
    monkeypatch.undo()
    summary = run_session(cfg, store, rubric_roles(), splits, "s", resume=True)
    assert summary.episodes == 4 and summary.rollouts == 20
    rows = stored_rollouts(tmp / "arena.db")
    # the grading is part of the episode: every rubric rollout has its status and decided flags, whatever the kill
    assert all(status in ("graded", "ungraded") and flags is not None for _, _, status, flags, _ in rows)
    assert summary.rubric.flagged_rollouts == 4 and summary.rubric.ungraded_rollouts == 4
    assert_nothing_excluded_is_trained_or_exported(store, "s", tmp / "arena.db", tmp / "export")


def test_rubric_rollouts_whose_grading_was_never_stored_are_never_trained_or_exported(sky, monkeypatch):
    """What a kill between the episode and a separate grading write used to leave: rubric rollouts with no
    status and no flags. They look like verifier rollouts; the rule treats them as undecided, never as clean."""
    store, splits, cfg, tmp = sky
    import arena.episode.nodes as nodes

    real = nodes._rubric_grading
    first_episode: list[int] = []

    def lost_in_first_episode(g):  # the first episode's 5 rollouts lose their grading record
        first_episode.append(1)
        return None if len(first_episode) <= 5 else real(g)

    monkeypatch.setattr(nodes, "_rubric_grading", lost_in_first_episode)
    run_session(cfg, store, rubric_roles(), splits, "u", checkpointer=InMemorySaver())
    rows = stored_rollouts(tmp / "arena.db")
    undecided = {i for i, reward, status, _, _ in rows if status is None and reward is not None}
    assert len(undecided) == 4  # GARBLE of that episode stays ungraded (reward NULL) either way
    # the cut GOOD of that episode counts under its first reason, oversized; GARBLE's is ungraded
    assert AdapterStore(store).training_exclusions("u") == {"ungraded": 4, "oversized": 4, "grading_undecided": 3,
                                                           "reward_hack_flagged": 3}
    for objective in OBJECTIVES:
        ids, skipped = training_ids(store, "u", objective)
        assert ids and not ids & undecided, objective
        assert skipped["grading_undecided"] == 3, (objective, skipped)
    export_rollouts(store, str(tmp / "arena.db"), "u", "hf", tmp / "hf")
    assert not set(json.loads((tmp / "hf" / "arena_export.json").read_text())["rollout_ids"]) & undecided


# --------------------------------------------------------------------------- export: no half-written export


@pytest.mark.parametrize("fail_at", ["data", "sidecar"])
def test_an_export_that_fails_mid_write_leaves_nothing_and_the_retry_succeeds(sky, monkeypatch, fail_at):
    store, splits, cfg, tmp = sky
    run_session(cfg, store, rubric_roles(), splits, "e", checkpointer=InMemorySaver())
    out = tmp / "out"
    real = export._write_into_place

    def full_disk(target, write):
        if target.name == (export.DATA_FILE if fail_at == "data" else export.SIDECAR):
            def partial(tmp_path):
                tmp_path.write_bytes(b"PAR1 half")  # half a file, then the disk is full
                raise OSError(28, "No space left on device")
            return real(target, partial)
        return real(target, write)

    monkeypatch.setattr(export, "_write_into_place", full_disk)
    with pytest.raises(ExportError, match="No space left on device"):
        export_rollouts(store, str(tmp / "arena.db"), "e", "hf", out)
    assert sorted(p.name for p in out.iterdir()) == []  # neither file, nor a temporary one
    monkeypatch.undo()
    info = export_rollouts(store, str(tmp / "arena.db"), "e", "hf", out)
    meta = json.loads(info.sidecar.read_text())
    assert meta["data_bytes"] == info.path.stat().st_size and meta["data_sha256"] == export._sha256(info.path)


def test_a_data_file_left_by_a_killed_export_is_replaced_and_a_complete_export_is_kept(sky):
    store, splits, cfg, tmp = sky
    run_session(cfg, store, rubric_roles(), splits, "k", checkpointer=InMemorySaver())
    out = tmp / "out"
    out.mkdir()
    (out / export.DATA_FILE).write_bytes(b"PAR1 cut off by kill -9 before the sidecar")
    info = export_rollouts(store, str(tmp / "arena.db"), "k", "hf", out)
    assert json.loads(info.sidecar.read_text())["data_sha256"] == export._sha256(info.path)
    with pytest.raises(ExportError, match="already holds an export"):
        export_rollouts(store, str(tmp / "arena.db"), "k", "hf", out)


# --------------------------------------------------------------------------- utility A/B with rubric rewards


def test_a_rubric_session_with_a_lesson_skips_the_utility_ab_on_rubric_only_tasks_with_a_reason(tmp_path):
    path = tmp_path / "open.jsonl"
    path.write_text("\n".join(json.dumps({"question": f"Question {i}: why is the sky blue?", "family": "sky",
                                          "rubric": RUBRIC}) for i in range(4)) + "\n")  # no "answer": no verifier
    splits = load_tasks([], path, n_train=2, n_heldout=2, seed=1)
    cfg = SessionConfig(db=str(tmp_path / "arena.db"), families=[], tasks_file=path, train_tasks=2, heldout_tasks=2,
                        rounds=1, rollouts=2, reward="rubric-explicit", critic="local", utility_every=1)
    with LessonStore(str(tmp_path / "arena.db")) as store:
        with store.curate() as c:
            c.add(LESSON, "sky", "", Provenance(origin={"by": "test"}), status="active")
        roles = Roles(FakePolicy(lambda m, i: GOOD, "solver"), FakePolicy(teacher), FakePolicy(judge, "judge"))
        summary = run_session(cfg, store, roles, splits, "r", checkpointer=InMemorySaver())
    assert summary.episodes == 2 and summary.utility_checks == 0
    assert summary.utility_skipped.startswith("no utility A/B for the lessons of sky: its tasks have a rubric")


# --------------------------------------------------------------------------- due work on resume


def adding_tasks(path: Path) -> Path:
    rows = [{"question": f"Compute {10 + i} plus {20 + 2 * i}.", "answer": str(30 + 3 * i), "family": "adding"}
            for i in range(8)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_a_utility_check_due_at_the_kill_runs_after_the_resume(tmp_path, monkeypatch):
    path = adding_tasks(tmp_path / "adding.jsonl")
    splits = load_tasks([], path, n_train=4, n_heldout=4, seed=1)
    cfg = SessionConfig(db=str(tmp_path / "arena.db"), families=[], tasks_file=path, train_tasks=4, heldout_tasks=4,
                        rounds=1, rollouts=2, utility_every=2, utility_tasks=4)
    roles = lambda: Roles(FakePolicy(lambda m, i: "<answer>0</answer>"), FakePolicy(teacher))  # noqa: E731
    killed = kill_at(monkeypatch, utility, "run_utility_check", call=1)
    saver = InMemorySaver()
    with LessonStore(str(tmp_path / "arena.db")) as store:
        with store.curate() as c:
            c.add(LESSON, "adding", "", Provenance(origin={"by": "test"}))
        with pytest.raises(KeyboardInterrupt):  # killed when the check after episode 2 starts
            run_session(cfg, store, roles(), splits, "u", checkpointer=saver)
        sid = store.get_session("u").id
        assert len(store.finished_episode_keys(sid)) == 2 and store.utility_checks(sid) == set()
        monkeypatch.undo()
        summary = run_session(cfg, store, roles(), splits, "u", resume=True, checkpointer=saver)
        assert killed == ["run_utility_check"] and store.utility_checks(sid) == {2, 4}  # the missed check after episode 2, then the one after 4
    assert summary.utility_checks == 2


def test_an_online_rubric_batch_due_at_the_kill_is_updated_after_the_resume(sky, monkeypatch):
    store, splits, cfg, _ = sky
    cfg = cfg.model_copy(update={"online_rubrics": 2})
    killed = kill_at(monkeypatch, online_rubrics, "update_rubrics", call=1)
    saver = InMemorySaver()
    with pytest.raises(KeyboardInterrupt):  # the update over episodes 1-2 never ran
        run_session(cfg, store, rubric_roles(), splits, "o", checkpointer=saver)
    assert killed == ["update_rubrics"]
    monkeypatch.undo()
    run_session(cfg, store, rubric_roles(), splits, "o", resume=True, checkpointer=saver)
    rs = RubricStore(store)
    sid = store.get_session("o").id
    history = rs.rubric_history(sid, splits.train[0].task_key)
    assert [h.version for h in history] == [1, 2]
    # the new criterion came from the first batch (round 1's episodes), as in an uninterrupted run
    motivating = set(history[1].criteria[-1].motivating_rollout_ids)
    first_batch = {r.id for r, key in rs.session_rollouts(sid) if key.startswith("r001-")}
    assert motivating and motivating <= first_batch
