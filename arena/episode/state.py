"""The state of one episode and the typed entries it holds.

Every value is JSON-friendly (``TypedDict``\\s are plain dicts at run time), so the ``SqliteSaver``
checkpointer persists the state after every node exactly as before this module existed, and an
interrupted session resumes from checkpoints written by any version of the graph. Policies,
the store and settings never enter the state: they arrive in the run's
:class:`arena.episode.context.EpisodeContext`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from agents.policy import Completion


class CompletionEntry(TypedDict):
    """One sampled rollout as the state keeps it: :class:`agents.policy.Completion`'s fields plus its latency."""

    text: str
    token_ids: list[int]  # completion token ids (length T), [] where the backend hides them
    logprobs: list[float] | None  # per-token sampling log-probs (length T, natural log), None where hidden
    finish_reason: str  # "stop" or "length"
    prompt_tokens: int  # 0 where unknown
    latency_s: float  # wall-clock seconds of the group's sampling call divided by the group size
    fault: NotRequired[str | None]  # an endpoint fault (agents.policy.FAULT_KINDS): "oversized" (cut, kept) or one that failed it
    fault_reason: NotRequired[str | None]  # failed rollouts: the endpoint's one-line error


class VerdictEntry(TypedDict):
    """The judge's verdict on one rubric criterion (explicit rubric rewards)."""

    criterion_id: int | None  # rubric_criteria.id; None for an unstored rubric
    met: bool
    reason: str


class GradeEntry(TypedDict):
    """The grade of one rollout, from a :class:`arena.episode.rewards.RewardStrategy`.

    The verifier writes the first three keys; rubric rewards write them all.
    """

    reward: float | None  # in [0, 1]; None: ungraded (the judge's reply stayed unusable)
    extracted_answer: str | None
    critique: str  # one line
    graded: NotRequired[bool]  # False: the judge failed; absent: graded (the verifier)
    reward_kind: NotRequired[str]  # one of arena.episode.rewards.REWARD_KINDS
    rubric_id: NotRequired[int | None]  # rubrics.id of the version graded against
    verdicts: NotRequired[list[VerdictEntry] | None]  # explicit rubrics, in rubric order
    failed_criteria: NotRequired[list[str] | None]  # titles of the criteria not met (shown to the teacher)
    feedback: NotRequired[str]  # rubric grades: what a feedback hint may show the solver (no criterion, no reference)
    judge_rating: NotRequired[float | None]  # implicit rubrics: the judge's 1–10 rating
    verifier_reward: NotRequired[float | None]  # the task's verifier, where it has one (calibration)
    hack_flags: NotRequired[list[str]]  # arena.episode.rewards.HACK_FLAGS that fired
    judge_error: NotRequired[str | None]  # why the judge's reply was unusable
    fault: NotRequired[str | None]  # the endpoint fault that left the rollout without a completion (ungraded)


class HintEntry(TypedDict):
    """The hint of an all-fail group: reused from the store (``hint_id``) or freshly written (None)."""

    mode: str  # hint parts joined by "+", e.g. "feedback+answer"
    text: str
    hint_id: int | None
    rejected: list[str]  # why parts of the hint were refused while writing it


class EpisodeState(TypedDict, total=False):
    """The state of one episode; every key has a single writer, so none needs a reducer."""

    # input
    session_id: int
    episode_key: str
    round: int
    task_key: str
    seed: int
    started_at: str  # ISO-8601 UTC
    # retrieve_lessons
    lessons_shown: list[list[str]]  # [[lesson_id, text], ...] in prompt order
    messages: list[dict[str, str]]  # the solver's chat: [{"role", "content"}, ...]
    # solve
    completions: list[CompletionEntry]
    # grade
    grades: list[GradeEntry]  # one per completion, in order
    # hint → solve_guided → grade_guided (all-fail train groups only)
    hint: HintEntry | None
    guided_messages: list[dict[str, str]]
    guided_completions: list[CompletionEntry]
    guided_grades: list[GradeEntry]
    hint_error: str | None  # why no hint was written when the teacher's endpoint failed
    hint_rejected: list[str]  # every part refused when no hint could be written (:class:`agents.roles.hints.HintRefused`)
    # reflect
    reflection: dict[str, Any] | None  # a validated lessons.ops.Reflection, as its model_dump()
    reflection_raw: list[str]
    reflection_error: str | None
    rejected_ops: list[str]
    # curate
    episode_id: int | None
    lessons_added: list[str]


def completion_entry(c: Completion, latency_s: float) -> CompletionEntry:
    """The state entry of a sampled completion.

    Args:
        c: the completion.
        latency_s: its share of the sampling call, seconds.

    Returns:
        A JSON-friendly copy of ``c`` with ``latency_s``.
    """
    return {
        "text": c.text,
        "token_ids": list(c.token_ids),
        "logprobs": list(c.logprobs) if c.logprobs is not None else None,
        "finish_reason": c.finish_reason,
        "prompt_tokens": c.prompt_tokens,
        "latency_s": latency_s,
        "fault": c.fault,
    }


def failed_entry(kind: str, reason: str, latency_s: float) -> CompletionEntry:
    """The state entry of a rollout the endpoint never delivered (:class:`agents.policy.EndpointFault`).

    Its text is empty and its finish reason ``"fault"``; grading leaves it ungraded (reward None).
    """
    return {"text": "", "token_ids": [], "logprobs": None, "finish_reason": "fault", "prompt_tokens": 0,
            "latency_s": latency_s, "fault": kind, "fault_reason": reason}


def is_failed(e: CompletionEntry) -> bool:
    """Whether the rollout has no completion because of an endpoint fault."""
    return e.get("finish_reason") == "fault"


def to_completion(e: CompletionEntry) -> Completion:
    """The :class:`agents.policy.Completion` a state entry was made from (latency dropped)."""
    return Completion(
        text=e["text"], token_ids=e["token_ids"], logprobs=e["logprobs"],
        finish_reason=e["finish_reason"], prompt_tokens=e["prompt_tokens"], fault=e.get("fault"),
    )


@dataclass(frozen=True)
class GradeStatus:
    """The grading outcome of one rollout in the attributes :func:`lessons.library.rubrics.eligible_for_training` reads."""

    reward: float | None
    grading_status: str  # "graded" or "ungraded"
    hack_flags: tuple[str, ...]

    @classmethod
    def of(cls, g: GradeEntry) -> GradeStatus:
        """The status of a grade entry (a grade without ``graded`` — the verifier's — counts as graded)."""
        return cls(
            reward=g["reward"],
            grading_status="graded" if g.get("graded", True) else "ungraded",
            hack_flags=tuple(g.get("hack_flags") or ()),
        )
