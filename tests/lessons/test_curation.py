"""Curation ops on the lesson library: every op applied and logged, life cycle, budget, near-duplicates."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from lesson_texts import DISTINCT_LESSONS
from sqlalchemy import text as sql_text

from lessons.library.curation import CurationError, CurationPolicy, Provenance
from lessons.library.store import EpisodeRecord, LessonStore, RolloutRecord
from lessons.ops import AddOp, EditOp, LessonTag, MergeOp, Reflection, RetireOp
from lessons.similarity import similarity


def words(text: str) -> int:
    return len(text.split())


@pytest.fixture
def store(library_url: str):
    st = LessonStore(library_url)
    st.count_tokens = words
    yield st
    st.close()


@pytest.fixture
def sid(store: LessonStore) -> int:
    from dataclasses import dataclass, field

    @dataclass
    class T:
        task_key: str
        family: str = "chain_sum"
        split: str = "train"
        question: str = "What is 3 + 4?"
        answer: str = "7"
        source: str = "jsonl"
        metadata: dict = field(default_factory=dict)

    s = store.create_session("s", {}, 0)
    store.upsert_tasks(s, [T("chain_sum/train/00000")])
    return s


CLI = Provenance(origin={"by": "cli"})


def add(store: LessonStore, text: str, scope: str = "chain_sum", status: str = "candidate") -> str:
    with store.curate() as c:
        return c.add(text, scope, "because", CLI, status=status)


def ops(store: LessonStore, lesson_id: str) -> list[str]:
    return [e.op for e in store.lesson_events(lesson_id)]


def episode(sid: int, key: str, refl: Reflection, context: list[str]) -> EpisodeRecord:
    r = RolloutRecord(0, [{"role": "user", "content": "q"}], "c", "7", 1.0, "ok", 5, 3, "stop", 0.1)
    return EpisodeRecord(sid, key, 1, "chain_sum/train/00000", "sys", context, [r, r], refl)


# --------------------------------------------------------------------------- each op


def test_every_op_is_applied_and_logged_with_before_after(store: LessonStore) -> None:
    a = add(store, DISTINCT_LESSONS[0])
    b = add(store, DISTINCT_LESSONS[1])
    assert (a, b) == ("chain_sum-00001", "chain_sum-00002")
    with store.curate() as c:
        c.edit(a, "Carry the tens digit whenever a column sum passes nine.", "clearer", CLI)
        c.vote(a, "helpful", CLI, "it helped")
        c.vote(b, "harmful", CLI, "it misled")
        merged = c.merge([a, b], "Carry tens digits and keep minus signs.", "same topic", CLI)
    with store.curate() as c:
        c.retire(merged, "superseded", CLI)

    ev_a = store.lesson_events(a)
    assert [e.op for e in ev_a] == ["ADD", "EDIT", "UPVOTE", "MERGE"]
    assert (ev_a[1].before, ev_a[1].after) == (DISTINCT_LESSONS[0], "Carry the tens digit whenever a column sum passes nine.")
    assert ev_a[3].target == merged and ev_a[3].before == "Carry the tens digit whenever a column sum passes nine."
    assert all(e.origin == {"by": "cli"} for e in ev_a)
    assert ops(store, b) == ["ADD", "DOWNVOTE", "MERGE"]
    assert ops(store, merged) == ["MERGE", "RETIRE"]
    retire = store.lesson_events(merged)[1]
    assert (retire.before, retire.after, retire.rationale) == ("candidate", "retired", "superseded")

    la, lb, lm = (store.get_lesson(i) for i in (a, b, merged))
    assert (la.status, lb.status, lm.status) == ("retired", "retired", "retired")
    assert (lm.helpful, lm.harmful, lm.scope) == (1, 1, "chain_sum")  # counters summed
    assert la.text == "Carry the tens digit whenever a column sum passes nine."
    assert len(store.list_lessons()) == 3  # nothing deleted


def test_ops_on_unknown_or_retired_lessons_fail_and_write_nothing(store: LessonStore) -> None:
    a = add(store, DISTINCT_LESSONS[0])
    with store.curate() as c:
        c.retire(a, "wrong", CLI)
    n_events = len(store.lesson_events())
    for fn in (
        lambda c: c.edit(a, "A new text for a retired lesson.", "", CLI),
        lambda c: c.vote(a, "helpful", CLI),
        lambda c: c.retire(a, "again", CLI),
        lambda c: c.merge([a, "chain_sum-00099"], "Merged text here.", "", CLI),
        lambda c: c.edit("nope-00001", "Some new lesson text.", "", CLI),
        lambda c: c.retire("nope-00001", "", CLI),
        lambda c: c.vote("nope-00001", "great", CLI),
    ):
        with pytest.raises(CurationError), store.curate() as c:
            fn(c)
    assert len(store.lesson_events()) == n_events


def test_ids_are_stable_readable_and_never_reused(store: LessonStore) -> None:
    a = add(store, DISTINCT_LESSONS[0])
    with store.curate() as c:
        c.retire(a, "bad", CLI)
    assert add(store, DISTINCT_LESSONS[1]) == "chain_sum-00002"
    assert add(store, DISTINCT_LESSONS[2], scope="global") == "global-00001"
    assert add(store, DISTINCT_LESSONS[3], scope="Letter_Counting") == "letter_counting-00001"


# --------------------------------------------------------------------------- life cycle


def test_candidate_is_promoted_on_net_helpful_votes_and_retired_on_harmful(store: LessonStore) -> None:
    store.curation_policy = CurationPolicy(promote_votes=2, retire_votes=3)
    a, b = add(store, DISTINCT_LESSONS[0]), add(store, DISTINCT_LESSONS[1])
    with store.curate() as c:
        c.vote(a, "helpful", CLI)
    assert store.get_lesson(a).status == "candidate"
    with store.curate() as c:
        c.vote(a, "helpful", CLI)
        assert c.result.promoted == [a]
    assert store.get_lesson(a).status == "active"
    assert ops(store, a)[-1] == "PROMOTE"

    with store.curate() as c:
        for _ in range(3):
            c.vote(b, "harmful", CLI)
        assert c.result.retired == [b]
    les = store.get_lesson(b)
    assert les.status == "retired"
    ev = store.lesson_events(b)[-1]
    assert ev.op == "RETIRE" and "harmful 3 vs helpful 0" in ev.rationale


def test_measured_utility_promotes_or_retires_with_reason(store: LessonStore) -> None:
    a, b, c_ = (add(store, t) for t in DISTINCT_LESSONS[:3])
    with store.curate() as c:
        c.record_utility(a, n=32, pass_with=0.6, pass_without=0.2, ci=(0.2, 0.6), task_keys=["t"], session_id=None, after_episodes=4)
        c.record_utility(b, n=32, pass_with=0.1, pass_without=0.5, ci=(-0.6, -0.2), task_keys=["t"], session_id=None, after_episodes=4)
        c.record_utility(c_, n=32, pass_with=0.3, pass_without=0.25, ci=(-0.1, 0.2), task_keys=["t"], session_id=None, after_episodes=4)
    la, lb, lc = (store.get_lesson(i) for i in (a, b, c_))
    assert (la.status, lb.status, lc.status) == ("active", "retired", "candidate")
    assert la.utility == pytest.approx(0.4) and la.utility_ci == (0.2, 0.6) and la.utility_n == 32
    assert "measured utility -0.400" in store.lesson_events(b)[-1].rationale
    assert la.rank_score == pytest.approx(10 * 0.4)  # utility_weight 10, no votes
    assert store.utility_history(a)[0]["effect"] == pytest.approx(0.4)


def test_one_checks_utility_ab_recorded_twice_stores_one_row_and_moves_the_lesson_once(library_url: str) -> None:
    """Issue 32 §1: two owners (or a check run again after a resume) record the same A/B at the same instant:
    the "not stored yet" read, the row and the life-cycle move are one write transaction, so one wins."""
    import threading

    with LessonStore(library_url) as st:
        sid = st.create_session("s", {}, 0)
        a = add(st, DISTINCT_LESSONS[0])
    stores = [LessonStore(library_url) for _ in range(4)]
    start = threading.Barrier(len(stores))
    stored: list[bool] = []

    def record(st: LessonStore) -> None:
        start.wait()
        with st.curate() as c:
            stored.append(c.record_utility(a, n=32, pass_with=0.1, pass_without=0.5, ci=(-0.6, -0.2), task_keys=["t"],
                                           session_id=sid, after_episodes=4))

    threads = [threading.Thread(target=record, args=(st,)) for st in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert sorted(stored) == [False, False, False, True]
        assert len(stores[0].utility_history(a)) == 1
        assert [e.op for e in stores[0].lesson_events(a)].count("RETIRE") == 1
        with stores[0].curate() as c:  # another check (another episode count) is a new A/B
            assert c.record_utility(a, n=32, pass_with=0.1, pass_without=0.5, ci=(-0.6, -0.2), task_keys=["t"],
                                    session_id=sid, after_episodes=8)
    finally:
        for st in stores:
            st.close()


def test_votes_do_not_promote_a_lesson_whose_measured_utility_says_otherwise(store: LessonStore) -> None:
    """Found by a new user: one reflection (a helpful tag plus a near-duplicate ADD) gave a lesson 2 votes and made it
    active although its A/B was -0.125 [-0.344, +0.061]. A measurement outranks the teacher's votes."""
    store.curation_policy = CurationPolicy(promote_votes=2)
    a = add(store, DISTINCT_LESSONS[0])
    with store.curate() as c:
        c.record_utility(a, n=16, pass_with=0.1, pass_without=0.225, ci=(-0.344, 0.061), task_keys=["t"], session_id=None,
                         after_episodes=16)
    with store.curate() as c:
        c.vote(a, "helpful", CLI)
        c.vote(a, "helpful", CLI)
        assert c.result.promoted == []
    assert store.get_lesson(a).status == "candidate"


