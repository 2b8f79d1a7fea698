"""Rubric rewards through the episode graph and the store, with scripted fake solver, judge and teacher."""

from __future__ import annotations

import json
import re
import sqlite3

import pytest
from alembic import command
from langgraph.checkpoint.memory import InMemorySaver
from rubric_scripts import BARE, GARBLE, RUBRIC, roles, teacher, write_tasks

from agents.backends.fake import FakePolicy
from arena.config import ConfigError, SessionConfig
from arena.episode.context import Roles
from arena.episode.rewards import check_reward_tasks
from arena.session.online_rubrics import ONLINE_SYSTEM
from arena.session.runner import run_session
from arena.session.summary import OnlineRubricUpdates
from arena.tasks.sources import load_tasks
from lessons.db.schema import alembic_config
from lessons.library.adapters import AdapterStore
from lessons.library.rubrics import RubricStore, eligible_for_training
from lessons.library.store import LessonStore


@pytest.fixture
def setup(tmp_path):
    path = write_tasks(tmp_path / "sky.jsonl")
    store = LessonStore(str(tmp_path / "arena.db"))
    splits = load_tasks([], path, n_train=2, n_heldout=2, seed=1)

    def cfg(**kw):
        base = dict(db=str(tmp_path / "arena.db"), families=[], tasks_file=path, train_tasks=2, heldout_tasks=2,
                    rounds=2, rollouts=4, reward="rubric-explicit", critic="local", success_threshold=0.8)
        base.update(kw)
        return SessionConfig(**base)

    yield store, splits, cfg
    store.close()


def test_rubric_session_stores_verdicts_flags_and_ungraded(setup):
    store, splits, cfg = setup
    r = roles()
    summary = run_session(cfg(), store, r, splits, "s1", checkpointer=InMemorySaver())
    assert summary.episodes == 4 and summary.rollouts == 16
    # rewards per group: GOOD 1.0, BARE 1.0, GARBLE ungraded (excluded), BAD 0.0
    assert summary.mean_reward == round(2 / 3, 4)
    assert summary.rubric.graded_rollouts == 12 and summary.rubric.ungraded_rollouts == 4
    assert summary.rubric.flagged_rollouts == 4
    assert summary.rubric.hack_flags == {"answer_without_work": 4, "verifier_disagrees": 4}
    # pass@k over graded rollouts: pass@1 = 2/3 per group; pass@4 is undefined with 3 graded of 4 → no group counts
    assert summary.rounds[0].pass_at_1 == round(2 / 3, 4) and summary.rounds[0].pass_at_k == 0.0
    # calibration per group: judge (1, 1, 0) vs verifier (1, 0, 0): accuracy 2/3; ECE = 2/3 * |1 - 1/2| = 1/3
    cal = summary.rubric.critic_calibration
    assert cal["sky"].n == 12 and cal["sky"].accuracy == pytest.approx(round(2 / 3, 4))
    assert cal["sky"].ece == pytest.approx(round(1 / 3, 4))
    # held-out: the greedy fake answers GOOD → judged 1.0
    assert summary.rubric.heldout_mean_reward["heldout_before"] == 1.0

    rs = RubricStore(store)
    sid = store.get_session("s1").id
    rows = rs.session_rollouts(sid)
    by_idx = {}
    for row, _ in rows:
        by_idx.setdefault(row.idx, []).append(row)
    assert all(x.reward is None and x.grading_status == "ungraded" for x in by_idx[2])
    assert all(x.hack_flags == ["verifier_disagrees", "answer_without_work"] for x in by_idx[1])
    assert all(x.reward == 1.0 and x.hack_flags == [] and x.verifier_reward == 1.0 for x in by_idx[0])
    assert all(x.reward_kind == "rubric-explicit" and x.rubric_id is not None for x, _ in rows)
    verdicts = rs.verdicts(by_idx[3][0].id)
    assert [(v.title, v.met) for v in verdicts] == [("Mentions scattering", False), ("Blue scatters more", False), ("Ocean reflection", False)]

    # the teacher saw which criteria failed, and never the flagged or ungraded rollouts
    reflect_prompts = [c[0][-1]["content"] for c in r.teacher.calls if c[0][0]["content"] != ONLINE_SYSTEM]
    assert len(reflect_prompts) == 4
    for p in reflect_prompts:
        assert "failed criteria: Mentions scattering; Blue scatters more" in p
        assert "failed criteria: none" in p
        assert BARE not in p and GARBLE not in p

    # distillation data: only graded, unflagged rollouts (GOOD and BAD of each group)
    eligible = [x for x, _ in rows if eligible_for_training(x, rubric_graded=True)]
    assert sorted({x.idx for x in eligible}) == [0, 3] and len(eligible) == 8
    assert len([x for x, _ in rows if eligible_for_training(x, rubric_graded=True, include_flagged=True)]) == 12
    astore = AdapterStore(store)
    assert sorted(r.rollout_id for r in astore.training_rollouts("s1")) == sorted(x.id for x in eligible)
    assert astore.training_exclusions("s1") == {"ungraded": 4, "reward_hack_flagged": 4}


