"""The project's verifier as the reward function of RL engines: TRL's ``reward_funcs`` and verl's ``compute_score``.

Rows exported by ``arena export rollouts`` carry each task as JSON (``task`` in the Hugging
Face layout, ``extra_info["task"]`` in verl's); both functions rebuild the
:class:`arena.tasks.model.Task` from it, extract the answer from the completion with
:func:`arena.tasks.extract.extract_answer` and score it with :func:`arena.tasks.verify.score` —
the same reward ``arena run`` gives, reasoning-gym's ``score_answer`` included. A completion is
untrusted model output: an answer the verifier crashes on (:class:`VerifierError`) earns 0.0,
as it earns no credit in a session either, instead of ending the engine's run.

TRL: ``GRPOTrainer(reward_funcs=[arena.rewards.trl_reward], ...)`` calls
``trl_reward(prompts, completions, **columns)`` with the data set's other columns as lists.
verl: ``custom_reward_function.path=<this file> custom_reward_function.name=compute_score``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from arena.tasks.extract import extract_answer
from arena.tasks.model import Task, VerifierError
from arena.tasks.verify import score
from lessons.vocab import SPLITS, TASK_SOURCES

TASK_FIELDS = ("task_key", "family", "split", "question", "answer", "source", "metadata")


def task_from_json(task: str | Mapping[str, Any]) -> Task:
    """The task an exported row names.

    Args:
        task: the row's ``task`` column: a JSON object (or its text) with :data:`TASK_FIELDS`.

    Returns:
        The :class:`Task` (its reasoning-gym entry is regenerated from ``metadata`` when scored).

    Raises:
        ValueError: not a JSON object, a field missing, or an unknown ``source`` / ``split``.
    """
    try:
        d = json.loads(task) if isinstance(task, str) else dict(task)
    except (TypeError, ValueError) as e:
        raise ValueError(f"task column is not a JSON object: {e}") from None
    if not isinstance(d, dict):
        raise ValueError(f"task column is not a JSON object: {type(d).__name__}")
    missing = [f for f in TASK_FIELDS if f not in d]
    if missing:
        raise ValueError(f"task column lacks {', '.join(missing)}")
    if d["source"] not in TASK_SOURCES or d["split"] not in SPLITS:
        raise ValueError(f"task {d['task_key']!r}: unknown source {d['source']!r} or split {d['split']!r}")
    if not isinstance(d["metadata"], dict):
        raise ValueError(f"task {d['task_key']!r}: metadata is not an object")
    return Task(d["task_key"], d["family"], d["split"], str(d["question"]), str(d["answer"]), d["source"], d["metadata"])


def _text(completion: Any) -> str:
    """A completion as text: TRL passes a string (standard data sets) or a list of chat messages (conversational)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence):
        return "".join(str(m.get("content", "")) for m in completion if isinstance(m, Mapping) and m.get("role") == "assistant")
    return ""


def verify(task: Task, completion: str) -> float:
    """The verifier reward of a completion in [0, 1] (0.0 when the verifier crashes on its answer)."""
    try:
        return float(score(task, extract_answer(completion)))
    except VerifierError:
        return 0.0


def trl_reward(prompts: Sequence[Any], completions: Sequence[Any], **columns: Any) -> list[float]:
    """TRL reward function (``GRPOTrainer(reward_funcs=[trl_reward])``): one verifier reward per completion.

    Args:
        prompts: the batch's prompts (unused: the task column names the task).
        completions: one completion per row, a string or a list of chat messages.
        columns: the data set's other columns as lists; ``task`` (JSON per row) is required.

    Returns:
        Rewards in [0, 1], one per completion.

    Raises:
        ValueError: no ``task`` column, its length differs from ``completions``, or a row's task is malformed.
    """
    tasks = columns.get("task")
    if tasks is None:
        raise ValueError("trl_reward needs the `task` column of `arena export rollouts --format hf`")
    if len(tasks) != len(completions):
        raise ValueError(f"{len(completions)} completions but {len(tasks)} tasks")
    return [verify(task_from_json(t), _text(c)) for t, c in zip(tasks, completions, strict=True)]


def compute_score(data_source: str, solution_str: str, ground_truth: str, extra_info: Mapping[str, Any] | None = None) -> float:
    """verl's custom reward function (``custom_reward_function.name=compute_score``).

    Args:
        data_source: the row's ``data_source`` (``lesson_arena/<family>``; informational).
        solution_str: the decoded response.
        ground_truth: ``reward_model.ground_truth``, the reference answer.
        extra_info: the row's ``extra_info``; its ``task`` JSON gives the verifier what it needs
            (reasoning-gym metadata). Without it the response is compared with ``ground_truth``
            as a JSONL task is (exact after normalisation, or numerically).

    Returns:
        The reward in [0, 1].
    """
    task_json = (extra_info or {}).get("task")
    if task_json:
        task = task_from_json(task_json)
    else:
        task = Task("verl/train/00000", data_source, "train", "", str(ground_truth), "jsonl", {})
    return verify(task, solution_str or "")
