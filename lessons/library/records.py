"""The library's records: what goes into :class:`lessons.library.store.LessonStore` and what comes out.

Records in (``*Record``) are what the session runner builds for a write; records out
(``*Info``, :class:`EpisodeResult`, :class:`GroupOutcome`) are plain frozen dataclasses
the repositories return instead of ORM rows, so callers (the runner, the TUI's worker
threads) hold no database state between calls. :class:`StoreError` is the one error a
user can cause and fix (bad path, name taken, newer schema).

No ORM and no SQLAlchemy here: any module may import this one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from lessons.ops import Reflection
from lessons.vocab import STOPPED

DEFAULT_LEASE_TTL_S = 60.0  # seconds a lease lasts without a heartbeat: a dead owner's session is resumable after this


class StoreError(Exception):
    """A problem the user can fix (bad path, name taken, newer schema); one line, for stderr."""


class LeaseHeld(StoreError):
    """Another live process owns the session (:meth:`lessons.library.leases.LeaseRepository.acquire_lease`).

    Attributes:
        lease: the live owner's :class:`LeaseInfo`.
    """

    def __init__(self, message: str, lease: LeaseInfo) -> None:
        super().__init__(message)
        self.lease = lease


class LeaseLost(StoreError):
    """This process's lease of a session expired and was taken over, or was released under it."""


# --------------------------------------------------------------------------- records in


class TaskLike(Protocol):
    """What :meth:`LessonStore.upsert_tasks` reads from a task (e.g. ``arena`` task objects)."""

    task_key: str
    family: str
    split: str
    question: str
    answer: str
    source: str
    metadata: dict[str, Any]


@dataclass(frozen=True)
class CriterionVerdict:
    """The judge's verdict on one stored criterion of a rubric (RaR, arXiv 2507.17746)."""

    criterion_id: int  # rubric_criteria.id
    met: bool
    reason: str = ""  # the judge's evidence


@dataclass
class RolloutGrading:
    """A rubric judge's grading of one rollout, stored in the same transaction as the rollout."""

    graded: bool  # False: the judge's reply stayed unusable (the rollout is ungraded)
    reward_kind: str  # "rubric-explicit" or "rubric-implicit"
    rubric_id: int | None = None  # rubrics.id of the version it was graded against
    judge_rating: float | None = None  # implicit aggregation: the judge's 1-10 rating
    verifier_reward: float | None = None  # tasks with a verifier too: the verifier's reward
    hack_flags: list[str] = field(default_factory=list)  # reward-hack flags; []: none (decided, not missing)
    verdicts: list[CriterionVerdict] = field(default_factory=list)  # explicit aggregation: one per stored criterion


@dataclass
class RolloutRecord:
    """One rollout to store with its episode (see :meth:`LessonStore.record_episode`)."""

    idx: int  # 0..k-1 within the group
    messages: list[dict[str, str]]  # the context, [{"role": ..., "content": ...}]
    completion: str
    extracted_answer: str | None
    reward: float | None  # in [0, 1]; None: grading failed (ungraded, excluded from rewards and pass@k)
    critique: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop", "length", ...
    latency_s: float  # seconds spent sampling this rollout
    guided: bool = False  # sampled with a hint in context
    token_ids: list[int] | None = None  # completion token ids (T,), where the backend exposes them
    logprobs: list[float] | None = None  # sampling log-probs (T,) under ``messages``, where exposed
    unguided_messages: list[dict[str, str]] | None = None  # guided only: the same chat without the hint
    fault: str | None = None  # endpoint fault kind: the rollout failed (no completion, reward None) or was cut ("oversized")
    grading: RolloutGrading | None = None  # a rubric reward's grading (None: the verifier graded it)


@dataclass
class HintRecord:
    """The hint an episode's guided rollouts used: a stored one (``hint_id``) or a new one."""

    mode: str  # "plan", "feedback", "answer" or several joined by "+"
    text: str
    hint_id: int | None = None  # set when reusing a stored hint; None writes a new hint row