def test_a_measured_candidate_becomes_active_on_its_measurement_only(store: LessonStore) -> None:
    """Session 24: in `arena bench learning` the teacher upvoted every lesson it was shown, and two reflections
    made a broken lesson ("Think of and which have the relation of and ...") active before its A/B came. In a
    scope the session's utility A/B measures, votes rank and retire; only the A/B promotes."""
    store.curation_policy = CurationPolicy(measured_scopes=frozenset({"chain_sum"}))
    a, b = add(store, DISTINCT_LESSONS[0]), add(store, DISTINCT_LESSONS[1])
    g = add(store, DISTINCT_LESSONS[2], scope="global")
    other = add(store, DISTINCT_LESSONS[3], scope="writing")  # a rubric-only family: no A/B, votes promote
    with store.curate() as c:
        for lid in (a, g, other):
            for _ in range(5):
                c.vote(lid, "helpful", CLI)
        assert c.result.promoted == [other]
    assert store.get_lesson(a).status == store.get_lesson(g).status == "candidate" and store.get_lesson(a).helpful == 5
    with store.curate() as c:
        c.record_utility(b, n=96, pass_with=0.35, pass_without=0.25, ci=(0.03, 0.17), task_keys=["t"], session_id=None,
                         after_episodes=16)
        assert c.result.promoted == [b]
    assert store.get_lesson(b).status == "active"
    assert CurationPolicy().votes_promote("chain_sum") and CurationPolicy().votes_promote("global")


