"""The lesson library's schema: SQLAlchemy 2.0 typed ORM models.

One :class:`Base` with a constraint naming convention (so Alembic migrations, including
SQLite batch-mode table rebuilds, can address every constraint by name), ``Mapped[...]``
annotations and ``Annotated`` aliases for the repeated column kinds, after
pypi/warehouse ``warehouse/db.py``. The schema is created and migrated only by the
Alembic revisions in :mod:`lessons.db.migrations` (:func:`alembic_config`); a test checks
that the revisions and these models do not drift apart.

Only modules of :mod:`lessons` touch these classes (the repositories of :mod:`lessons.library`);
the rest of the app goes through :class:`lessons.library.store.LessonStore` and the sibling
stores, which return plain records.

Conventions:

- Timestamps are timezone-aware UTC ``datetime`` in Python (:class:`UTCDateTime`); on
  SQLite they are stored as naive UTC text.
- JSON columns are replaced, never mutated in place (SQLAlchemy does not track nested
  changes; sqlalchemy #5218).
- Enumerated string columns (``status``, ``split``, ``op``) are plain strings validated by
  the repositories against the tuples of :mod:`lessons.vocab`, not by database CHECK constraints, so a
  new value does not need a table rebuild on SQLite.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

# The enumerations live in lessons.vocab (no ORM there, so the CLI and the TUI can import them);
# re-exported here for the modules of lessons that read them with the rows.
from lessons.vocab import (  # noqa: F401 - re-exported
    ADAPTER_LESSON_RELATIONS,
    ADAPTER_OBJECTIVE_MAX_LEN,
    GRADING_STATUSES,
    HINT_MODES,
    LESSON_OPS,
    LESSON_STATUSES,
    LIVE_STATUSES,
    PROPOSAL_STATUSES,
    RETRIEVABLE_STATUSES,
    RUBRIC_SOURCES,
    SESSION_STATUSES,
    SPLITS,
    TASK_ORIGINS,
    TASK_SOURCES,
)

# Where the Alembic environment and revisions live (a package, shipped with the wheel).
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def utcnow() -> datetime:
    """The current time, timezone-aware UTC (the default of every timestamp column)."""
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp that is always timezone-aware UTC in Python.

    Binds: a naive ``datetime`` is taken to be UTC; an aware one is converted to UTC.
    Results: naive values (SQLite keeps no zone) are marked UTC; aware ones (PostgreSQL
    ``timestamptz``) are converted to UTC.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


# --------------------------------------------------------------------------- base

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_N_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Declarative base of every lesson-library table."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {
        datetime: UTCDateTime(),
        dict[str, Any]: JSON(),
        list[Any]: JSON(),
    }


# Annotated aliases for the repeated column kinds.
intpk = Annotated[int, mapped_column(Integer, primary_key=True)]
created_ts = Annotated[datetime, mapped_column(UTCDateTime(), default=utcnow)]
JSONDict = Annotated[dict[str, Any], mapped_column(JSON())]
JSONList = Annotated[list[Any], mapped_column(JSON())]
LongText = Annotated[str, mapped_column(Text())]
Counter = Annotated[int, mapped_column(Integer, default=0, server_default="0")]


def _fk(target: str, *, nullable: bool = False, ondelete: str = "CASCADE") -> Any:
    """A foreign-key column to ``target`` (``"table.column"``)."""
    return mapped_column(ForeignKey(target, ondelete=ondelete), nullable=nullable)


# --------------------------------------------------------------------------- tables


class SessionRow(Base):
    """A run of many episodes over rounds, with its config, seed and evaluations."""

    __tablename__ = "sessions"

    id: Mapped[intpk]
    name: Mapped[str] = mapped_column(String(200), unique=True)
    config: Mapped[JSONDict]  # the SessionConfig as a dict
    seed: Mapped[int] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(20))  # one of SESSION_STATUSES
    created_at: Mapped[created_ts]
    finished_at: Mapped[datetime | None]
    summary: Mapped[dict[str, Any] | None]  # final figures written when the session ends

    tasks: Mapped[list[TaskRow]] = relationship(back_populates="session", passive_deletes=True)
    episodes: Mapped[list[EpisodeRow]] = relationship(back_populates="session", passive_deletes=True)
    evaluations: Mapped[list[EvaluationRow]] = relationship(back_populates="session", passive_deletes=True)


class SessionLeaseRow(Base):
    """Who runs a session now: one row while an ``arena run`` owns it, gone when it ends (:mod:`lessons.library.leases`).

    The lease is live while ``expires_at`` is in the future; its owner renews it (heartbeat) and
    deletes it at the end. A row whose ``expires_at`` has passed is a dead owner's: the next owner
    replaces it.
    """

    __tablename__ = "session_leases"

    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True)
    owner: Mapped[str] = mapped_column(String(100))  # a random id per process: "<host>:<pid>:<hex>"
    host: Mapped[str] = mapped_column(String(255))  # the owner's host name
    pid: Mapped[int] = mapped_column(Integer)  # the owner's process id on that host
    acquired_at: Mapped[datetime]  # when this owner took the lease
    renewed_at: Mapped[datetime]  # the last heartbeat
    expires_at: Mapped[datetime]  # a dead owner's lease is taken over after this


def _default_origin(context: Any) -> str:
    """The ``origin`` of a task row inserted without one: ``"file"`` for JSONL tasks, else ``"generator"``."""
    return "file" if context.get_current_parameters().get("source") == "jsonl" else "generator"


class TaskRow(Base):
    """One prompt with a reference answer (and its verifier's data in ``meta``)."""

    __tablename__ = "tasks"
    __table_args__ = (UniqueConstraint("session_id", "task_key"),)

    id: Mapped[intpk]
    session_id: Mapped[int] = _fk("sessions.id")
    task_key: Mapped[str] = mapped_column(String(300))  # e.g. "chain_sum/train/00003"
    family: Mapped[str] = mapped_column(String(100))  # e.g. "chain_sum"
    split: Mapped[str] = mapped_column(String(20))  # one of SPLITS
    question: Mapped[LongText]
    answer: Mapped[LongText]  # the reference answer
    source: Mapped[str] = mapped_column(String(50))  # e.g. one of TASK_SOURCES
    meta: Mapped[JSONDict] = mapped_column("metadata", JSON())  # verifier data etc.
    # one of TASK_ORIGINS; inserts that do not say get "file" for JSONL tasks, else "generator"
    origin: Mapped[str] = mapped_column(String(20), default=_default_origin, server_default="generator")
    # proposer tasks: the task they are a variant of
    parent_task_id: Mapped[int | None] = mapped_column(
        ForeignKey("tasks.id", ondelete="SET NULL"), index=True, nullable=True
    )

    session: Mapped[SessionRow] = relationship(back_populates="tasks")


class EpisodeRow(Base):
    """One pass of the episode graph over one task: k rollouts, grading and reflection."""

    __tablename__ = "episodes"
    # The unique constraint's index (session_id first) serves lookups by session.
    __table_args__ = (UniqueConstraint("session_id", "episode_key"),)

    id: Mapped[intpk]
    session_id: Mapped[int] = _fk("sessions.id")
    episode_key: Mapped[str] = mapped_column(String(300))  # e.g. "r001-chain_sum/train/00003"
    round: Mapped[int]
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    system_prompt: Mapped[LongText]
    lessons_in_context: Mapped[JSONList]  # readable lesson ids, in prompt order
    # {"raw": teacher text, "parsed": Reflection as dict | None, "error": str | None}
    reflection: Mapped[dict[str, Any] | None]
    reflection_error: Mapped[str | None] = mapped_column(Text())
    # the teacher's ops the curator refused, one line each with the reason (migration 0009); NULL: none
    curation_rejected: Mapped[list[Any] | None] = mapped_column(JSON())
    # what was refused while the episode's hint was written, one line each with the reason (migration 0013); NULL: none
    hint_rejected: Mapped[list[Any] | None] = mapped_column(JSON())
    mean_reward: Mapped[float] = mapped_column(Float)  # over the group's (unguided) rollouts
    started_at: Mapped[datetime]
    finished_at: Mapped[datetime]

    session: Mapped[SessionRow] = relationship(back_populates="episodes")
    task: Mapped[TaskRow] = relationship()
    rollouts: Mapped[list[RolloutRow]] = relationship(
        back_populates="episode", order_by="RolloutRow.id", passive_deletes=True
    )


class RolloutRow(Base):
    """One attempt by the solver: context, completion, tokens, reward and critique."""

    __tablename__ = "rollouts"

    id: Mapped[intpk]
    episode_id: Mapped[int] = mapped_column(ForeignKey("episodes.id", ondelete="CASCADE"), index=True)
    idx: Mapped[int]  # 0..k-1 within the group
    guided: Mapped[bool] = mapped_column(default=False, server_default=false())  # sampled with a hint
    messages: Mapped[JSONList]  # [{"role": ..., "content": ...}, ...]
    completion: Mapped[LongText]
    extracted_answer: Mapped[str | None] = mapped_column(Text())
    reward: Mapped[float | None] = mapped_column(Float)  # in [0, 1]; NULL when grading failed (ungraded)
    critique: Mapped[LongText]
    prompt_tokens: Mapped[int]
    completion_tokens: Mapped[int]
    finish_reason: Mapped[str] = mapped_column(String(50))  # "stop", "length", ...
    latency_s: Mapped[float] = mapped_column(Float)  # seconds for this sample (batched calls: share)
    # What distillation needs (Guide, arXiv 2506.13923): completion token ids (T,) and the
    # per-token sampling log-probs (T,) under ``messages`` — π_old(y_t | x, h, y_<t) for a
    # guided rollout. NULL where the backend does not expose them (chat APIs give no ids).
    token_ids: Mapped[list[Any] | None] = mapped_column(JSON())
    logprobs: Mapped[list[Any] | None] = mapped_column(JSON())
    # Guided rollouts only: the hint used, and the same chat without the hint (the unguided
    # context the completion is later trained under).
    hint_id: Mapped[int | None] = mapped_column(ForeignKey("hints.id", ondelete="SET NULL"), index=True, nullable=True)
    unguided_messages: Mapped[list[Any] | None] = mapped_column(JSON())
    # Rubric rewards (RaR, arXiv 2507.17746) and trust in the critic; see lessons/rubric_store.py.
    grading_status: Mapped[str | None] = mapped_column(String(20))  # one of GRADING_STATUSES; NULL: graded (older rows)
    reward_kind: Mapped[str | None] = mapped_column(String(30))  # "verifier", "rubric-explicit", "rubric-implicit"
    rubric_id: Mapped[int | None] = mapped_column(ForeignKey("rubrics.id", ondelete="SET NULL"), index=True, nullable=True)
    judge_rating: Mapped[float | None] = mapped_column(Float)  # implicit aggregation: the judge's 1-10 rating
    verifier_reward: Mapped[float | None] = mapped_column(Float)  # tasks with a verifier and a rubric: the verifier's reward
    hack_flags: Mapped[list[Any] | None] = mapped_column(JSON())  # reward-hack flags, e.g. ["verifier_disagrees"]; [] or NULL: none
    adapter_id: Mapped[str | None] = mapped_column(String(50))  # readable id of the LoRA adapter that sampled it; NULL: the base model
    fault: Mapped[str | None] = mapped_column(String(30))  # endpoint fault kind ("empty_choices", ..., "oversized"); NULL: none

    episode: Mapped[EpisodeRow] = relationship(back_populates="rollouts")


class HintRow(Base):
    """Guidance for one train task whose whole group failed (Guide; Agent-RLVR; STaR rationalization).

    Reused for the same task in later rounds before a new one is written.
    """

    __tablename__ = "hints"

    id: Mapped[intpk]
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    episode_id: Mapped[int | None] = mapped_column(ForeignKey("episodes.id", ondelete="SET NULL"), nullable=True)
    mode: Mapped[str] = mapped_column(String(100))  # one of HINT_MODES, or several joined by "+"
    text: Mapped[LongText]
    source_rollout_ids: Mapped[JSONList]  # the failed rollouts (rollouts.id) the hint responds to
    times_used: Mapped[Counter]  # episodes whose guided group used this hint
    successes: Mapped[Counter]  # of those, episodes where at least one guided rollout succeeded
    created_at: Mapped[created_ts]


class RubricRow(Base):
    """One version of a task's rubric (RaR). Version 1 comes from the task file; later ones from
    online rubrics (OnlineRubrics, arXiv 2510.07284), each with its parent, so history is kept."""

    __tablename__ = "rubrics"
    __table_args__ = (UniqueConstraint("task_id", "version"),)

    id: Mapped[intpk]
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    version: Mapped[int]  # 1, 2, ... per task
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("rubrics.id", ondelete="SET NULL"), nullable=True)
    source: Mapped[str] = mapped_column(String(20))  # one of RUBRIC_SOURCES
    note: Mapped[str | None] = mapped_column(Text())  # why this version exists (e.g. the teacher's analysis)
    created_at: Mapped[created_ts]

    criteria: Mapped[list[RubricCriterionRow]] = relationship(
        back_populates="rubric", order_by="RubricCriterionRow.position", passive_deletes=True
    )


