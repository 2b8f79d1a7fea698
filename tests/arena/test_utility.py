"""Lesson utility A/B: paired with/without samples, Newcombe intervals, stored results and life cycle."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from agents.backends.fake import FakePolicy
from agents.capabilities import Capability
from arena.config import SessionConfig
from arena.episode.context import Roles
from arena.session.runner import run_session
from arena.session.utility import UtilitySettings, maybe_check_utility, measure_lesson, validation_tasks
from arena.tasks.identity import task_identity
from arena.stats import paired_difference_interval, wilson_interval
from arena.tasks.sources import load_tasks
from lessons.library.curation import Provenance

GOOD = "Add the ones digits first, then the tens, and carry when a column passes nine."
BAD = "Always subtract one from your sum before answering."


def write_tasks(path: Path, n: int = 12) -> Path:
    rows = [{"question": f"Compute {10 + i} plus {20 + 2 * i}.", "answer": str(30 + 3 * i), "family": "adding"} for i in range(n)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def solver(messages, i):
    """Correct only when GOOD is in the system prompt, and never when BAD is."""
    a, b = map(int, re.findall(r"\d+", messages[-1]["content"]))
    system = messages[0]["content"]
    right = GOOD in system and BAD not in system
    return f"<answer>{a + b if right else a + b + 1}</answer>"


def teacher(messages, i):
    return json.dumps({"analysis": "x", "add": [], "tags": []})


def test_paired_interval_reduces_to_newcombe_hybrid_when_pairs_are_uncorrelated() -> None:
    # a*d == b*c (phi = 0): a=2, b=2, c=2, d=2 -> p1 = p2 = 0.5, interval = ±sqrt((p1-l1)^2 + (u2-p2)^2)
    with_ = [1, 1, 1, 1, 0, 0, 0, 0]
    without = [1, 1, 0, 0, 1, 1, 0, 0]
    diff, lo, hi = paired_difference_interval([bool(x) for x in with_], [bool(x) for x in without])
    l1, u1 = wilson_interval(4, 8)
    assert diff == 0.0
    assert lo == pytest.approx(-math.hypot(0.5 - l1, u1 - 0.5)) and hi == pytest.approx(math.hypot(u1 - 0.5, 0.5 - l1))


def test_paired_interval_all_better_excludes_zero_and_all_equal_does_not() -> None:
    diff, lo, hi = paired_difference_interval([True] * 16, [False] * 16)
    assert diff == 1.0 and lo > 0.5 and hi == 1.0
    diff, lo, hi = paired_difference_interval([False] * 16, [False] * 16)
    assert diff == 0.0 and lo == pytest.approx(-wilson_interval(0, 16)[1]) and hi == pytest.approx(wilson_interval(0, 16)[1])
    with pytest.raises(ValueError):
        paired_difference_interval([True], [])


@pytest.fixture
def setup(tmp_path: Path):
    from lessons.library.store import LessonStore

    store = LessonStore(str(tmp_path / "arena.db"))
    splits = load_tasks([], write_tasks(tmp_path / "adding.jsonl"), n_train=4, n_heldout=4, seed=1)
    yield store, splits, tmp_path
    store.close()


def add(store, text, status="candidate"):
    with store.curate() as c:
        return c.add(text, "adding", "", Provenance(origin={"by": "test"}), status=status)


def test_measure_lesson_pairs_arms_and_scores_the_effect(setup) -> None:
    store, splits, _ = setup
    good = add(store, GOOD)
    res = measure_lesson(store, FakePolicy(solver), store.get_lesson(good), splits.train[:3], UtilitySettings(samples=2), seed=5)
    assert (res.n, res.pass_with, res.pass_without, res.effect) == (6, 1.0, 0.0, 1.0)
    assert res.ci[0] > 0 and res.task_keys == [t.task_key for t in splits.train[:3]]


def test_the_baseline_arm_holds_active_lessons_only_never_other_candidates(setup) -> None:
    """A candidate is measured against the active set: another candidate is in neither arm, an active lesson in both."""
    store, splits, _ = setup
    good = add(store, GOOD)
    bad = add(store, BAD)  # a candidate: left out of both arms, so GOOD's effect shows
    res = measure_lesson(store, FakePolicy(solver), store.get_lesson(good), splits.train[:4], UtilitySettings(), seed=5)
    assert (res.pass_with, res.pass_without, res.effect) == (1.0, 0.0, 1.0)
    with store.curate() as c:
        c.retire(bad, "replaced by an active copy", Provenance(origin={"by": "test"}))
    add(store, BAD, status="active")  # an active lesson is in both arms: the solver is wrong with and without GOOD
    res = measure_lesson(store, FakePolicy(solver), store.get_lesson(good), splits.train[:4], UtilitySettings(), seed=5)
    assert (res.pass_with, res.pass_without, res.effect) == (0.0, 0.0, 0.0)


class BatchingFake(FakePolicy):
    """A FakePolicy with ``sample_batch``: records each batch's size, temperature and seed."""

    capabilities = frozenset({Capability.SAMPLE, Capability.SAMPLE_BATCH})

    def __init__(self, responder) -> None:
        super().__init__(responder)
        self.batches: list[tuple[int, float, int | None]] = []

    def sample_batch(self, chats, temperature=0.0, max_tokens=256, stop=None, seed=None):
        self.batches.append((len(chats), temperature, seed))
        return [self.sample(chat, n=1, temperature=temperature, max_tokens=max_tokens, seed=seed)[0] for chat in chats]