def test_include_flagged_lets_flagged_rollouts_reach_reflection(setup):
    store, splits, cfg = setup
    r = roles()
    run_session(cfg(rounds=1, include_flagged=True), store, r, splits, "s2", checkpointer=InMemorySaver())
    prompt = r.teacher.calls[0][0][-1]["content"]
    assert json.dumps(BARE) in prompt and GARBLE not in prompt


def test_online_rubrics_add_a_version_with_lineage(setup):
    store, splits, cfg = setup
    r = roles()
    summary = run_session(cfg(online_rubrics=2), store, r, splits, "s3", checkpointer=InMemorySaver())
    # 2 updates x 2 train tasks; the first adds a version per task (1 duplicate dropped each), the second
    # proposes the same 2 criteria again, now both duplicates
    assert summary.online_rubric_updates == OnlineRubricUpdates(tasks=4, versions_added=2, criteria_rejected=6,
                                                                criteria_over_limit=0, failed=[])
    rs = RubricStore(store)
    sid = store.get_session("s3").id
    task_key = splits.train[0].task_key
    history = rs.rubric_history(sid, task_key)
    # updates after episodes 2 and 4 (each covering both train tasks): v1 (file), v2 (+ wavelength); the
    # second update proposes the same criteria again, which are all duplicates → no v3
    assert [h.version for h in history] == [1, 2]
    v1, v2 = history
    assert v2.parent_id == v1.id and v2.source == "online" and v2.note == "A names the process; B does not."
    assert [c.title for c in v2.criteria] == ["Mentions scattering", "Blue scatters more", "Ocean reflection", "Names wavelength"]
    assert [c.inherited_from_id for c in v2.criteria[:3]] == [c.id for c in v1.criteria]
    new = v2.criteria[3]
    assert new.source == "online" and new.inherited_from_id is None
    motivating = {x.id: x for x, _ in rs.session_rollouts(sid) if x.id in new.motivating_rollout_ids}
    assert sorted(x.idx for x in motivating.values()) == [0, 1, 3]  # the graded rollouts of the current policy
    assert len(new.motivation["reference_completions"]) == 4
    assert [c.id for c in rs.criterion_lineage(v2.criteria[0].id)] == [v2.criteria[0].id, v1.criteria[0].id]
    # round-2 episodes were graded against v2: four verdicts per graded rollout, pointing at v2's criteria
    r2 = [x for x, key in rs.session_rollouts(sid) if key == f"r002-{task_key}" and x.idx == 0][0]
    assert r2.rubric_id == v2.id and [v.title for v in rs.verdicts(r2.id)][-1] == "Names wavelength"
    assert summary_versions(store, "s3") == 2  # two train tasks, one new version each


def summary_versions(store, name):
    return RubricStore(store).grading_stats(store.get_session(name).id)["rubric_versions_added"]


def double(messages, i):
    return f"<answer>{2 * int(re.findall(r'[0-9]+', messages[-1]['content'])[0])}</answer>"


def test_verifier_reward_is_unchanged_and_stores_no_rubric_data(setup, tmp_path):
    store, _, _ = setup
    path = tmp_path / "add.jsonl"
    path.write_text("\n".join(json.dumps({"question": f"Compute {i} plus {i}.", "answer": str(2 * i)}) for i in range(6)) + "\n")
    splits = load_tasks([], path, n_train=2, n_heldout=2, seed=0)
    cfg = SessionConfig(db=store.url, families=[], tasks_file=path, train_tasks=2, heldout_tasks=2, rounds=1, rollouts=2)
    summary = run_session(cfg, store, Roles(FakePolicy(double), FakePolicy(teacher)), splits, "v", checkpointer=InMemorySaver())
    assert summary.mean_reward == 1.0 and summary.rubric is None
    assert "graded_rollouts" not in summary.model_dump()  # the rubric keys are absent from --json, not null
    rows = RubricStore(store).session_rollouts(store.get_session("v").id)
    assert all(x.grading_status is None and x.hack_flags is None and eligible_for_training(x) for x, _ in rows)


def test_reward_and_tasks_must_match(setup, tmp_path):
    _, splits, _ = setup
    with pytest.raises(ConfigError, match="has no rubric; --reward rubric-explicit needs rubric tasks"):
        check_reward_tasks("rubric-explicit", load_tasks(["chain_sum"], None, 1, 1, 0).train)
    path = tmp_path / "open.jsonl"
    path.write_text("\n".join(json.dumps({"question": f"Q{i}?", "rubric": RUBRIC}) for i in range(3)) + "\n")
    with pytest.raises(ConfigError, match="no verifiable \"answer\"; grade it with --reward rubric-explicit"):
        check_reward_tasks("verifier", load_tasks([], path, 1, 1, 0).train)
    with pytest.raises(ValueError, match="needs a judge model; pass --critic local"):
        SessionConfig(reward="rubric-explicit")
    with pytest.raises(ValueError, match="--online-rubrics needs rubric rewards"):
        SessionConfig(online_rubrics=3)