class RubricCriterionRow(Base):
    """One weighted criterion of one rubric version, with its lineage."""

    __tablename__ = "rubric_criteria"

    id: Mapped[intpk]
    rubric_id: Mapped[int] = mapped_column(ForeignKey("rubrics.id", ondelete="CASCADE"), index=True)
    position: Mapped[int]  # 0-based order in the rubric (the judge numbers criteria from 1)
    title: Mapped[str] = mapped_column(String(200))
    description: Mapped[LongText]  # starts with its category, e.g. "Pitfall Criteria: ..."
    weight: Mapped[float] = mapped_column(Float)  # 1..5, or -1..-5 for pitfalls
    category: Mapped[str] = mapped_column(String(20))  # essential | important | optional | pitfall
    source: Mapped[str] = mapped_column(String(20))  # one of RUBRIC_SOURCES: where the criterion was first written
    # The same criterion in the parent version (criteria are copied into each new version).
    inherited_from_id: Mapped[int | None] = mapped_column(
        ForeignKey("rubric_criteria.id", ondelete="SET NULL"), nullable=True
    )
    motivating_rollout_ids: Mapped[JSONList]  # rollouts (rollouts.id) whose comparison motivated it; [] for task criteria
    motivation: Mapped[dict[str, Any] | None]  # online: {"rationale", "reference_completions": [...], ...}

    rubric: Mapped[RubricRow] = relationship(back_populates="criteria")