def test_a_batching_solver_decodes_each_arm_in_one_batch_greedy_by_default(setup) -> None:
    store, splits, _ = setup
    good = add(store, GOOD)
    policy = BatchingFake(solver)
    res = measure_lesson(store, policy, store.get_lesson(good), splits.train[:4], UtilitySettings(samples=1), seed=7)
    assert policy.batches == [(4, 0.0, 7), (4, 0.0, 7)]  # one greedy batch per arm, the same seed in both
    assert (res.n, res.pass_with, res.pass_without) == (4, 1.0, 0.0)
    policy.batches.clear()
    res = measure_lesson(store, policy, store.get_lesson(good), splits.train[:4],
                         UtilitySettings(samples=3, temperature=0.8), seed=7)
    assert policy.batches == [(12, 0.8, 7), (12, 0.8, 7)]  # samples > 1: sampled at the temperature
    assert res.n == 12 and res.task_keys == [t.task_key for t in splits.train[:4]]


def test_validation_tasks_are_new_draws_never_a_session_task_in_any_spelling() -> None:
    family = "chain_sum:min_terms=2,max_terms=2,min_digits=1,max_digits=2"
    splits = load_tasks([family], None, 8, 16, seed=3)
    taken = {task_identity(t) for t in [*splits.train, *splits.heldout]}
    val = validation_tasks([family], 24, 3, taken)
    assert len(val) == 24 and len({task_identity(t) for t in val}) == 24
    assert not {task_identity(t) for t in val} & taken
    assert all(t.task_key.startswith("chain_sum/train/ab-") and t.split == "train" for t in val)
    assert [t.question for t in validation_tasks([family], 24, 3, taken)] == [t.question for t in val]  # same on resume
    assert validation_tasks([family], 0, 3, taken) == [] and validation_tasks([], 24, 3, taken) == []


def test_a_session_tops_up_the_ab_with_validation_tasks(tmp_path) -> None:
    from sqlalchemy import select

    from lessons.db.schema import LessonUtilityRow
    from lessons.library.store import LessonStore

    family = "chain_sum:min_terms=2,max_terms=2,min_digits=1,max_digits=2"
    cfg = SessionConfig(db=str(tmp_path / "arena.db"), families=[family], train_tasks=2, heldout_tasks=2, rounds=1,
                        rollouts=2, utility_every=2, utility_tasks=10, utility_samples=1, hint_modes=[])
    splits = load_tasks(cfg.families, None, cfg.train_tasks, cfg.heldout_tasks, cfg.seed)
    store = LessonStore(cfg.db)
    with store.curate() as c:
        c.add(GOOD, "chain_sum", "", Provenance(origin={"by": "test"}))
    run_session(cfg, store, Roles(FakePolicy(lambda m, i: "<answer>0</answer>"), FakePolicy(teacher)), splits, "s",
                checkpointer=InMemorySaver())
    with store.read() as s:
        (keys,) = s.scalars(select(LessonUtilityRow.task_keys)).all()
    assert len(keys) == 10 and sum("/train/ab-" in k for k in keys) == 8  # 2 train tasks + 8 validation tasks
    assert not set(keys) & {t.task_key for t in splits.heldout}


def solver_half(messages, i):
    """Never correct with BAD in the system prompt; otherwise always with GOOD, and on even samples without it."""
    a, b = map(int, re.findall(r"\d+", messages[-1]["content"]))
    system = messages[0]["content"]
    right = BAD not in system and (GOOD in system or i % 2 == 0)
    return f"<answer>{a + b if right else a + b + 1}</answer>"