def test_a_session_with_the_utility_ab_promotes_its_verifiable_families_on_the_measurement(tmp_path) -> None:
    from arena.config import SessionConfig
    from arena.session.runner import session_curation_policy
    from arena.tasks.model import Task

    tasks = [Task(task_key="k1", family="chain_sum", split="train", question="1 + 2 =", answer="3", source="reasoning_gym"),
             Task(task_key="k2", family="writing", split="train", question="Write a haiku.", answer="a haiku",
                  source="jsonl", metadata={"verifiable": False})]
    on = session_curation_policy(SessionConfig(db=str(tmp_path / "a.db"), utility_every=16), tasks)
    assert on.measured_scopes == {"chain_sum"} and not on.votes_promote("global") and on.votes_promote("writing")
    off = session_curation_policy(SessionConfig(db=str(tmp_path / "a.db"), utility_every=0, library_tokens=900), tasks)
    assert off.measured_scopes == frozenset() and off.votes_promote("chain_sum") and off.library_tokens == 900


# --------------------------------------------------------------------------- near-duplicates


PARAPHRASES = [
    ("Always put the final answer inside <answer></answer> tags.", "Put your final answer in <answer> tags at the end."),
    ("When the number being subtracted is larger, the result is negative.", "If you subtract a larger number, the result will be negative."),
    ("Add the numbers one at a time from left to right.", "Add numbers from left to right, one at a time."),
    ("Double-check each addition before writing the answer.", "Before giving the answer, double-check every addition."),
    ("Keep track of the minus signs when adding negative numbers.", "When adding negative numbers, track the minus signs carefully."),
]
DIFFERENT = [
    ("Add the numbers from left to right.", "Subtract the numbers from right to left."),
    ("Carry the one when a column sum exceeds nine.", "Borrow from the next column when subtracting a larger digit."),
    ("Multiply before adding.", "Add before multiplying only inside parentheses."),
]