class CriterionVerdictRow(Base):
    """The judge's met / not-met decision on one criterion for one rollout (explicit aggregation)."""

    __tablename__ = "criterion_verdicts"
    __table_args__ = (UniqueConstraint("rollout_id", "criterion_id"),)

    id: Mapped[intpk]
    rollout_id: Mapped[int] = mapped_column(ForeignKey("rollouts.id", ondelete="CASCADE"))
    criterion_id: Mapped[int] = mapped_column(ForeignKey("rubric_criteria.id", ondelete="CASCADE"), index=True)
    met: Mapped[bool]  # for a pitfall: the response makes the mistake
    reason: Mapped[str] = mapped_column(Text(), default="")  # the judge's evidence


class LessonRow(Base):
    """A short, general, reusable instruction kept in the library."""

    __tablename__ = "lessons"
    __table_args__ = (
        Index("ix_lessons_status_scope", "status", "scope"),
    )

    id: Mapped[intpk]
    lesson_id: Mapped[str] = mapped_column(String(150), unique=True)  # e.g. "chain_sum-00012"
    text: Mapped[LongText]
    scope: Mapped[str] = mapped_column(String(100))  # a task family, or "global"
    status: Mapped[str] = mapped_column(String(20))  # one of LESSON_STATUSES
    helpful: Mapped[Counter]
    harmful: Mapped[Counter]
    neutral: Mapped[Counter]
    times_in_context: Mapped[Counter]
    # size of ``text`` in the solver's tokens (None until counted: rows from before 0003)
    tokens: Mapped[int | None]
    # latest utility A/B (lessons.utility): effect on pass@1 with vs without the lesson, its 95% CI and n
    utility: Mapped[float | None] = mapped_column(Float)
    utility_lo: Mapped[float | None] = mapped_column(Float)
    utility_hi: Mapped[float | None] = mapped_column(Float)
    utility_n: Mapped[Counter]
    # retrieval prior, kept by lessons.library.curation: helpful - harmful + UTILITY_WEIGHT * utility
    rank_score: Mapped[float] = mapped_column(Float, server_default="0")
    source_episode_id: Mapped[int | None] = _fk("episodes.id", nullable=True, ondelete="SET NULL")
    created_at: Mapped[created_ts]
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, onupdate=utcnow)

    events: Mapped[list[LessonEventRow]] = relationship(
        back_populates="lesson",
        order_by="LessonEventRow.id",
        passive_deletes=True,
        foreign_keys="LessonEventRow.lesson_id",
    )


