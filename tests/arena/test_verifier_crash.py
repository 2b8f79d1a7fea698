"""A verifier that raises on an answer leaves that rollout (or held-out task) ungraded with the reason — not a 0.

Issue "Faults, bad input and speed", claim "a verifier that raises scores 0 with only a log line".
"""

from __future__ import annotations

import pytest
import reasoning_gym.arithmetic as rg_arithmetic
from langgraph.checkpoint.memory import InMemorySaver
from session_scripts import session_rollouts, teacher_responder

from agents.backends.fake import FakePolicy
from agents.policy import Completion
from arena.config import SessionConfig
from arena.episode.context import Roles
from arena.episode.rewards import VerifierReward
from arena.evaluation import evaluate_heldout
from arena.session.runner import run_session
from arena.tasks.gym import gym_score
from arena.tasks.model import VerifierError
from arena.tasks.sources import load_tasks
from lessons.library.store import LessonStore

FAMILY = "chain_sum:min_terms=2,max_terms=2,min_digits=1,max_digits=1"


@pytest.fixture
def crashing_verifier(monkeypatch):
    """chain_sum's verifier raises ZeroDivisionError on the answer "boom" and works on every other one."""
    real = rg_arithmetic.ChainSumDataset.score_answer

    def score_answer(self, answer, entry):
        if answer == "boom":
            raise ZeroDivisionError("division by zero")
        return real(self, answer, entry)

    monkeypatch.setattr(rg_arithmetic.ChainSumDataset, "score_answer", score_answer)


@pytest.fixture(scope="module")
def splits():
    return load_tasks([FAMILY], None, 2, 2, 0)


def test_gym_score_raises_a_verifier_error_naming_family_and_answer(crashing_verifier, splits):
    task = splits.train[0]
    assert gym_score(task, task.answer) == 1.0
    with pytest.raises(VerifierError, match=r"the chain_sum verifier raised ZeroDivisionError on answer 'boom'"):
        gym_score(task, "boom")


def test_the_crashed_rollout_is_ungraded_and_the_group_goes_on(crashing_verifier, splits):
    task = splits.train[0]
    outs = [Completion("<answer>boom</answer>", [], None, "stop"), Completion(f"<answer>{task.answer}</answer>", [], None, "stop"),
            Completion("<answer>0</answer>", [], None, "stop")]
    crashed, right, wrong = VerifierReward().grade(task, outs, session_id=1)
    assert crashed["reward"] is None and crashed["graded"] is False and crashed["fault"] == "verifier"
    assert crashed["critique"].startswith("ungraded: the chain_sum verifier raised ZeroDivisionError")
    assert crashed["extracted_answer"] == "boom"
    assert right["reward"] == 1.0 and wrong["reward"] == 0.0 and "fault" not in right


def test_a_crashed_heldout_task_is_ungraded_not_failed(crashing_verifier, splits, tmp_path):
    answers = iter(["boom", splits.heldout[1].answer])
    solver = FakePolicy(lambda messages, i: f"<answer>{next(answers)}</answer>", "solver")
    with LessonStore(str(tmp_path / "a.db")) as store:
        result = evaluate_heldout(store, solver, splits.heldout, False, 0, 16)
    assert result.rewards == [None, 1.0]
    assert result.rows[0]["fault"] == "verifier" and "ZeroDivisionError" in result.rows[0]["error"]
    assert result.graded_summary()["n"] == 1 and result.graded_summary()["pass_at_1"] == 1.0
    assert result.faults == {"verifier": 1}


def test_a_session_counts_verifier_crashes_as_faults(crashing_verifier, splits, tmp_path):
    train_questions = {t.question for t in splits.train}

    def solver(messages, i):  # rollout 0 of every train group and held-out task 0 crash the verifier
        q = messages[-1]["content"]
        crash = (q in train_questions and i == 0) or q == splits.heldout[0].question
        return "<answer>boom</answer>" if crash else "<answer>0</answer>"

    cfg = SessionConfig(db=str(tmp_path / "a.db"), families=[FAMILY], train_tasks=2, heldout_tasks=2, rounds=1,
                        rollouts=3, utility_every=0, hint_modes=[], max_tokens=16, concurrency=1)
    with LessonStore(cfg.db) as store:
        summary = run_session(cfg, store, Roles(FakePolicy(solver, "solver"), FakePolicy(teacher_responder, "teacher")),
                              splits, "s", checkpointer=InMemorySaver())
        assert store.get_session("s").status == "finished"
        rows = session_rollouts(store, "s")
        evals = store.evaluations(store.get_session("s").id)
    # each held-out evaluation lost its first task, which is ungraded, not failed
    assert evals and all(e.details["faults"] == {"verifier": 1} and e.n == 1 for e in evals.values())
    assert summary.faults == {"verifier": 2 + len(evals)}  # + rollout 0 of the 2 train groups
    crashed = [r for r in rows if r.fault == "verifier"]
    assert len(crashed) == 2 and all(r.reward is None and r.grading_status == "ungraded" for r in crashed)
    assert all(r.reward == 0.0 for r in rows if r.fault is None)