def test_migration_from_0002_keeps_rewards_and_downgrade_fills_ungraded(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    command.upgrade(alembic_config(url), "0002")
    with sqlite3.connect(tmp_path / "old.db") as c:
        c.execute("insert into sessions (id, name, config, seed, status, created_at) values (1, 's', '{}', 0, 'finished', '2026-01-01')")
        c.execute("insert into tasks (id, session_id, task_key, family, split, question, answer, source, metadata) "
                  "values (1, 1, 't', 'f', 'train', 'q', 'a', 'jsonl', '{}')")
        c.execute("insert into episodes (id, session_id, episode_key, round, task_id, system_prompt, lessons_in_context, "
                  "mean_reward, started_at, finished_at) values (1, 1, 'e', 1, 1, 'sys', '[]', 0.5, '2026-01-01', '2026-01-01')")
        c.execute("insert into rollouts (id, episode_id, idx, guided, messages, completion, reward, critique, prompt_tokens, "
                  "completion_tokens, finish_reason, latency_s) values (1, 1, 0, 0, '[]', 'x', 0.5, 'c', 1, 1, 'stop', 0.1)")
    store = LessonStore(str(tmp_path / "old.db"))  # migrates to head
    rows = RubricStore(store).session_rollouts(1)
    assert rows[0][0].reward == 0.5 and rows[0][0].grading_status is None and eligible_for_training(rows[0][0])
    store.close()
    with sqlite3.connect(tmp_path / "old.db") as c:
        c.execute("insert into rollouts (id, episode_id, idx, guided, messages, completion, reward, critique, prompt_tokens, "
                  "completion_tokens, finish_reason, latency_s, grading_status) values (2, 1, 1, 0, '[]', 'y', NULL, 'c', 1, 1, 'stop', 0.1, 'ungraded')")
    command.downgrade(alembic_config(url), "0002")
    with sqlite3.connect(tmp_path / "old.db") as c:
        assert c.execute("select id, reward from rollouts order by id").fetchall() == [(1, 0.5), (2, 0.0)]


def test_online_rubric_versions_obey_the_criterion_limit_of_the_first(tmp_path):
    """A version holds at most MAX_CRITERIA criteria, inherited plus new; the teacher's later new ones are dropped."""
    from arena.session.online_rubrics import update_rubrics
    from lessons.criteria import MAX_CRITERIA
    from rubric_scripts import NEW_CRITERION

    rubric = [{"title": f"Point q{i}", "description": f"Optional Criteria: Says point q{i} holds.", "weight": 1}
              for i in range(MAX_CRITERIA - 1)]  # one short of the limit: room for one new criterion
    second = {"title": "Mentions ozone", "description": "Important Criteria: Says ozone absorbs ultraviolet light.", "weight": 2}
    path = tmp_path / "sky.jsonl"
    path.write_text("\n".join(json.dumps({"question": f"Question {i}: why is the sky blue?", "family": "sky", "rubric": rubric,
                                          "answer": "blue", "requires_work": True}) for i in range(4)) + "\n")
    store = LessonStore(str(tmp_path / "arena.db"))
    splits = load_tasks([], path, n_train=2, n_heldout=2, seed=1)
    cfg = SessionConfig(db=str(tmp_path / "arena.db"), families=[], tasks_file=path, train_tasks=2, heldout_tasks=2,
                        rounds=2, rollouts=4, reward="rubric-explicit", critic="local", success_threshold=0.8,
                        online_rubrics=2)

    def proposing(messages, i):  # two valid, distinct new criteria every time
        if messages[0]["content"] == ONLINE_SYSTEM:
            return json.dumps({"analysis": "A names the process.", "criteria": [NEW_CRITERION, second]})
        return teacher(messages, i)

    r = roles()
    r = Roles(r.solver, FakePolicy(proposing, "teacher"), r.critic)
    try:
        summary = run_session(cfg, store, r, splits, "s", checkpointer=InMemorySaver())
        rs = RubricStore(store)
        sid = store.get_session("s").id
        for t in splits.train:
            history = rs.rubric_history(sid, t.task_key)
            # v1 (file, 29), v2 (+ the teacher's first, up to 30, its second dropped); the next update finds v2 full
            assert [len(h.criteria) for h in history] == [MAX_CRITERIA - 1, MAX_CRITERIA]
            assert history[-1].criteria[-1].title == NEW_CRITERION["title"]
            with pytest.raises(ValueError, match=f"at most {MAX_CRITERIA} criteria"):  # the store refuses more too
                rs.add_version(sid, t.task_key, [second], parent_id=history[-1].id)
        updates = summary.online_rubric_updates
        assert updates.versions_added == 2 and updates.criteria_over_limit == 2
        # the second update: rubrics full, teacher not asked
        assert any(f"limit of {MAX_CRITERIA}" in f for f in updates.failed)
        online_asks = [m for m, _ in r.teacher.calls if m[0]["content"] == ONLINE_SYSTEM]
        assert len(online_asks) == 2  # one per task in the first update only
    finally:
        store.close()