# retrieval's prior reads a scope's lessons ORDER BY rank_score DESC, id: the index in that order (migration 0010)
Index("ix_lessons_scope_rank_id", LessonRow.scope, LessonRow.rank_score.desc(), LessonRow.id)


class LessonEventRow(Base):
    """The audit log: one curation op applied to one lesson, with before/after text."""

    __tablename__ = "lesson_events"

    id: Mapped[intpk]
    lesson_id: Mapped[int] = mapped_column(ForeignKey("lessons.id", ondelete="CASCADE"), index=True)
    op: Mapped[str] = mapped_column(String(20))  # one of LESSON_OPS
    before: Mapped[str | None] = mapped_column(Text())
    after: Mapped[str | None] = mapped_column(Text())
    rationale: Mapped[LongText]
    episode_id: Mapped[int | None] = mapped_column(
        ForeignKey("episodes.id", ondelete="SET NULL"), index=True, nullable=True
    )
    rollout_ids: Mapped[JSONList]  # the rollouts (rollouts.id) that support the op
    # MERGE on a source lesson: the lesson it was merged into; on the merged lesson: None
    target_lesson_id: Mapped[int | None] = mapped_column(
        ForeignKey("lessons.id", ondelete="SET NULL"), index=True, nullable=True
    )
    # where the op came from when it is not an episode: {"by": "cli"} or an import's source fields
    origin: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[created_ts]

    lesson: Mapped[LessonRow] = relationship(back_populates="events", foreign_keys=[lesson_id])


