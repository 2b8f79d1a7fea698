"""The episode graph and the session runner with deterministic fake policies (no model)."""

from __future__ import annotations

import json
import re
import sqlite3

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from agents.backends.fake import FakePolicy
from arena.config import SessionConfig
from arena.episode.context import EpisodeSettings, Roles
from arena.episode.graph import build_episode_graph
from arena.session.runner import run_session
from arena.tasks.sources import load_tasks
from lessons.library.store import LessonStore

LESSON = "Add the ones digits first, then the tens, and carry when a column passes nine."


def write_tasks(path, n=12):
    lines = []
    for i in range(n):
        a, b = 10 + i, 20 + 2 * i
        lines.append(json.dumps({"question": f"Compute {a} plus {b}.", "answer": str(a + b), "family": "adding"}))
    path.write_text("\n".join(lines) + "\n")
    return path


def solver_responder(messages, i):
    """Rollouts 0 and 1 answer correctly, the rest are off by one; lessons never change that."""
    a, b = map(int, re.findall(r"\d+", messages[-1]["content"]))
    return f"{a} + {b} = {a + b}. <answer>{a + b if i < 2 else a + b + 1}</answer>"


def teacher_responder(messages, i):
    shown = re.findall(r"^- (\S+):", messages[-1]["content"], re.M)
    return "```json\n" + json.dumps(
        {
            "analysis": "The correct attempts added column by column.",
            "add": [{"text": LESSON, "scope": "adding"}],
            "tags": [{"lesson_id": lid, "tag": "helpful"} for lid in shown],
        }
    ) + "\n```"


@pytest.fixture
def setup(tmp_path):
    store = LessonStore(str(tmp_path / "arena.db"))
    splits = load_tasks([], write_tasks(tmp_path / "adding.jsonl"), n_train=3, n_heldout=4, seed=1)
    cfg = SessionConfig(db=str(tmp_path / "arena.db"), families=[], tasks_file=tmp_path / "adding.jsonl",
                        train_tasks=3, heldout_tasks=4, rounds=2, rollouts=4,
                        utility_every=0)  # the graph alone: no utility A/B samples among the solver's calls
    yield store, splits, cfg
    store.close()


def test_session_records_groups_rewards_and_lessons(setup):
    store, splits, cfg = setup
    solver, teacher = FakePolicy(solver_responder, "solver"), FakePolicy(teacher_responder, "teacher")
    summary = run_session(cfg, store, Roles(solver, teacher), splits, "s1", checkpointer=InMemorySaver())

    assert summary.episodes == 6  # 2 rounds x 3 train tasks
    assert summary.rollouts == 24
    assert summary.mean_reward == pytest.approx(0.5)  # 2 of 4 rollouts correct in every group
    assert summary.lessons_added == 1  # the same lesson proposed 6 times is one lesson, upvoted
    assert summary.lessons_active == 1
    # held-out: greedy sampling with the fake is rollout 0 → always correct
    for e in (summary.heldout_before, summary.heldout_after, summary.heldout_after_no_lessons):
        assert e.pass_at_1 == 1.0 and e.n == 4
        lo, hi = e.ci95
        assert 0.0 < lo < 1.0 and hi == 1.0
    assert summary.rounds[0].k == 4 and summary.rounds[0].pass_at_k == 1.0
    assert summary.rounds[0].pass_at_1 == pytest.approx(0.5)

    # the lesson reached the solver's system prompt after it was written, inside the delimited section
    prompts = [calls[0][0]["content"] for calls in solver.calls if calls[1] == 4]
    assert LESSON not in prompts[0]
    assert any("<lessons>\n1. " + LESSON in p for p in prompts[1:])
    # the reference answer never reaches the solver
    for msgs, _ in solver.calls:
        q = msgs[-1]["content"]
        a, b = map(int, re.findall(r"\d+", q))
        assert str(a + b) not in " ".join(m["content"] for m in msgs)
    lesson = store.active_lessons("adding")[0]
    # added in round 1 (the library changes between rounds: every episode of a round sees it as the
    # previous round left it), then shown in the 3 episodes of round 2 and tagged helpful each time
    assert lesson.times_in_context == 3
    assert all(LESSON not in p for p in prompts[:3]) and all(LESSON in p for p in prompts[3:])
    assert [e.op for e in store.lesson_events(lesson.lesson_id)].count("UPVOTE") >= 5


