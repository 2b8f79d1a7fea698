"""Hints and guided re-attempts for all-fail groups (Guide, Agent-RLVR, STaR), with fake policies."""

from __future__ import annotations

import json
import re

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from agents.backends.fake import FakePolicy
from agents.roles.hints import (
    NO_ANSWER_PART,
    PLAN_ATTEMPTS,
    FailedAttempt,
    PLAN_EXAMPLE_REPLY,
    PLAN_SYSTEM,
    HintModeError,
    HintRefused,
    answer_hint,
    foreign_numbers,
    feedback_hint,
    hint_parts,
    parse_hint_modes,
    plan_messages,
    plan_problem,
    plan_rejection_reasons,
    write_hint,
)
from arena.config import SessionConfig
from arena.episode.context import EpisodeSettings, Roles
from arena.episode.graph import build_episode_graph
from arena.session.runner import run_session
from arena.tasks.sources import load_tasks
from lessons.db.schema import RolloutRow
from lessons.library.read_models import ArenaData
from lessons.library.store import LessonStore


def write_tasks(path, n=8):
    rows = [{"question": f"Compute {10 + i} plus {20 + 2 * i}.", "answer": str(30 + 3 * i), "family": "adding"} for i in range(n)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def numbers(messages):
    return list(map(int, re.findall(r"\d+", messages[-1]["content"].split("\n")[0])))


def solver(solvable_unguided: set[int]):
    """Solves a task unguided only when its first number is in ``solvable_unguided``; with a hint, always."""

    def respond(messages, i):
        a, b = numbers(messages)
        guided = "Hint:" in messages[-1]["content"]
        right = guided or (a in solvable_unguided and i == 0)
        return f"<answer>{a + b if right else a + b + 7}</answer>"

    return respond


def teacher(messages, i):
    if messages[0]["content"].startswith("You are a teacher. A student failed"):  # plan request
        return "Add the tens, then the ones, and check the carry."
    return json.dumps({"analysis": "x", "add": [], "tags": []})


@pytest.fixture
def env(tmp_path):
    store = LessonStore(str(tmp_path / "a.db"))
    splits = load_tasks([], write_tasks(tmp_path / "adding.jsonl"), n_train=3, n_heldout=3, seed=0)
    cfg = SessionConfig(db=str(tmp_path / "a.db"), families=[], tasks_file=tmp_path / "adding.jsonl",
                        train_tasks=3, heldout_tasks=3, rounds=2, rollouts=4, hint_modes=["plan", "feedback"])
    yield store, splits, cfg
    store.close()


def rollouts(db_path):
    engine = create_engine(f"sqlite:///{db_path}")
    with Session(engine) as s:
        rows = s.scalars(select(RolloutRow).order_by(RolloutRow.id)).all()
        out = [(r.guided, r.hint_id, r.messages, r.unguided_messages, r.reward, r.episode_id) for r in rows]
    engine.dispose()
    return out


def test_all_fail_groups_go_guided_mixed_groups_do_not(env, tmp_path):
    store, splits, cfg = env
    first = numbers([{"content": splits.train[0].question}])[0]
    summary = run_session(cfg, store, Roles(FakePolicy(solver({first})), FakePolicy(teacher)), splits, "h",
                          checkpointer=InMemorySaver())
    # task 0 is solved unguided (1 of 4) in both rounds; tasks 1 and 2 fail and get guided
    assert summary.hints.all_fail_groups == 4 and summary.hints.guided_groups == 4
    assert summary.hints.guided_success_rate == 1.0
    assert summary.hints.pass_at_k_unguided == pytest.approx(2 / 6, abs=1e-4)
    assert summary.hints.pass_at_k_with_hints == 1.0
    assert summary.rollouts == 6 * 4 + 4 * 4
    rows = rollouts(tmp_path / "a.db")
    assert len(rows) == summary.rollouts
    guided = [r for r in rows if r[0]]
    assert len(guided) == 16
    for is_guided, hint_id, messages, unguided, reward, _ in guided:
        assert hint_id is not None and reward == 1.0
        assert "Hint:\n" in messages[-1]["content"]
        # the unguided context is the same chat without the hint, lessons and all
        assert unguided[:-1] == messages[:-1]
        assert messages[-1]["content"].startswith(unguided[-1]["content"] + "\n\nHint:\n")
    unguided = [r for r in rows if not r[0]]
    assert len(unguided) == 6 * 4  # 3 train tasks x 2 rounds, 4 rollouts each
    for _, hint_id, messages, unguided_messages, _, _ in unguided:
        assert hint_id is None and unguided_messages is None and "Hint:" not in messages[-1]["content"]


def test_hints_are_reused_in_later_rounds(env):
    store, splits, cfg = env
    run_session(cfg, store, Roles(FakePolicy(solver(set())), FakePolicy(teacher)), splits, "h",
                checkpointer=InMemorySaver())
    hints = store.hints()
    assert len(hints) == 3  # one per train task, written in round 1, reused in round 2
    for h in hints:
        assert h.times_used == 2 and h.successes == 2
        assert h.mode == "plan+feedback"
        assert "Add the tens" in h.text and "Feedback on earlier attempts" in h.text
        assert len(h.source_rollout_ids) == 4


def test_a_hint_that_keeps_failing_is_replaced(env):
    store, splits, cfg = env
    cfg = cfg.model_copy(update={"rounds": 3, "train_tasks": 1})
    never = FakePolicy(lambda m, i: "<answer>-1</answer>")
    run_session(cfg, store, Roles(never, FakePolicy(teacher)), load_tasks([], cfg.tasks_file, 1, 1, 0), "h",
                checkpointer=InMemorySaver())
    hints = store.hints()
    assert [(h.times_used, h.successes) for h in hints] == [(2, 0), (1, 0)]


def test_plan_that_states_the_answer_is_rejected_and_regenerated():
    replies = iter(["Just write 57.", "The sum is 57, so write that.", "Add tens first, then ones."])
    t = FakePolicy(lambda m, i: next(replies))
    failed = [FailedAttempt("<answer>50</answer>", "50", "answer '50' is incorrect")]
    hint = write_hint(t, ("plan",), "What is 43 + 14?", failed, "57")
    assert hint.text == "Add tens first, then ones." and hint.mode == "plan"
    assert hint.rejected == ["plan rejected (contains the reference answer): 'Just write 57.'",
                             "plan rejected (contains the reference answer): 'The sum is 57, so write that.'"]
    assert len(t.calls) == 3


def test_plan_that_claims_a_wrong_answer_is_rejected_too():
    # seen in session 12's guide-grpo run: "The correct answer is 8." for a task whose answer was not 8
    replies = iter(["The plan is correct, but the answer is incorrect. The correct answer is 8.",
                    "So the result is -37.", "Write <answer>12</answer>.",
                    "Add the tens of 43 and 14, then the ones; the answer is their total."])
    t = FakePolicy(lambda m, i: next(replies))
    failed = [FailedAttempt("<answer>50</answer>", "50", "answer '50' is incorrect")]
    with pytest.raises(HintRefused) as refused:  # three attempts, all claims
        write_hint(t, ("plan",), "What is 43 + 14?", failed, "57")
    assert plan_rejection_reasons("; ".join(refused.value.rejected)) == ["states a final answer"] * 3
    hint = write_hint(t, ("plan",), "What is 43 + 14?", failed, "57")
    assert hint.text.startswith("Add the tens") and hint.rejected == []
    for claim in ("The final answer to the arithmetic problem is 2.", "Answer = 12", "the answer: −5", "Result is 7",
                  "the answer is **8**", "answer is \\boxed{8}", "the answer must be (8)", "The correct answer equals 8",
                  "< answer >8", "the answer is -  5", "answer is .5"):
        with pytest.raises(HintRefused):
            write_hint(FakePolicy(lambda m, i, c=claim: c), ("plan",), "What is 43 + 14?", failed, "57")
    for plan in ("The answer is their sum.", "The result comes from adding 43 and 14 in two steps."):
        assert write_hint(FakePolicy(lambda m, i, p=plan: p), ("plan",), "What is 43 + 14?", failed, "57").text == plan
    first = write_hint(FakePolicy(lambda m, i: "The answer is 8."), ("plan", "feedback"), "What is 43 + 14?", failed, "57")
    # every plan attempt claims an answer and is rejected; the feedback part has nothing to reject
    assert first.mode == "feedback" and first.text == feedback_hint(failed, "57")[0]
    assert first.rejected == ["plan rejected (states a final answer): 'The answer is 8.'"] * PLAN_ATTEMPTS


def test_plan_that_always_leaks_is_dropped_and_other_parts_remain():
    t = FakePolicy(lambda m, i: "It is 57.")
    failed = [FailedAttempt("<answer>50</answer>", "50", "answer '50' is incorrect")]
    hint = write_hint(t, ("plan", "feedback"), "What is 43 + 14?", failed, "57")
    assert hint.mode == "feedback" and "57" not in hint.text
    with pytest.raises(HintRefused):
        write_hint(t, ("plan",), "What is 43 + 14?", failed, "57")


def test_feedback_drops_a_line_that_would_reveal_the_answer():
    failed = [
        FailedAttempt("x", "50", "answer '50' is incorrect"),
        FailedAttempt("y", "56", "answer '56' is incorrect; the critic says it should be 57"),
        FailedAttempt("z", None, "no answer found: end with <answer>…</answer>"),
    ]
    text, rejected = feedback_hint(failed, "57")
    assert "'50'" in text and "gave no answer" in text and "57" not in text
    assert rejected == ["feedback line rejected (contains the reference answer)"]  # the second attempt's line


def test_answer_mode_is_star_rationalization():
    hint = write_hint(FakePolicy(lambda m, i: ""), ("answer",), "What is 43 + 14?", [], "57")
    assert hint.mode == "answer" and "57" in hint.text and "<answer>57</answer>" in hint.text


REFERENCE = "Sunlight is scattered by air molecules, and blue light scatters far more than red light."


def test_a_task_without_a_verifiable_answer_gets_no_answer_part():
    """The free-text reference of a rubric-only task is the judge's only: no `answer` part, with the reason recorded."""
    failed = [FailedAttempt("It is the ocean.", "ocean", "missed: Blue scatters more", feedback="judged reward 0.00")]
    hint = write_hint(FakePolicy(lambda m, i: ""), ("feedback", "answer"), "Why is the sky blue?", failed, None,
                      judge_reference=REFERENCE)
    assert hint.mode == "feedback" and hint.rejected == [NO_ANSWER_PART]
    assert "scatter" not in hint.text.lower() and "Blue scatters more" not in hint.text
    with pytest.raises(HintRefused) as refused:
        write_hint(FakePolicy(lambda m, i: ""), ("answer",), "Why is the sky blue?", failed, None)
    assert refused.value.rejected == [NO_ANSWER_PART]


def test_feedback_shows_the_solver_feedback_of_a_rubric_grade_not_the_judges_critique():
    failed = [FailedAttempt("x", "ocean", "missed: Mentions scattering | pitfalls: Ocean reflection",
                            feedback="judged reward 0.00; verifier: answer 'ocean' is incorrect"),
              FailedAttempt("y", None, "missed: Mentions scattering", feedback="")]
    text, rejected = feedback_hint(failed, "blue")
    assert "judged reward 0.00; verifier: answer 'ocean' is incorrect" in text and "gave no answer." in text
    assert "missed" not in text and "Ocean reflection" not in text and rejected == []


def test_the_plan_teacher_reads_the_judge_reference_and_a_plan_repeating_it_or_a_title_is_rejected():
    failed = [FailedAttempt("It is the ocean.", "ocean", "missed: Blue scatters more")]
    replies = iter(["Say that blue light scatters far more than red light.",  # six words of the reference
                    "Explain why blue scatters more.",  # a criterion title the teacher read in the critique
                    "Name the process in the air that spreads light, and compare colours."])
    t = FakePolicy(lambda m, i: next(replies))
    hint = write_hint(t, ("plan",), "Why is the sky blue?", failed, None, judge_reference=REFERENCE,
                      judge_only=["Blue scatters more"])
    assert hint.text.startswith("Name the process") and len(hint.rejected) == 2
    assert all("repeats the judge's reference or rubric" in r for r in hint.rejected)
    prompt = t.calls[0][0][-1]["content"]
    assert REFERENCE in prompt and "Correct answer" not in prompt  # privileged, and no verifiable answer to state
    assert plan_problem("Blue light matters.", None, ["Blue"]) is None  # a one-word text is no copy


def test_hint_parts_keeps_exactly_the_parts_asked_for_of_every_hint_write_hint_makes():
    """hint_parts inverts write_hint's composition: the parts kept stay as written, the others never appear."""
    failed = [FailedAttempt("x", "50", "answer '50' is incorrect"), FailedAttempt("y", None, "no answer found")]
    plan = FakePolicy(lambda m, i: "Add the tens first, then the ones.")
    parts = {"plan": "Add the tens first, then the ones.", "feedback": feedback_hint(failed, "57")[0]}
    for modes in (("answer",), ("plan", "answer"), ("feedback", "answer"), ("plan", "feedback", "answer"),
                  ("plan",), ("feedback",), ("plan", "feedback")):
        hint = write_hint(plan, modes, "What is 43 + 14?", failed, "57")
        for keep in (("plan",), ("plan", "feedback"), ("feedback",)):
            want = "\n\n".join(parts[m] for m in modes if m in keep)
            assert hint_parts(hint.mode, hint.text, keep) == want, (modes, keep)
        assert "57" not in hint_parts(hint.mode, hint.text, ("plan", "feedback"))
        assert hint_parts(hint.mode, hint.text, ("plan", "feedback", "answer")) == hint.text
    # parts that cannot be told apart (a hint edited by hand, a critique with a blank line), or an unknown mode: nothing
    assert hint_parts("feedback+answer", "Feedback: 50 is wrong. The correct final answer is 57.", ("feedback",)) == ""
    assert hint_parts("feedback+answer", "- a\n\n- b\n\nThe correct final answer is 57.", ("feedback",)) == ""
    assert hint_parts(None, "Carry the ones.", ("plan",)) == ""


def test_parse_hint_modes():
    assert parse_hint_modes(["answer", "plan,feedback"]) == ("plan", "feedback", "answer")
    assert parse_hint_modes(["none"]) == () and parse_hint_modes([]) == ()
    assert parse_hint_modes(["plan,", " Feedback "]) == ("plan", "feedback")  # a stray comma, case and spaces
    for bad, fragment in (([""], "empty hint mode ''"), ([","], "empty hint mode ','"),
                          (["none,plan"], "none cannot be combined with plan"), (["none", "answer"], "none cannot")):
        with pytest.raises(HintModeError, match=fragment):
            parse_hint_modes(bad)
    with pytest.raises(HintModeError, match="unknown hint mode 'hints'"):
        parse_hint_modes(["hints"])


def test_heldout_tasks_are_never_guided(env):
    store, splits, cfg = env
    sid = store.create_session("h", cfg.model_dump(mode="json"), 0)
    store.upsert_tasks(sid, [*splits.train, *splits.heldout])
    graph = build_episode_graph(
        Roles(FakePolicy(solver(set())), FakePolicy(teacher)), store,
        {t.task_key: t for t in [*splits.train, *splits.heldout]},
        EpisodeSettings(rollouts=4, hint_modes=("answer",)), InMemorySaver(),
    )
    task = splits.heldout[0]
    final = graph.invoke({"session_id": sid, "episode_key": "e1", "round": 1, "task_key": task.task_key, "seed": 1},
                         {"configurable": {"thread_id": "x"}})
    assert [g["reward"] for g in final["grades"]] == [0.0] * 4  # an all-fail group...
    assert not final.get("hint") and not final.get("guided_completions")  # ...left unguided
    assert store.hints() == []
    # the control: the same graph guides a train task's all-fail group (with the answer hint it was given)
    train = splits.train[0]
    final = graph.invoke({"session_id": sid, "episode_key": "e2", "round": 1, "task_key": train.task_key, "seed": 1},
                         {"configurable": {"thread_id": "y"}})
    assert [g["reward"] for g in final["grades"]] == [0.0] * 4
    assert final["hint"]["text"] == answer_hint(train.answer) and len(final["guided_completions"]) == 4
    assert [h.task_key for h in store.hints()] == [train.task_key]


def test_a_whole_session_never_guides_or_reflects_on_heldout_tasks(env):
    store, splits, cfg = env
    t = FakePolicy(teacher)
    run_session(cfg, store, Roles(FakePolicy(solver(set())), t), splits, "h2", checkpointer=InMemorySaver())
    heldout_questions = {task.question for task in splits.heldout}
    assert len(heldout_questions) == 3
    # the solver never solves a task: every train group is all-fail and gets a hint, one per train task
    assert sorted(h.task_key for h in store.hints()) == sorted(task.task_key for task in splits.train)
    # the teacher's requests: one plan per hint (round 2 reuses them), and a reflection on every train episode (its
    # group, guided to success, is mixed) -- none on a held-out task
    plans = [msgs for msgs, _ in t.calls if msgs[0]["content"].startswith("You are a teacher. A student failed")]
    assert len(plans) == len(splits.train) and len(t.calls) - len(plans) == len(splits.train) * cfg.rounds
    for msgs, _ in t.calls:
        assert not any(q in m["content"] for m in msgs for q in heldout_questions)


def test_bad_hint_mode_flag_is_one_line(tmp_path):
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-m", "arena.cli", "run", "--db", str(tmp_path / "x.db"), "--hint-mode", "hints"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.count("\n") == 1
    assert "--hint-mode: unknown hint mode 'hints'" in p.stderr


def test_a_plan_with_the_answer_but_for_its_sign_is_rejected():
    # the 1.5B teacher's favourite leak on a negative answer: "subtract 15 from 43 to get 28, then make it negative"
    failed = [FailedAttempt("<answer>58</answer>", "58", "answer '58' is incorrect")]
    leak = FakePolicy(lambda m, i: "Subtract 15 from 43 to get 28, then make it negative.")
    with pytest.raises(HintRefused):
        write_hint(leak, ("plan",), "What is 15 - 43?", failed, "-28")
    assert len(leak.calls) == 3
    ok = FakePolicy(lambda m, i: "The second number is larger: subtract 15 from 43, then put a minus sign in front.")
    assert write_hint(ok, ("plan",), "What is 15 - 43?", failed, "-28").text.startswith("The second number")


def test_a_plan_that_states_any_number_the_task_does_not_hold_is_refused():
    # the 1.5B teacher's plans (issue 31): "Add 94 and 77 to get the total sum 171", "subtract 5 from the sum"
    task = "State the final answer to the following arithmetic problem: 94 - 77 ="
    assert plan_problem("Add 94 and 77 to get 171, then subtract.", "17", task=task) == \
        "states a number the task does not hold: 171"
    assert plan_problem("Add 58 and 26. Then, subtract 5 from the sum.", "84", task="58 + 26 =") == \
        "states a number the task does not hold: 5"
    # an intermediate result ending a sentence is a number, not a list marker
    assert plan_problem("Subtract 77 from 94. Then add 3. Write it down.", "17", task=task).startswith("states a number")
    # the task's own numbers, with or without their sign, are what a plan works with
    assert plan_problem("77 is larger than 94? No: work out 94 - 77 and keep the sign.", "17", task=task) is None
    assert plan_problem("Work out 43 - 15, then put a minus sign in front of -43's partner.", "-28",
                        task="15 - 43 =") is None
    assert foreign_numbers("Subtract 15 from 43.", "15 - 43 =") == []
    assert foreign_numbers("Use 2.5 and 10, or 43.", "What is 43 + 14?") == ["2.5", "10"]
    # the task's own numbers are not the answer's magnitude: "0 - 9" (answer -9) is planned with its 9 (session 23)
    assert plan_problem("Subtract 9 from 0. Write the result inside the answer tag.", "-9", task="0 - 9 =") is None
    assert plan_problem("Subtract 9 from 0. The result is -9.", "-9", task="0 - 9 =") == "contains the reference answer"
    assert plan_problem("Subtract 9 from 0.", "-9") == "contains the reference answer without its sign"  # no task given
    # without the task the rule is not applied (callers that have none)
    assert plan_problem("Add 94 and 77 to get 171.", "17") is None


def test_a_numbered_lists_markers_are_neither_the_answer_nor_a_result():
    task = "State the final answer to the following arithmetic problem: 4 - 1 ="
    plan = "1. Start with 4. 2. Subtract 1 from it. 3. Write only that number inside the answer tag."
    assert plan_problem(plan, "3", task=task) is None  # "3." is the third step, not the answer 3
    assert plan_problem("1. Start with 4. 2. Subtract 1; that gives 3. 3. Write it.", "3", task=task) == \
        "contains the reference answer"
    # a lone "1." is no list: kept as a number ("The result is 1." would be caught by the claim rule anyway)
    assert foreign_numbers("Work out 4 - 1 and add 7. Then stop.", task) == ["7"]
    assert foreign_numbers("1. Add 8. 2. Stop.", task) == ["8"]


def test_the_plan_teacher_sees_the_worked_plan_for_arithmetic_families_only():
    failed = [FailedAttempt("15 - 43 = 28", "28", "answer '28' is incorrect")]
    arithmetic = plan_messages("What is 15 - 43?", failed, "-28", family="chain_sum:min_terms=2")
    assert [m["role"] for m in arithmetic] == ["system", "user", "assistant", "user"]
    assert arithmetic[0]["content"] == PLAN_SYSTEM and arithmetic[2]["content"] == PLAN_EXAMPLE_REPLY
    assert "Correct answer (do NOT write it): -28" in arithmetic[-1]["content"]
    assert "-28" not in "".join(m["content"] for m in arithmetic[:3])  # the example is another task's
    other = plan_messages("Why is the sky blue?", failed, None, family="adding")
    assert [m["role"] for m in other] == ["system", "user"]
    # the worked plan passes the screen it teaches (its own task's numbers only, no result)
    assert plan_problem(PLAN_EXAMPLE_REPLY, "-18", task="State the final answer to the following arithmetic problem: 12 - 30 =") is None


def test_a_refused_hint_is_recorded_with_its_reasons_and_counted_in_the_summary(env):
    # every plan leaks: the group goes unguided, the episode's record names each refused plan, the summary counts them
    store, splits, cfg = env
    cfg = cfg.model_copy(update={"hint_modes": ["plan"], "rounds": 1})
    plans = iter(range(10_000))

    def leaky(messages, i):
        if messages[0]["content"] == PLAN_SYSTEM:
            a, b = numbers(messages[-1:])[:2]
            return f"Add {a} and {b} to get {a + b}." if next(plans) % 3 != 1 else f"Add {a} and {b}, then add 1000."
        return json.dumps({"analysis": "x", "add": [], "tags": []})

    summary = run_session(cfg, store, Roles(FakePolicy(solver(set())), FakePolicy(leaky)), splits, "h",
                          checkpointer=InMemorySaver())
    assert summary.hints.all_fail_groups == 3 and summary.hints.guided_groups == 0
    assert summary.hints.hints_refused == 3 and summary.hints.all_fail_rescued == 0.0
    assert summary.hints.plan_rejections == {"contains the reference answer": 6,
                                             "states a number the task does not hold": 3}
    assert summary.reflections_failed == 0  # a refused hint is not a failed reflection
    sid = store.get_session("h").id
    records = [g.hint_rejected for g in store.group_outcomes(sid)]
    assert [len(r) for r in records] == [PLAN_ATTEMPTS] * 3 and all(line.startswith("plan rejected (") for r in records for line in r)
    assert all(any("then add 1000" in line for line in r) for r in records)  # the refused plan itself is kept for the reader
    episode = ArenaData(store).episode(1)
    assert episode.hint_rejected == records[0] and episode.reflection_error is None
    # the end-of-session table says it too
    from rich.console import Console

    from arena.cli.run import print_summary

    console = Console(record=True, width=200)
    print_summary(summary, console)
    table = console.export_text()
    assert re.search(r"all-fail groups rescued\s*│?\s*0\.0", table)
    assert "3 groups (every part refused); plan attempts refused: contains the reference answer 6, " \
           "states a number the task does not hold 3" in table


def test_bench_plan_hints_replays_a_sessions_all_fail_groups_with_todays_plan_step(env):
    # bench/plan_hints.py: the session's all-fail groups, a plan written again for each, one guided group sampled
    import importlib.util
    from pathlib import Path

    store, splits, cfg = env
    cfg = cfg.model_copy(update={"hint_modes": ["feedback"], "rounds": 1})  # the session itself wrote no plan
    run_session(cfg, store, Roles(FakePolicy(solver(set())), FakePolicy(teacher)), splits, "h", checkpointer=InMemorySaver())
    spec = importlib.util.spec_from_file_location("plan_hints", Path(__file__).resolve().parents[2] / "bench" / "plan_hints.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    plans = iter(["Add them to get 1000.", "Add the two numbers, then write the sum."] * 10)
    planner = FakePolicy(lambda m, i: next(plans) if m[0]["content"] == PLAN_SYSTEM else "{}")
    rescuer = FakePolicy(solver(set()))  # a hint in context makes it right
    out = bench.replay(cfg.db, "h", None, teacher=planner, solver=rescuer)
    assert (out["groups"], out["written"], out["rescued"], out["all_fail_rescued"]) == (3, 3, 3, 1.0)
    assert out["plan_rejections"] == {"states a number the task does not hold": 3}
    assert all(r["guided_successes"] == cfg.rollouts and r["plan"].startswith("Add the two") for r in out["rows"])
    assert [len(r["refused"]) for r in out["rows"]] == [1, 1, 1]
    guided_chats = [m for m, _ in rescuer.calls]
    assert all("\n\nHint:\nAdd the two numbers" in c[-1]["content"] for c in guided_chats)
    assert bench.replay(cfg.db, "h", 1, teacher=planner, solver=rescuer)["groups"] == 1
    # bad input: one line, and no library is created where a path was mistyped
    missing = Path(cfg.db).with_name("typo.db")
    with pytest.raises(SystemExit, match=r"^plan_hints.py: no database at .*typo\.db$"):
        bench.replay(str(missing), None, None, teacher=planner, solver=rescuer)
    assert not missing.exists()
    with pytest.raises(SystemExit, match=r"^plan_hints.py: no session 'nope' in "):
        bench.replay(cfg.db, "nope", None, teacher=planner, solver=rescuer)


def test_an_answer_after_a_list_marker_or_in_words_is_still_refused():
    # a new user's trial (session 23): "3." ending a sentence is a number, not the third step; words are numbers too
    assert plan_problem("1. Start with 5. 2. Take away 2 to get 3. Write it in the answer tag.", "3",
                        task="5 - 2 =") == "contains the reference answer"
    assert plan_problem("1. Add 1 and 2. 2. The total comes to 3. Write that number.", "3",
                        task="1 + 2 =") == "contains the reference answer"
    assert plan_problem("The difference is negative three.", "-3", task="6 - 9 =") == "spells out the reference answer"
    assert plan_problem("It is twenty eight below zero.", "-28", task="15 - 43 =") == "spells out the reference answer"
    assert plan_problem("Add the three numbers one by one.", "3", task="What is one plus two?") == \
        "spells out the reference answer"
    assert plan_problem("Add the three numbers.", "3", task="Add three, four and five.") is None  # the task says it
    assert plan_problem("Add the two numbers.", "57", task="43 + 14 =") is None


def test_bench_plan_hints_refuses_a_session_whose_task_file_changed(env, tmp_path):
    import importlib.util
    from pathlib import Path

    store, splits, cfg = env
    run_session(cfg.model_copy(update={"rounds": 1}), store, Roles(FakePolicy(solver(set())), FakePolicy(teacher)),
                splits, "h", checkpointer=InMemorySaver())
    spec = importlib.util.spec_from_file_location("plan_hints", Path(__file__).resolve().parents[2] / "bench" / "plan_hints.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    write_tasks(cfg.tasks_file, n=8)
    cfg.tasks_file.write_text(cfg.tasks_file.read_text().replace("Compute", "Work out"))  # same keys, other questions
    with pytest.raises(SystemExit, match="the train tasks of session 'h' changed since it ran"):
        bench.replay(cfg.db, "h", None, teacher=FakePolicy(teacher), solver=FakePolicy(solver(set())))
    assert bench.main(["--db", cfg.db, "--session", "h"]) == 2  # one line, exit 2, before any model loads
    with pytest.raises(SystemExit) as usage:
        bench.main(["--db", cfg.db, "--session", " "])
    assert usage.value.code == 2


def test_the_rescue_rate_is_null_when_no_group_failed():
    from arena.session.summary import hint_summary
    from lessons.library.records import GroupOutcome

    assert hint_summary([], 1.0).all_fail_rescued is None
    solved = [GroupOutcome(1, "t/train/00000", [1.0, 0.0], [])]
    assert hint_summary(solved, 1.0).all_fail_rescued is None
    failed = [*solved, GroupOutcome(1, "t/train/00001", [0.0, 0.0], [0.0, 1.0]),
              GroupOutcome(1, "t/train/00002", [0.0, 0.0], [], ["plan rejected (empty)"])]
    got = hint_summary(failed, 1.0)
    assert (got.all_fail_groups, got.all_fail_rescued, got.hints_refused, got.plan_rejections) == \
        (2, 0.5, 1, {"empty": 1})


def test_a_plan_that_copies_the_worked_sign_step_onto_the_wrong_task_is_refused():
    # a new user's trial (session 23): the worked plan's "so the result is negative" copied to 84 - 12
    copied = "84 is larger than 12, so the result is negative. Work out 84 - 12, then put a minus sign in front of it."
    assert plan_problem(copied, "72", task="84 - 12 =") == "states the wrong sign of the result"
    assert plan_problem("8 is larger than 2, so the result is negative.", "6", task="8 - 2 =") == \
        "states the wrong sign of the result"
    assert plan_problem("43 is larger than 14, so the result is positive.", "-29", task="14 - 43 =") == \
        "states the wrong sign of the result"
    assert plan_problem("60 is larger than 23, so the result is negative. Work out 60 - 23.", "-37",
                        task="23 - 60 =") is None
    assert plan_problem("Both are positive numbers, so add them.", "57", task="43 + 14 =") is None  # not about the result
    assert plan_problem("The result is negative.", "-0.5", task="1 - 1.5 =") is None


def test_a_plan_of_brackets_json_or_symbols_is_refused_and_regenerated():
    """A new user's fake endpoint answered plan requests with nested JSON and ``[[[[…``, and both were shown to the
    solver as plan hints: model output is untrusted, and a plan has to be words."""
    nested = '{"analysis": ' * 40 + '"see the steps below"' + "}" * 40
    for text in (nested, "[" * 300 + "]" * 300, "+-*/ = ?", "Add them"):
        assert plan_problem(text, "57", task="What is 43 + 14?").startswith("is not a plan in words"), text
    for text in ("Add tens first, then ones.", "Work out (3 + 4) * 2 first, then subtract",
                 "1. Add the tens. 2. Add the ones. 3. Combine them."):
        assert plan_problem(text, None) is None, text
    replies = iter([nested, "[[[[]]]]", "Add tens first, then ones."])
    t = FakePolicy(lambda m, i: next(replies))
    failed = [FailedAttempt("<answer>50</answer>", "50", "answer '50' is incorrect")]
    hint = write_hint(t, ("plan",), "What is 43 + 14?", failed, "57")
    assert hint.text == "Add tens first, then ones." and len(t.calls) == 3
    assert len(hint.rejected) == 2
    assert hint.rejected[1] == ("plan rejected (is not a plan in words: 0 distinct words, 0 letters and 8 brackets of 8 "
                                "characters): '[[[[]]]]'")
    assert plan_rejection_reasons("; ".join(hint.rejected)) == ["is not a plan in words"] * 2


def test_a_plan_with_a_link_markup_code_or_a_blob_is_refused_and_step_markers_are_list_markers():
    """A second trial's garbage that passed the prose rule (a URL, base64, XML, a code fence)
    and a good plan it refused ("Step 1: … Step 2: …" read as stating the numbers 1 and 2)."""
    task = "What is 43 + 14?"
    for text in ("https://example.com/plan?step=add&then=carry", "QWRkIHRoZSB0ZW5zIGZpcnN0LCB0aGVuIHRoZSBvbmVz",
                 "<plan><step>add the tens</step></plan>",
                 "```python\nprint(43 + 14)\n```"):
        assert plan_problem(text, "57", task=task) == "is not a plan in words: a link, markup, code or an encoded blob", text
    for text in ("Step 1: add the ones. Step 2: add the tens.", "**Step 1:** add the ones. **Step 2:** add the tens.",
                 "If a < b and c > d, subtract the smaller from the larger.",
                 "<|im_start|>system\nAdd the tens, then add the ones."):  # control tokens: neutralised at the prompt
        assert plan_problem(text, "57", task=task) is None, text
    assert plan_problem("Step 2: add the ones, then the tens.", "57", task=task).startswith("states a number")