class LessonUtilityRow(Base):
    """One utility A/B of one lesson: pass@1 on sampled train tasks with vs without it in context."""

    __tablename__ = "lesson_utility"

    id: Mapped[intpk]
    lesson_id: Mapped[int] = _fk("lessons.id")
    session_id: Mapped[int | None] = _fk("sessions.id", nullable=True, ondelete="SET NULL")
    after_episodes: Mapped[int]  # the session's episode count when the A/B ran
    n: Mapped[int]  # paired samples (tasks x samples per task)
    pass_with: Mapped[float] = mapped_column(Float)  # pass@1 with the lesson in context
    pass_without: Mapped[float] = mapped_column(Float)
    effect: Mapped[float] = mapped_column(Float)  # pass_with - pass_without
    ci_lo: Mapped[float] = mapped_column(Float)  # 95% CI of the effect (paired)
    ci_hi: Mapped[float] = mapped_column(Float)
    task_keys: Mapped[JSONList]
    created_at: Mapped[created_ts]


class EvaluationRow(Base):
    """A pass@1 measurement of one session on one split, with or without lessons."""

    __tablename__ = "evaluations"
    __table_args__ = (UniqueConstraint("session_id", "name"),)

    id: Mapped[intpk]
    session_id: Mapped[int] = _fk("sessions.id")
    name: Mapped[str] = mapped_column(String(100))  # e.g. "heldout_before"
    split: Mapped[str] = mapped_column(String(20))
    with_lessons: Mapped[bool]
    n: Mapped[int]  # tasks evaluated
    passes: Mapped[int]  # tasks with reward >= 1
    pass_at_1: Mapped[float] = mapped_column(Float)  # passes / n
    ci_lo: Mapped[float] = mapped_column(Float)  # confidence interval of pass_at_1
    ci_hi: Mapped[float] = mapped_column(Float)
    details: Mapped[JSONDict]  # per-task rewards and anything else the evaluator keeps
    created_at: Mapped[created_ts]

    session: Mapped[SessionRow] = relationship(back_populates="evaluations")


