"""docs/architecture.md "Who sees what", one test per row: the prompts each role is sent, recorded by fake policies.

One scripted rubric session (explicit judge, every group fails, so every train task gets a
``plan,feedback,answer`` hint and a guided re-attempt, and the teacher reflects on every group)
over sky-colour tasks: half of them rubric-only (a free-text ``reference``, no ``answer``), half
with a verifiable ``answer`` too. The solver, the teacher (plan hints and reflection) and the
judge are :class:`agents.backends.fake.FakePolicy` objects, which keep every chat they are sent;
the proposer's chat is built by :func:`agents.roles.proposer.proposer_messages` from the parent
task as the curriculum builds it. Each test reads those chats for one row of the table.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from rubric_scripts import RUBRIC  # two positive criteria and a pitfall
from sqlalchemy import select

from agents.backends.fake import FakePolicy
from agents.roles.hints import NO_ANSWER_PART, PLAN_SYSTEM
from agents.roles.proposer import ParentView, proposer_messages
from agents.roles.teacher import TEACHER_SYSTEM
from arena.config import SessionConfig
from arena.episode.context import Roles
from arena.session.runner import run_session
from arena.tasks.model import Task
from arena.tasks.sources import load_tasks
from arena.tasks.verify import has_verifier
from lessons.db.schema import EpisodeRow
from lessons.library.curation import Provenance
from lessons.library.store import LessonStore

REFERENCE = "Rayleigh scattering grows as the inverse fourth power of the wavelength, so short waves dominate the sky."
ANSWER = "cerulean"  # the verifiable answer of the tasks that have one
LESSON = "Name the physical process before you give the final answer."
PLAN = "Name the process in the air that spreads light, then compare how strongly each colour is spread."
SOLVER_REPLY = "The sky looks that way because of the sea. <answer>blue</answer>"


def solver(messages, i):
    return SOLVER_REPLY


def judge(messages, i):
    """Every positive criterion missed, every pitfall made: reward 0, so every group fails."""
    prompt = messages[-1]["content"].split("Student response:")[0]
    lines = re.findall(r"^\d+\. (.*)$", prompt, re.M)
    return json.dumps({"verdicts": [{"id": k, "met": "Pitfall Criteria" in line, "reason": "scripted"}
                                    for k, line in enumerate(lines, 1)]})


def teacher(messages, i):
    """A plan for plan requests; a reflection that adds nothing otherwise."""
    if messages[0]["content"] == PLAN_SYSTEM:
        return PLAN
    return json.dumps({"analysis": "Every attempt named no process.", "add": [], "tags": []})


@dataclass
class Seen:
    """The chats of one session, by role, and its tasks."""

    train: list[Task]
    unguided: list[str]  # every solver chat without a hint, all its messages joined (train and held-out)
    guided: dict[str, str]  # task question -> its guided solver chat
    unguided_train: dict[str, str]  # task question -> its unguided episode chat
    reflect: dict[str, str]  # task question -> the teacher's reflection prompt (the group's turn)
    plan: dict[str, str]  # task question -> the teacher's plan-hint prompt
    judge: list[str]  # every judge prompt (the rollout's turn)
    proposer: dict[str, str]  # task question -> the proposer's prompt with the task as parent
    episode_errors: dict[str, str]  # task question -> the episode's refused hint parts (``episodes.hint_rejected``)

    def solver_all(self) -> list[str]:
        return self.unguided + list(self.guided.values())


def _joined(messages) -> str:
    return "\n".join(m["content"] for m in messages)


def _by_question(chats: list[str], train: list[Task]) -> dict[str, str]:
    out = {}
    for t in train:
        found = [c for c in chats if t.question in c]
        assert len(found) == 1, (t.question, len(found))
        out[t.question] = found[0]
    return out


@pytest.fixture(scope="module")
def seen(tmp_path_factory) -> Seen:
    tmp = tmp_path_factory.mktemp("who-sees-what")
    path = tmp / "sky.jsonl"
    rows = [{"question": f"Question {i}: why is the sky blue?", "family": "sky", "rubric": RUBRIC,
             "reference": REFERENCE, **({"answer": ANSWER} if i % 2 else {})} for i in range(6)]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    splits = load_tasks([], path, n_train=4, n_heldout=2, seed=1)
    assert {has_verifier(t) for t in splits.train} == {True, False}  # both kinds of task are trained on
    store = LessonStore(str(tmp / "arena.db"))
    with store.curate() as c:
        c.add(LESSON, "sky", "", Provenance(origin={"by": "test"}), status="active")
    cfg = SessionConfig(db=str(tmp / "arena.db"), families=[], tasks_file=path, train_tasks=4, heldout_tasks=2,
                        rounds=1, rollouts=2, reward="rubric-explicit", critic="local",
                        hint_modes=["plan,feedback,answer"], reflect_on="all", utility_every=0)
    roles = Roles(FakePolicy(solver, "solver"), FakePolicy(teacher, "teacher"), FakePolicy(judge, "judge"))
    summary = run_session(cfg, store, roles, splits, "who", checkpointer=InMemorySaver())
    assert summary.hints.all_fail_groups == 4 and summary.hints.guided_groups == 4
    with store.read() as s:
        errors = {row.task.question: "; ".join(row.hint_rejected or []) for row in s.scalars(select(EpisodeRow))}
    store.close()
    solver_chats = [_joined(m) for m, _ in roles.solver.calls]
    teacher_calls = roles.teacher.calls
    train = list(splits.train)
    unguided = [c for c in solver_chats if "\nHint:\n" not in c]
    seen = Seen(
        train=train,
        unguided=unguided,
        guided=_by_question([c for c in solver_chats if "\nHint:\n" in c], train),
        unguided_train=_by_question(unguided, train),  # the episode's chat; evaluations sample held-out tasks only
        reflect=_by_question([m[-1]["content"] for m, _ in teacher_calls if m[0]["content"] == TEACHER_SYSTEM], train),
        plan=_by_question([m[-1]["content"] for m, _ in teacher_calls if m[0]["content"] == PLAN_SYSTEM], train),
        judge=[m[-1]["content"] for m, _ in roles.critic.calls],
        # the parent as arena.session.curriculum builds it: family, question, answer, pass rate, group size
        proposer={t.question: _joined(proposer_messages(ParentView(t.family, t.question, t.answer, 0.0, 2)))
                  for t in train},
        episode_errors=errors,
    )
    assert seen.judge and len(seen.judge) > 8  # unguided, guided and held-out rollouts were judged
    return seen


def _verifiable(seen: Seen) -> list[Task]:
    return [t for t in seen.train if has_verifier(t)]


def _rubric_only(seen: Seen) -> list[Task]:
    return [t for t in seen.train if not has_verifier(t)]


def test_the_verifiable_answer_reaches_a_solver_only_in_an_answer_hint(seen: Seen) -> None:
    """Row "the reference answer (verifiable `answer`)": solver no; guided re-attempt only in an `answer` part;
    teacher (reflect) withheld; teacher (hint) yes; proposer yes; judge no."""
    assert not any(ANSWER in c for c in seen.unguided)
    for t in _verifiable(seen):
        assert f"The correct final answer is {ANSWER}." in seen.guided[t.question]
        reflect = seen.reflect[t.question]
        assert ANSWER not in reflect and "[reference answer withheld]" in reflect
        assert f"Correct answer (do NOT write it): {ANSWER}" in seen.plan[t.question]
        assert f"Reference answer: {ANSWER}" in seen.proposer[t.question]
    for t in _rubric_only(seen):
        assert "The correct final answer" not in seen.guided[t.question]
    assert not any(ANSWER in p for p in seen.judge)


def test_the_rubric_reaches_the_judge_whole_and_the_teacher_as_failed_titles_never_a_solver(seen: Seen) -> None:
    """Row "the rubric criteria": solver and guided re-attempt no; teacher (reflect) and teacher (hint) the titles
    of the failed criteria; proposer no; judge every criterion."""
    titles = [c["title"].lower() for c in RUBRIC]
    descriptions = [c["description"].lower() for c in RUBRIC]
    for chat in seen.solver_all():
        low = chat.lower()
        assert not any(x in low for x in titles + descriptions), chat
    for prompt in seen.judge:
        assert all(c["description"] in prompt for c in RUBRIC)
    for t in seen.train:
        for teacher_prompt in (seen.reflect[t.question], seen.plan[t.question]):
            assert all(c["title"] in teacher_prompt for c in RUBRIC)  # failed: two missed, one pitfall made
            assert not any(c["description"] in teacher_prompt for c in RUBRIC)
        failed = "failed criteria: Mentions scattering; Blue scatters more; pitfall: Ocean reflection"
        assert failed in seen.reflect[t.question]
        assert not any(c["title"] in seen.proposer[t.question] for c in RUBRIC)


def test_the_judge_only_reference_never_reaches_a_solver(seen: Seen) -> None:
    """Row "the judge-only free-text `reference`": solver and guided re-attempt no (a rubric-only task gets no
    `answer` part: the reason is recorded); teacher (reflect) no; teacher (hint) yes; proposer only as a rubric-only
    parent's answer; judge yes."""
    for chat in seen.solver_all():
        assert REFERENCE not in chat and "Rayleigh" not in chat
    assert all(REFERENCE in p for p in seen.judge)
    for t in seen.train:
        assert REFERENCE in seen.plan[t.question]
        assert "Rayleigh" not in seen.reflect[t.question]
    for t in _rubric_only(seen):
        assert NO_ANSWER_PART in seen.episode_errors[t.question]
        assert REFERENCE in seen.proposer[t.question]
    for t in _verifiable(seen):
        assert NO_ANSWER_PART not in seen.episode_errors[t.question]
        assert "Rayleigh" not in seen.proposer[t.question]