def test_utility_check_stores_results_and_moves_the_life_cycle(setup) -> None:
    store, splits, _ = setup
    good, bad = add(store, GOOD), add(store, BAD, status="active")
    policy = FakePolicy(solver_half)
    sid = store.create_session("s", {}, 0)
    store.upsert_tasks(sid, [*splits.train, *splits.heldout])
    settings = UtilitySettings(every=1, lessons=4, tasks=4, samples=4)
    assert maybe_check_utility(store, policy, sid, splits.train, settings, seed=0) == []  # no episode yet
    from lessons.library.store import EpisodeRecord, RolloutRecord

    r = RolloutRecord(0, [{"role": "user", "content": "q"}], "c", "1", 0.0, "x", 1, 1, "stop", 0.0)
    store.record_episode(EpisodeRecord(sid, "r001-x", 1, splits.train[0].task_key, "sys", [], [r, r], None))
    results = maybe_check_utility(store, policy, sid, splits.train, settings, seed=0)
    # the active BAD is in both of GOOD's arms and masks it; BAD against the active set without it (none) hurts
    assert {x.lesson_id: x.effect for x in results} == {good: 0.0, bad: -0.5}
    assert store.get_lesson(good).status == "candidate" and store.get_lesson(bad).status == "retired"
    assert store.utility_checks(sid) == {1}
    assert maybe_check_utility(store, policy, sid, splits.train, settings, seed=0) == []  # already done at 1

    store.record_episode(EpisodeRecord(sid, "r001-y", 1, splits.train[0].task_key, "sys", [], [r, r], None))
    (again,) = maybe_check_utility(store, policy, sid, splits.train, settings, seed=0)
    assert (again.lesson_id, again.effect, again.n) == (good, 0.5, 16)
    assert store.get_lesson(good).status == "active"  # CI above 0: promoted
    assert [h["effect"] for h in store.utility_history(good)] == [0.0, 0.5]
    assert store.lesson_events(good)[-1].op == "PROMOTE"


def test_lessons_of_one_check_share_its_tasks_and_decode_a_common_baseline_arm_once(setup) -> None:
    from lessons.library.store import EpisodeRecord, RolloutRecord

    store, splits, _ = setup
    first, second = add(store, "Read the question twice before you answer it."), add(store, "Say what is asked first.")
    policy = BatchingFake(solver)
    sid = store.create_session("s", {}, 0)
    store.upsert_tasks(sid, [*splits.train, *splits.heldout])
    r = RolloutRecord(0, [{"role": "user", "content": "q"}], "c", "1", 0.0, "x", 1, 1, "stop", 0.0)
    settings = UtilitySettings(every=1, lessons=2, tasks=4)
    store.record_episode(EpisodeRecord(sid, "r001-x", 1, splits.train[0].task_key, "sys", [], [r, r], None))
    a, b = maybe_check_utility(store, policy, sid, splits.train, settings, seed=0)
    assert (a.lesson_id, b.lesson_id) == (first, second) and a.task_keys == b.task_keys
    assert (a.effect, b.effect) == (0.0, 0.0) and store.get_lesson(first).status == "candidate"
    assert len(policy.batches) == 3  # first's two arms, then second's with-arm: its baseline (no lesson) is first's

    # a lesson promoted in between changes the next baseline: it holds the new active lesson (the prompts of GOOD's
    # with-arm, so those outcomes serve), never the stale no-lesson baseline
    good, late = add(store, GOOD), add(store, "Write the sum and nothing else.")
    policy.batches.clear()
    store.record_episode(EpisodeRecord(sid, "r001-y", 1, splits.train[0].task_key, "sys", [], [r, r], None))
    g, c = maybe_check_utility(store, policy, sid, splits.train, settings, seed=0)
    assert (g.lesson_id, g.effect, store.get_lesson(good).status) == (good, 1.0, "active")
    assert (c.lesson_id, c.pass_with, c.pass_without) == (late, 1.0, 1.0)  # GOOD, now active, is in both arms
    assert len(policy.batches) == 3  # GOOD's two arms and late's with-arm


def test_session_runs_utility_checks_every_n_episodes(setup) -> None:
    store, splits, tmp = setup
    add(store, GOOD)
    cfg = SessionConfig(db=str(tmp / "arena.db"), families=[], tasks_file=tmp / "adding.jsonl", train_tasks=4,
                        heldout_tasks=4, rounds=1, rollouts=2, utility_every=2, utility_samples=2)
    summary = run_session(cfg, store, Roles(FakePolicy(solver), FakePolicy(teacher)), splits, "s1", checkpointer=InMemorySaver())
    assert summary.utility_checks == 2  # after episodes 2 and 4
    assert summary.lessons_active == 1 and summary.lessons_candidate == 0
    assert len(store.utility_history("adding-00001")) == 2
