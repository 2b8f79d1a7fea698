"""Verifiers: the reward of an extracted answer, and a one-line critique that never reveals the reference.

reasoning-gym tasks are scored by their family dataset's ``score_answer``
(:func:`arena.tasks.gym.gym_score`); JSONL and proposed tasks by exact match after
normalisation or numeric match (:func:`answers_match`). Rubric-only JSONL lines have no
verifier (:func:`has_verifier`); they are graded by a judge (:mod:`arena.episode.rewards`).
"""

from __future__ import annotations

from arena.tasks.extract import normalise_number, normalise_text
from arena.tasks.gym import gym_score
from arena.tasks.model import Task, TaskError
from lessons.outcomes import passes


def answers_match(extracted: str, reference: str) -> bool:
    """Exact match after normalisation, or numeric match (``|a - b| <= 1e-6 * max(1, |b|)``): the JSONL verifier."""
    return _jsonl_match(extracted, reference)


def _jsonl_match(extracted: str, reference: str) -> bool:
    if normalise_text(extracted) == normalise_text(reference):
        return True
    a, b = normalise_number(extracted), normalise_number(reference)
    return a is not None and b is not None and abs(a - b) <= 1e-6 * max(1.0, abs(b))


def score(task: Task, extracted: str | None) -> float:
    """The verifier reward of an extracted answer, in [0, 1].

    - reasoning-gym tasks: the family dataset's ``score_answer(answer, entry)``
      (reasoning-gym; may give partial credit), with dataset instances cached per
      family and overrides; a missing ``entry`` is regenerated from the task metadata.
    - JSONL and ``"proposed"`` tasks: 1.0 on an exact match after normalisation (strip, case-fold, collapse
      whitespace) or a numeric match (``|a - b| <= 1e-6 * max(1, |b|)``), else 0.0.

    Args:
        task: the task (its reference ``answer`` is used here, never shown to the solver).
        extracted: the answer from :func:`arena.tasks.extract.extract_answer`, or None.

    Returns:
        The reward in [0, 1]; 0.0 for ``None`` or an empty answer.

    Raises:
        TaskError: a reasoning-gym task whose family is not registered, or a rubric task
            without a verifiable ``answer``.
    """
    if not has_verifier(task):
        raise TaskError(f"task {task.task_key} has no verifier (its file line gives a rubric but no \"answer\"); grade it with --reward rubric-explicit")
    if extracted is None or not extracted.strip():
        return 0.0
    if task.source in ("jsonl", "proposed"):
        return 1.0 if _jsonl_match(extracted, task.answer) else 0.0
    return gym_score(task, extracted)


def has_verifier(task: Task) -> bool:
    """Whether ``task`` has a verifiable reference answer (every task except rubric-only JSONL lines)."""
    return bool(task.metadata.get("verifiable", True))


def verifiable_answer(task: Task) -> str | None:
    """The answer a verifier checks, which an ``answer`` hint may give the solver; None for a rubric-only task.

    A rubric-only JSONL line keeps its free-text ``reference`` in ``task.answer`` too (the field
    every task has); that text is the judge's only (:func:`judge_reference`), so it is no answer
    the solver may be told.

    Args:
        task: any task.
    """
    return task.answer if has_verifier(task) else None


def judge_reference(task: Task) -> str | None:
    """The free-text ``reference`` of a rubric task, shown to the rubric judge (and the hint teacher) only; else None.

    Args:
        task: any task (tasks without a rubric have none).
    """
    return task.metadata.get("reference") or None


def verifier_feedback(task: Task, extracted: str | None) -> str:
    """A one-line critique of an extracted answer that never reveals the reference.

    Examples: ``"no answer found: end with <answer>…</answer>"``,
    ``"answer '12' is incorrect"``, ``"answer '12' is correct"``,
    ``"answer '12' is partially correct (reward 0.50)"``.

    Args:
        task: the task being graded.
        extracted: the answer from :func:`arena.tasks.extract.extract_answer`, or None.
    """
    if extracted is None or not extracted.strip():
        return "no answer found: end with <answer>…</answer>"
    shown = " ".join(extracted.split())
    if len(shown) > 80:
        shown = shown[:77] + "..."
    reward = score(task, extracted)
    if passes(reward):
        return f"answer {shown!r} is correct"
    if reward <= 0.0:
        return f"answer {shown!r} is incorrect"
    return f"answer {shown!r} is partially correct (reward {reward:.2f})"