@dataclass
class EpisodeRecord:
    """A finished episode: its group of rollouts and the teacher's reflection."""

    session_id: int
    episode_key: str  # unique within the session, e.g. "r001-chain_sum/train/00003"
    round: int
    task_key: str  # a key already stored with upsert_tasks
    system_prompt: str
    lessons_in_context: list[str]  # readable lesson ids shown to the solver, in prompt order
    rollouts: list[RolloutRecord]
    reflection: Reflection | None  # the validated ops, or None when reflection failed/skipped
    reflection_raw: str = ""  # the teacher's raw reply
    reflection_error: str | None = None  # why the reply could not be parsed, if it could not
    hint: HintRecord | None = None  # set when the group all failed and guided rollouts follow
    hint_rejected: list[str] = field(default_factory=list)  # hint parts / plan attempts refused, with why (a hint or none)
    started_at: datetime | None = None  # None: now
    finished_at: datetime | None = None  # None: now
    adapter_id: str | None = None  # readable id of the solver's LoRA adapter that sampled the rollouts; None: the base model


# --------------------------------------------------------------------------- records out


@dataclass(frozen=True)
class TaskInfo:
    """A stored task (reference answer included: for the critic and audits only)."""

    session: str
    task_key: str
    family: str
    split: str
    question: str
    answer: str
    source: str = ""  # "reasoning_gym", "jsonl", "proposed": how its verifier scores
    metadata: dict[str, Any] = field(default_factory=dict, compare=False)  # what the verifier needs (tasks.metadata)


@dataclass(frozen=True)
class LeaseInfo:
    """Who runs a session (:mod:`lessons.library.leases`), read at ``read_at`` (the database's clock)."""

    session_id: int
    owner: str  # the owner's random id, "<host>:<pid>:<hex>"
    host: str
    pid: int
    acquired_at: datetime  # UTC
    renewed_at: datetime  # UTC, the last heartbeat
    expires_at: datetime  # UTC
    read_at: datetime  # UTC: when this was read

    @property
    def live(self) -> bool:
        """Whether the lease had not expired when it was read (an expired one is a dead owner's)."""
        return self.expires_at > self.read_at

    def describe(self) -> str:
        """``host H pid P since T (lease expires at E)`` for one-line messages (UTC, to the second)."""
        return (f"host {self.host} pid {self.pid} since {self.acquired_at:%Y-%m-%d %H:%M:%S} UTC "
                f"(lease expires {self.expires_at:%Y-%m-%d %H:%M:%S} UTC unless renewed)")


@dataclass(frozen=True)
class SessionInfo:
    """A stored session."""

    id: int
    name: str
    config: dict[str, Any]
    seed: int
    status: str  # "running" | "finished" | "failed" | "interrupted"
    created_at: datetime  # UTC
    finished_at: datetime | None  # UTC
    summary: dict[str, Any] | None
    lease: LeaseInfo | None = None  # its owner's lease, live or expired; None: nobody holds one

    @property
    def shown_status(self) -> str:
        """The status to show: ``stopped`` for a ``running`` session without a live lease
        (its process crashed or was killed; ``--resume`` continues it), else :attr:`status`."""
        return shown_status(self.status, self.lease)



def shown_status(status: str, lease: LeaseInfo | None) -> str:
    """``stopped`` when ``status`` is ``running`` and ``lease`` is missing or expired, else ``status``.

    Args:
        status: the stored status (one of :data:`lessons.vocab.SESSION_STATUSES`).
        lease: the session's lease as read, or None.
    """
    if status == "running" and (lease is None or not lease.live):
        return STOPPED
    return status