class AdapterRow(Base):
    """A LoRA adapter (peft format) produced by ``arena distill``, with its config, metrics and evaluation."""

    __tablename__ = "adapters"

    id: Mapped[intpk]
    adapter_id: Mapped[str] = mapped_column(String(50), unique=True)  # readable and stable, e.g. "adapter-0001"
    path: Mapped[LongText]  # absolute path of the adapter directory (adapter_config.json, adapter_model.safetensors)
    base_model: Mapped[str] = mapped_column(String(100))  # fingerprint of the base model it was trained on
    objective: Mapped[str] = mapped_column(String(ADAPTER_OBJECTIVE_MAX_LEN))  # a registered objective, or "imported"
    session_id: Mapped[int | None] = _fk("sessions.id", nullable=True, ondelete="SET NULL")  # the session trained on
    config: Mapped[JSONDict]  # the DistillConfig as a dict (LoRA, optimizer, data settings)
    data: Mapped[JSONDict]  # data provenance: rollout ids, lesson ids, hint ids, example counts
    metrics: Mapped[JSONDict]  # training figures: steps, tokens, final loss, tokens/s, wall time
    evaluation: Mapped[JSONDict] = mapped_column("eval", JSON())  # held-out pass@1 of base, base_lessons, adapter, adapter_lessons
    parent_adapter: Mapped[str | None] = mapped_column(String(50))  # readable id of the adapter it continued or followed (cycles); NULL: none
    cycle: Mapped[int | None]  # the wake–sleep cycle of `arena run --cycles` that trained it; NULL: `arena distill`
    created_at: Mapped[created_ts]


class AdapterLessonRow(Base):
    """Lineage edge lesson → adapter: a lesson trained into an adapter ("in_context") or distilled by it."""

    __tablename__ = "adapter_lessons"
    __table_args__ = (UniqueConstraint("adapter_id", "lesson_id", "relation"),)

    id: Mapped[intpk]
    adapter_id: Mapped[int] = mapped_column(ForeignKey("adapters.id", ondelete="CASCADE"))  # adapters.id
    lesson_id: Mapped[int] = mapped_column(ForeignKey("lessons.id", ondelete="CASCADE"), index=True)  # lessons.id
    relation: Mapped[str] = mapped_column(String(20))  # one of ADAPTER_LESSON_RELATIONS