def test_malformed_teacher_reply_is_recorded_and_the_session_continues(setup):
    store, splits, cfg = setup
    cfg = cfg.model_copy(update={"rounds": 1})
    replies = iter(["not json at all", '{"add": [{"text": 5}]}'] * 10)
    teacher = FakePolicy(lambda m, i: next(replies), "teacher")
    summary = run_session(cfg, store, Roles(FakePolicy(solver_responder), teacher), splits, "s2", checkpointer=InMemorySaver())
    assert summary.episodes == 3
    assert summary.lessons_added == 0
    assert summary.reflections_failed == 3
    # each reflection was tried twice: the retry shows the validation error to the model
    assert len(teacher.calls) == 6
    retry_msgs = teacher.calls[1][0]
    assert retry_msgs[-2]["role"] == "assistant" and "could not be used" in retry_msgs[-1]["content"]


def test_lesson_leaking_the_reference_answer_is_rejected(setup):
    store, splits, cfg = setup
    cfg = cfg.model_copy(update={"rounds": 1})

    def leaky(messages, i):  # asked again once with the rejection shown, it leaks again
        group = next(m["content"] for m in messages if m["role"] == "user" and "Attempts:" in m["content"])
        a, b = map(int, re.findall(r"\d+", group.split("Attempts:")[0]))
        return json.dumps({"add": [{"text": f"Remember {a + b} when adding these two."}]})

    summary = run_session(cfg, store, Roles(FakePolicy(solver_responder), FakePolicy(leaky)), splits, "s3",
                          checkpointer=InMemorySaver())
    assert summary.lessons_added == 0
    assert store.list_lessons() == []
    assert summary.reflections_failed == 3  # each rejection is recorded on its episode


class Crash(Exception):
    pass


def test_resume_continues_mid_episode_without_duplicates(setup, tmp_path):
    store, splits, cfg = setup
    cfg = cfg.model_copy(update={"rounds": 1, "concurrency": 1})
    solver = FakePolicy(solver_responder, "solver")
    calls = {"n": 0}

    def flaky_teacher(messages, i):
        calls["n"] += 1
        if calls["n"] == 2:  # the second episode's reflection dies (process killed)
            raise Crash()
        return teacher_responder(messages, i)

    conn = sqlite3.connect(str(tmp_path / "ckpt.sqlite"), check_same_thread=False)
    with pytest.raises(Crash):
        run_session(cfg, store, Roles(solver, FakePolicy(flaky_teacher)), splits, "s4", checkpointer=SqliteSaver(conn))
    assert store.get_session("s4").status == "failed"
    # the whole round is sampled first (phase 1, no teacher call); then reflect + curate run in task order
    # (phase 2): episode 1 is written, episode 2's reflection died, episodes 2 and 3 wait at reflect
    assert len(store.finished_episode_keys(store.get_session("s4").id)) == 1
    groups_sampled = sum(1 for _, n in solver.calls if n == 4)
    assert groups_sampled == 3

    summary = run_session(cfg, store, Roles(solver, FakePolicy(flaky_teacher)), splits, "s4", resume=True,
                          checkpointer=SqliteSaver(conn))
    assert summary.episodes == 3 and summary.rollouts == 12
    # the interrupted episodes resumed at `reflect`: no group was sampled again
    assert sum(1 for _, n in solver.calls if n == 4) == 3
    assert store.get_session("s4").status == "finished"
    conn.close()