@dataclass(frozen=True)
class LessonInfo:
    """A lesson of the library, with its counters and measured utility."""

    lesson_id: str  # readable and stable, e.g. "chain_sum-00012"
    text: str
    scope: str  # a task family, or "global"
    status: str  # "candidate" | "active" | "retired" | "distilled"
    helpful: int
    harmful: int
    neutral: int
    times_in_context: int  # episodes whose solver prompt contained it
    created_at: datetime  # UTC
    tokens: int | None = None  # size in the solver's tokens (None: not counted yet)
    utility: float | None = None  # latest A/B effect on pass@1 (with − without), None if never measured
    utility_ci: tuple[float, float] | None = None  # its 95% CI
    utility_n: int = 0  # paired samples behind it
    rank_score: float = 0.0  # retrieval prior: helpful − harmful + weight · utility
    updated_at: datetime | None = None  # UTC

    @property
    def family(self) -> str:
        """The scope under its CLI name: a task family or ``"global"``."""
        return self.scope

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly fields (``arena lessons list/show --json``)."""
        return {
            "id": self.lesson_id,
            "text": self.text,
            "status": self.status,
            "family": self.scope,
            "helpful": self.helpful,
            "harmful": self.harmful,
            "neutral": self.neutral,
            "times_in_context": self.times_in_context,
            "tokens": self.tokens,
            "utility": self.utility,
            "utility_ci95": list(self.utility_ci) if self.utility_ci else None,
            "utility_n": self.utility_n,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
        }


@dataclass(frozen=True)
class EventInfo:
    """One entry of a lesson's audit log."""

    id: int
    lesson_id: str  # readable lesson id
    op: str  # one of lessons.vocab.LESSON_OPS
    before: str | None
    after: str | None
    rationale: str
    episode_id: int | None
    rollout_ids: list[int]
    created_at: datetime  # UTC
    target: str | None = None  # MERGE on a source: the readable id of the lesson it went into
    origin: dict[str, Any] | None = None  # {"by": "cli"}, or where an imported event came from

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly fields (``arena lessons show --json``'s ``history``)."""
        return {
            "op": self.op,
            "before": self.before,
            "after": self.after,
            "at": self.created_at.isoformat(),
            "rationale": self.rationale,
            "episode_id": self.episode_id,
            "rollout_ids": list(self.rollout_ids),
            "target": self.target,
            "origin": self.origin,
        }


@dataclass(frozen=True)
class EvaluationInfo:
    """A stored pass@1 measurement."""

    name: str
    split: str
    with_lessons: bool
    n: int
    passes: int
    pass_at_1: float
    ci_lo: float
    ci_hi: float
    details: dict[str, Any]
    created_at: datetime  # UTC


@dataclass
class EpisodeResult:
    """What :meth:`LessonStore.record_episode` did to the library."""

    episode_id: int
    lessons_added: list[str] = field(default_factory=list)  # new lesson ids
    upvoted: list[str] = field(default_factory=list)  # helpful tags and duplicate ADDs
    downvoted: list[str] = field(default_factory=list)  # harmful tags
    neutral: list[str] = field(default_factory=list)  # neutral tags
    edited: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)  # lessons made by MERGE
    retired: list[str] = field(default_factory=list)  # by RETIRE, votes, eviction or MERGE
    promoted: list[str] = field(default_factory=list)  # candidate → active
    rejected_ops: list[str] = field(default_factory=list)  # one line per op not applied, with why
    hint_id: int | None = None  # the hint the guided rollouts used (new or reused)


@dataclass(frozen=True)
class HintInfo:
    """A stored hint and how it has fared."""

    id: int
    task_key: str
    mode: str
    text: str
    source_rollout_ids: list[int]
    times_used: int  # episodes whose guided group used it
    successes: int  # of those, episodes with at least one guided success
    created_at: datetime


@dataclass(frozen=True)
class GroupOutcome:
    """The rewards of one episode's group, unguided and (if any) guided, and the episode's recorded error."""

    round: int
    task_key: str
    unguided: list[float]
    guided: list[float]
    hint_rejected: list[str] = field(default_factory=list)  # refused hint parts of the episode (``episodes.hint_rejected``)