class CurriculumStepRow(Base):
    """The difficulty one task family (spec) trained at in one round, and the band decision after it.

    Written by :mod:`arena.session.curriculum`: the row appears when the round starts (``step``,
    ``levels``, ``config``) and is completed when the round ends (``groups``, ``pass_rate``,
    ``action``, ``next_step``, then ``proposals_done``).
    """

    __tablename__ = "curriculum_steps"
    __table_args__ = (UniqueConstraint("session_id", "round", "family"),)

    id: Mapped[intpk]
    session_id: Mapped[int] = _fk("sessions.id")
    round: Mapped[int]
    family: Mapped[str] = mapped_column(String(150))  # the spec's task-key label, e.g. "chain_sum" or "chain_sum#2"
    step: Mapped[int]  # rung of the family's difficulty ladder; 0 is the spec as given
    levels: Mapped[JSONDict]  # reasoning-gym curriculum attribute -> level index ({} without a curriculum)
    config: Mapped[JSONDict]  # the family config overrides the round's generator tasks were drawn with
    groups: Mapped[int | None]  # groups (episodes) of this family in the round
    pass_rate: Mapped[float | None] = mapped_column(Float)  # mean unguided pass@1 of those groups
    action: Mapped[str | None] = mapped_column(String(20))  # up / down / stay / at_max / at_min / fixed / no_data
    next_step: Mapped[int | None]  # the step of the next round
    proposals_done: Mapped[bool] = mapped_column(default=False, server_default=false())
    created_at: Mapped[created_ts]


class TaskProposalRow(Base):
    """One task written by the proposer role near a failed or barely-solved parent, accepted or rejected with why."""

    __tablename__ = "task_proposals"

    id: Mapped[intpk]
    session_id: Mapped[int] = _fk("sessions.id")
    round: Mapped[int]  # the round after which it was proposed
    parent_task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"), index=True)
    proposer: Mapped[str] = mapped_column(String(200))  # the proposer policy's name
    question: Mapped[str | None] = mapped_column(Text())  # None when the reply could not be parsed
    answer: Mapped[str | None] = mapped_column(Text())  # the proposed reference answer
    justification: Mapped[str | None] = mapped_column(Text())
    status: Mapped[str] = mapped_column(String(20))  # one of PROPOSAL_STATUSES
    reason_code: Mapped[str | None] = mapped_column(String(40))  # rejections: e.g. "verifier_disagrees"
    reason: Mapped[str | None] = mapped_column(Text())  # rejections: one line saying why
    check: Mapped[str | None] = mapped_column(String(20))  # "verifier" or "agreement": how it was checked
    check_detail: Mapped[JSONDict]  # e.g. the computed answer, or the independent samples' answers
    task_id: Mapped[int | None] = mapped_column(ForeignKey("tasks.id", ondelete="SET NULL"), nullable=True)
    raw: Mapped[JSONList]  # the proposer's raw replies
    created_at: Mapped[created_ts]


# --------------------------------------------------------------------------- migrations


POSTGRES_SEARCH_NAMES = frozenset({"search_vector", "ix_lessons_search_vector"})  # revision 0011


def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
    """Alembic autogenerate filter: the search indexes made in raw SQL are not models.

    They are the FTS5 index ``lessons_fts`` and its shadow tables on SQLite (revision 0003),
    and the ``search_vector`` column and its GIN index on PostgreSQL (revision 0011).
    """
    if name is None:
        return True
    if type_ == "table":
        return not name.startswith("lessons_fts")
    if type_ in ("column", "index"):
        return name not in POSTGRES_SEARCH_NAMES
    return True


def alembic_config(url: str, **attributes: Any) -> Any:
    """An Alembic ``Config`` for this schema, built programmatically (no ``alembic.ini``).

    Args:
        url: the SQLAlchemy URL of the database (``sqlite:///arena.db``, ``postgresql://...``).
        attributes: put into ``Config.attributes``; ``connection=`` (an open SQLAlchemy
            ``Connection``) makes :mod:`lessons.db.migrations.env` run on that connection
            instead of creating its own engine.

    Returns:
        ``alembic.config.Config`` usable with ``alembic.command`` (``upgrade``,
        ``downgrade``, ``revision(autogenerate=True)``, ``check``).
    """
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    # ConfigParser interpolates "%": escape it (URL-encoded passwords contain it).
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes.update(attributes)
    return cfg