@pytest.mark.parametrize(("first", "second"), PARAPHRASES)
def test_paraphrased_add_upvotes_the_existing_lesson(store: LessonStore, first: str, second: str) -> None:
    a = add(store, first)
    with store.curate() as c:
        assert c.add(second, "chain_sum", "", CLI) == a
        assert c.result.added == [] and c.result.upvoted == [a]
    assert len(store.list_lessons()) == 1
    ev = store.lesson_events(a)[-1]
    assert ev.op == "UPVOTE" and "near-duplicate ADD" in ev.rationale and second in ev.rationale


@pytest.mark.parametrize(("first", "second"), DIFFERENT)
def test_different_lessons_sharing_words_stay_apart(store: LessonStore, first: str, second: str) -> None:
    assert similarity(first, second) < CurationPolicy().near_duplicate
    add(store, first)
    add(store, second)
    assert len(store.list_lessons()) == 2


def test_family_add_that_duplicates_a_global_lesson_upvotes_it(store: LessonStore) -> None:
    g = add(store, PARAPHRASES[0][0], scope="global")
    with store.curate() as c:
        assert c.add(PARAPHRASES[0][1], "chain_sum", "", CLI) == g


def test_distinct_lesson_texts_used_by_tests_are_below_threshold() -> None:
    t = CurationPolicy().near_duplicate
    assert max(similarity(a, b) for i, a in enumerate(DISTINCT_LESSONS) for b in DISTINCT_LESSONS[i + 1:]) < t


# --------------------------------------------------------------------------- budget


def test_add_past_the_budget_is_rejected_not_silently_accepted(store: LessonStore) -> None:
    store.curation_policy = CurationPolicy(library_tokens=15)
    add(store, DISTINCT_LESSONS[0])  # 8 words
    add(store, DISTINCT_LESSONS[1])  # 7 words: 15, full
    with pytest.raises(CurationError, match=r"library over budget: 15 \+ 6 > 15"), store.curate() as c:
        c.add(DISTINCT_LESSONS[2], "chain_sum", "", CLI)  # 6 words
    assert len(store.list_lessons()) == 2
    assert store.library_tokens_used() == 15


def test_edit_and_merge_are_checked_against_the_budget(store: LessonStore) -> None:
    store.curation_policy = CurationPolicy(library_tokens=16)
    a, b = add(store, DISTINCT_LESSONS[0]), add(store, DISTINCT_LESSONS[1])  # 15 tokens
    with pytest.raises(CurationError, match="over budget"), store.curate() as c:
        c.edit(a, DISTINCT_LESSONS[0] + " Then check it twice more.", "", CLI)
    assert store.get_lesson(a).text == DISTINCT_LESSONS[0]
    with store.curate() as c:  # a merge frees its sources' tokens first
        m = c.merge([a, b], "Carry tens and keep minus signs.", "", CLI)
    assert store.library_tokens_used() == 6 and store.get_lesson(m).status == "candidate"


def test_stale_candidates_are_evicted_to_make_room_with_a_reason(store: LessonStore) -> None:
    store.curation_policy = CurationPolicy(library_tokens=15, evict_after_uses=3)
    a, b = add(store, DISTINCT_LESSONS[0]), add(store, DISTINCT_LESSONS[1])
    with store.write() as s, s.begin():  # on either backend
        s.execute(sql_text("UPDATE lessons SET times_in_context = 5 WHERE lesson_id = :a"), {"a": a})
    new = add(store, DISTINCT_LESSONS[2])
    assert store.get_lesson(a).status == "retired" and store.get_lesson(b).status == "candidate"
    ev = store.lesson_events(a)[-1]
    assert ev.op == "RETIRE" and "evicted" in ev.rationale and "shown 5 times" in ev.rationale
    assert store.get_lesson(new).status == "candidate"


# --------------------------------------------------------------------------- through record_episode