def test_critiques_reach_the_teacher_whole_and_a_guided_solver_only_as_reward_and_verifier_note(seen: Seen) -> None:
    """Row "critiques": solver no; guided re-attempt the `feedback` part (a rubric grade: its reward and the verifier's
    note, never the judge's critique); teacher (reflect) and teacher (hint) every critique; proposer no; judge no."""
    judge_critique = "missed: Mentions scattering; Blue scatters more | pitfalls: Ocean reflection"
    for chat in seen.unguided:
        assert "judged reward" not in chat and "missed:" not in chat
    for t in seen.train:
        guided = seen.guided[t.question]
        assert "An earlier attempt answered 'blue': judged reward 0.00" in guided and "missed:" not in guided
        assert (("verifier: answer 'blue' is incorrect" in guided) == has_verifier(t))
        assert f"critique: {judge_critique}" in seen.reflect[t.question]
        assert judge_critique in seen.plan[t.question]
        assert "missed:" not in seen.proposer[t.question]
    for prompt in seen.judge:
        assert "missed:" not in prompt and "judged reward" not in prompt


def test_hints_reach_the_guided_solver_and_the_reflecting_teacher_only(seen: Seen) -> None:
    """Row "hints": solver no; guided re-attempt yes; teacher (reflect) yes, its answer withheld; teacher (hint)
    writes it; proposer no; judge no."""
    for chat in seen.unguided:
        assert PLAN not in chat and "Hint:" not in chat
    for t in seen.train:
        assert PLAN in seen.guided[t.question]
        assert "the student tried again with this hint" in seen.reflect[t.question] and PLAN in seen.reflect[t.question]
        assert PLAN not in seen.proposer[t.question]
    for prompt in seen.judge:
        assert PLAN not in prompt and "Hint:" not in prompt


def test_lessons_reach_the_solver_guided_or_not_and_the_reflecting_teacher_only(seen: Seen) -> None:
    """Row "lessons": solver and guided re-attempt yes (the system prompt); teacher (reflect) yes, the ones shown;
    teacher (hint) no; proposer no; judge no."""
    for t in seen.train:
        assert LESSON in seen.unguided_train[t.question]
        assert LESSON in seen.guided[t.question]
        assert "Lessons shown to the student:" in seen.reflect[t.question] and LESSON in seen.reflect[t.question]
        assert LESSON not in seen.plan[t.question]
        assert LESSON not in seen.proposer[t.question]
    for prompt in seen.judge:
        assert LESSON not in prompt