def test_graph_state_is_checkpointed_after_every_node(setup):
    store, splits, cfg = setup
    sid = store.create_session("s5", cfg.model_dump(mode="json"), 0)
    store.upsert_tasks(sid, splits.train)
    saver = InMemorySaver()
    graph = build_episode_graph(
        Roles(FakePolicy(solver_responder), FakePolicy(teacher_responder)),
        store, {t.task_key: t for t in splits.train}, EpisodeSettings(rollouts=4), saver,
    )
    task = splits.train[0]
    thread = {"configurable": {"thread_id": "t1"}}
    final = graph.invoke({"session_id": sid, "episode_key": "r001-x", "round": 1, "task_key": task.task_key, "seed": 3}, thread)
    assert [g["reward"] for g in final["grades"]] == [1.0, 1.0, 0.0, 0.0]
    assert final["grades"][2]["critique"].startswith("answer ")
    pending = [node for snap in graph.get_state_history(thread) for node in snap.next]
    assert {"retrieve_lessons", "solve", "grade", "reflect", "curate"} <= set(pending)
    # invoking the same episode again records nothing twice
    again = graph.invoke({"session_id": sid, "episode_key": "r001-x", "round": 1, "task_key": task.task_key, "seed": 3},
                         {"configurable": {"thread_id": "t2"}})
    assert again["episode_id"] is None
    assert store.session_stats(sid)["episodes"] == 1


def test_a_task_too_long_for_the_solver_context_is_refused_before_any_work(setup):
    from arena.config import ConfigError
    from arena.session.runner import check_prompt_lengths

    store, splits, cfg = setup
    solver = FakePolicy(solver_responder)
    solver.context_window = 60
    check_prompt_lengths(solver, splits.train, cfg.model_copy(update={"lesson_tokens": 0, "max_tokens": 10}))
    with pytest.raises(ConfigError, match=r"task adding/.* is too long for the solver: \d+ tokens .* context of 60"):
        check_prompt_lengths(solver, splits.train, cfg.model_copy(update={"lesson_tokens": 40, "max_tokens": 10}))


def test_resume_refuses_tasks_that_changed_and_ignores_stale_checkpoints(setup, tmp_path):
    from lessons.library.store import StoreError

    store, splits, cfg = setup
    cfg = cfg.model_copy(update={"rounds": 1})
    conn = sqlite3.connect(str(tmp_path / "ckpt.sqlite"), check_same_thread=False)
    calls = {"n": 0}

    def dies_once(messages, i):
        calls["n"] += 1
        if calls["n"] == 1:
            raise Crash()
        return teacher_responder(messages, i)

    with pytest.raises(Crash):
        run_session(cfg, store, Roles(FakePolicy(solver_responder), FakePolicy(dies_once)), splits, "s6",
                    checkpointer=SqliteSaver(conn))
    edited = load_tasks([], write_tasks(tmp_path / "adding.jsonl", n=13), n_train=3, n_heldout=4, seed=1)
    with pytest.raises(StoreError, match="tasks of session 's6' changed"):
        run_session(cfg, store, Roles(FakePolicy(solver_responder), FakePolicy(teacher_responder)), edited, "s6",
                    resume=True, checkpointer=SqliteSaver(conn))

    # a new library with a session of the same name must not pick up the old checkpoint
    other = LessonStore(str(tmp_path / "other.db"))
    solver = FakePolicy(solver_responder)
    summary = run_session(cfg, other, Roles(solver, FakePolicy(teacher_responder)), splits, "s6",
                          checkpointer=SqliteSaver(conn))
    assert summary.episodes == 3 and sum(1 for _, n in solver.calls if n == 4) == 3
    other.close()
    conn.close()


def test_where_the_reference_answer_goes_on_the_hint_path(setup):
    """All-fail groups get `feedback,answer` hints: the answer reaches the solver's guided prompt only (Guide, STaR
    rationalization) — never an unguided prompt, never the teacher's reflection (the hint is shown to it withheld)."""
    from lessons.text import contains_token

    store, splits, cfg = setup
    cfg = cfg.model_copy(update={"rounds": 1, "reflect_on": "all"})  # all-fail groups reach the teacher too

    def always_wrong(messages, i):
        a, b = map(int, re.findall(r"\d+", messages[-1]["content"].split("\n")[0]))
        return f"{a} + {b} = {a + b + 1}. <answer>{a + b + 1}</answer>"

    solver, teacher = FakePolicy(always_wrong, "solver"), FakePolicy(teacher_responder, "teacher")
    summary = run_session(cfg, store, Roles(solver, teacher), splits, "hinted", checkpointer=InMemorySaver())
    assert summary.hints.all_fail_groups == 3 and summary.hints.guided_groups == 3
    answers = {t.question: t.answer for t in splits.train}
    guided_calls = 0
    for msgs, _ in solver.calls:
        user = msgs[-1]["content"]
        question = user.split("\n")[0]
        if question not in answers:  # a held-out evaluation: no hint there
            assert "Hint" not in user
            continue
        if "Hint" in user:
            guided_calls += 1
            assert contains_token(user, answers[question])  # the answer hint, by design
        else:
            assert not contains_token(" ".join(m["content"] for m in msgs), answers[question])
    assert guided_calls == 3
    reflections = [m for m, _ in teacher.calls if "All attempts failed" in m[-1]["content"]]
    assert len(reflections) == 3
    for msgs in reflections:
        text = msgs[-1]["content"]
        question = next(q for q in answers if q in text)
        assert "[reference answer withheld]" in text and not contains_token(text, answers[question])