def test_teacher_ops_apply_through_record_episode_with_provenance(store: LessonStore, sid: int) -> None:
    a, b, c_ = (add(store, t) for t in DISTINCT_LESSONS[:3])
    refl = Reflection(
        analysis="the winners carried",
        tags=[LessonTag(lesson_id=a, tag="helpful")],
        edit=[EditOp(lesson_id=a, text="Carry the tens digit every time a column overflows.")],
        merge=[MergeOp(lesson_ids=[b, c_], text="Keep minus signs and read the whole question.")],
        retire=[RetireOp(lesson_id="chain_sum-00077", why="not shown")],
        add=[AddOp(text=DISTINCT_LESSONS[5], scope="chain_sum")],
    )
    res = store.record_episode(episode(sid, "r001-a", refl, [a, b, c_]))
    assert res.upvoted == [a] and res.edited == [a] and res.merged == ["chain_sum-00004"]  # MERGE before ADD
    assert res.lessons_added == ["chain_sum-00005"]
    assert sorted(res.retired) == [b, c_]
    assert res.rejected_ops == ["RETIRE chain_sum-00077: lesson chain_sum-00077 was not in context"]
    ev = store.lesson_events(a)[-1]
    assert ev.op == "EDIT" and ev.episode_id == res.episode_id and len(ev.rollout_ids) == 2
    assert store.get_lesson("chain_sum-00005").status == "candidate"


def test_a_failing_op_does_not_undo_the_others_of_the_episode(store: LessonStore, sid: int) -> None:
    store.curation_policy = CurationPolicy(library_tokens=20)
    a = add(store, DISTINCT_LESSONS[0])
    refl = Reflection(
        tags=[LessonTag(lesson_id=a, tag="helpful")],
        add=[AddOp(text=DISTINCT_LESSONS[8] + " " + DISTINCT_LESSONS[9] + " " + DISTINCT_LESSONS[10])],
    )
    res = store.record_episode(episode(sid, "r001-a", refl, [a]))
    assert res.upvoted == [a] and res.lessons_added == []
    assert len(res.rejected_ops) == 1 and "library over budget" in res.rejected_ops[0]
    assert store.get_lesson(a).helpful == 1


def test_shrinking_edits_and_merges_are_allowed_over_budget(store: LessonStore) -> None:
    a, b = add(store, DISTINCT_LESSONS[0]), add(store, DISTINCT_LESSONS[1])  # 15 tokens
    store.curation_policy = CurationPolicy(library_tokens=5)  # the budget was lowered below what is stored
    with store.curate() as c:
        c.edit(a, "Carry tens digits.", "", CLI)  # 8 -> 3 words: allowed
        c.merge([a, b], "Carry tens, keep signs.", "", CLI)  # 3 + 7 -> 4: allowed
    assert store.library_tokens_used() == 4


def test_edit_or_merge_into_a_duplicate_of_another_lesson_is_refused(store: LessonStore) -> None:
    a, b, c_ = (add(store, t) for t in DISTINCT_LESSONS[:3])
    with pytest.raises(CurationError, match=f"would duplicate {b}"), store.curate() as c:
        c.edit(a, DISTINCT_LESSONS[1], "", CLI)
    with pytest.raises(CurationError, match=f"would duplicate {c_}"), store.curate() as c:
        c.merge([a, b], "Read the whole question before you start.", "", CLI)
    assert [les.status for les in store.list_lessons()] == ["candidate"] * 3


@pytest.mark.parametrize("family", ["chain_sum:min_terms=2", "../../etc", 'a"b;DROP', "x" * 81, "-lead"])
def test_a_family_must_be_a_family_name(store: LessonStore, family: str) -> None:
    with pytest.raises(CurationError, match="family must be a task family name"), store.curate() as c:
        c.add(DISTINCT_LESSONS[0], family, "", CLI)
    assert store.list_lessons() == []


def test_family_names_are_normalised_the_same_for_lessons_and_tasks(store: LessonStore) -> None:
    lid = add(store, DISTINCT_LESSONS[0], scope="Word Problems")
    assert lid == "word_problems-00001"
    assert [les.lesson_id for les in store.live_lessons("Word Problems")] == [lid]


def test_a_foreign_sqlite_database_is_refused_not_modified(tmp_path: Path) -> None:
    from lessons.library.store import StoreError

    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (x TEXT)")
    with pytest.raises(StoreError, match="not a Lesson Arena library"):
        LessonStore(str(path))
    with sqlite3.connect(path) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")] == ["notes"]