# --------------------------------------------------------------------------- the teacher's budget (issue 31)


def mixed_or_not(messages, i):
    """Tasks whose first term is even: a mixed group (2 right, 2 wrong); odd: all right."""
    a, b = map(int, re.findall(r"\d+", messages[-1]["content"]))
    return f"<answer>{a + b if (a % 2 or i < 2) else a + b + 1}</answer>"


@pytest.mark.parametrize("concurrency", [1, 3])
def test_the_round_budget_is_spent_in_task_order_whatever_the_concurrency(setup, concurrency):
    store, splits, cfg = setup
    teacher = FakePolicy(teacher_responder, "teacher")
    cfg = cfg.model_copy(update={"rounds": 1, "concurrency": concurrency, "reflections_per_round": 1})
    run_session(cfg, store, Roles(FakePolicy(solver_responder), teacher), splits, "b", checkpointer=InMemorySaver())
    assert len(teacher.calls) == 1  # every group is mixed (2 right, 2 wrong); the budget allows one
    assert splits.train[0].question in teacher.calls[0][0][-1]["content"]  # the first task in task order
    assert store.reflected_episodes(store.get_session("b").id, 1) == 1


def test_the_teacher_reflects_on_mixed_groups_only(setup):
    store, splits, cfg = setup
    teacher = FakePolicy(teacher_responder, "teacher")
    cfg = cfg.model_copy(update={"rounds": 1, "reflect_on": "mixed", "reflections_per_round": 0})
    summary = run_session(cfg, store, Roles(FakePolicy(mixed_or_not), teacher), splits, "m", checkpointer=InMemorySaver())
    mixed = [t for t in splits.train if int(re.findall(r"\d+", t.question)[0]) % 2 == 0]
    assert len(teacher.calls) == len(mixed)
    asked = [c[0][-1]["content"] for c in teacher.calls]
    assert all(any(t.question in a for a in asked) for t in mixed)
    assert summary.reflections_failed == 0  # a group not reflected on is not a failed reflection


def test_reflect_on_all_without_a_budget_reflects_on_every_group(setup):
    store, splits, cfg = setup
    teacher = FakePolicy(teacher_responder, "teacher")
    cfg = cfg.model_copy(update={"rounds": 1, "reflect_on": "all", "reflections_per_round": 0})
    run_session(cfg, store, Roles(FakePolicy(mixed_or_not), teacher), splits, "c", checkpointer=InMemorySaver())
    assert len(teacher.calls) == len(splits.train)


def test_auto_sleep_needs_a_local_solver_a_verifier_and_a_wake_large_enough(tmp_path):
    from arena.config import AUTO_SLEEP_MIN_EPISODES, DEFAULT_SLEEP_OBJECTIVE

    cfg = SessionConfig(db=str(tmp_path / "a.db"), rounds=1)
    assert cfg.with_auto_sleep(AUTO_SLEEP_MIN_EPISODES).sleep == DEFAULT_SLEEP_OBJECTIVE
    assert cfg.with_auto_sleep(AUTO_SLEEP_MIN_EPISODES - 1).sleep is None  # too few episodes to learn from
    assert cfg.model_copy(update={"solver": "openai:m"}).with_auto_sleep(64).sleep is None
    assert cfg.model_copy(update={"sleep_objective": "sft"}).with_auto_sleep(64).sleep == "sft"  # explicit wins
