"""Adapters in the lesson library: training rollouts out, adapters and lineage edges in.

What ``arena distill`` needs from the database, kept out of :mod:`lessons.library.store` so the two
grow independently. :class:`AdapterStore` wraps an open :class:`lessons.library.store.LessonStore`
and uses its sessions (short transactions, ``BEGIN IMMEDIATE`` for writes on SQLite):

- :meth:`AdapterStore.training_rollouts`: the rollouts of a session's train tasks with what
  distillation needs (token ids, sampling log-probs, guided / unguided context, hint, the
  lessons that were in context);
- :meth:`AdapterStore.register_adapter`: one transaction that writes the ``adapters`` row,
  its ``adapter_lessons`` edges (``in_context``: lessons whose effect was trained in;
  ``distilled``: lessons the adapter keeps) and, for each distilled lesson, status
  ``distilled`` plus a ``DISTILL`` event in the lesson's history;
- look-ups by readable id (``adapter-0001``) or directory, and the distilled set of an
  adapter (the lessons that leave the prompt while it is in use).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import aliased

from lessons.db.schema import (
    ADAPTER_LESSON_RELATIONS,
    ADAPTER_OBJECTIVE_MAX_LEN,
    AdapterLessonRow,
    AdapterRow,
    EpisodeRow,
    HintRow,
    LessonEventRow,
    LessonRow,
    RolloutRow,
    RubricRow,
    SessionRow,
    TaskRow,
    utcnow,
)
from lessons.library.rubrics import exclusion_reason
from lessons.library.store import LessonStore, StoreError

ADAPTER_PREFIX = "adapter-"

_OBJECTIVE_NAME = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")  # distill, guide-grpo, imported, …


@dataclass(frozen=True)
class TrainingRollout:
    """One stored rollout of a train task, with everything distillation reads."""

    rollout_id: int
    session: str
    task_key: str
    family: str
    guided: bool
    messages: list[dict[str, str]]  # the sampling context (with the hint for a guided rollout)
    unguided_messages: list[dict[str, str]] | None  # guided only: the same chat without the hint
    completion: str
    token_ids: list[int] | None  # completion token ids (T,); None where the backend gave none
    logprobs: list[float] | None  # sampling log-probs (T,) under ``messages``: π_old
    reward: float  # in [0, 1]
    finish_reason: str  # "stop" (end of turn) or "length"
    hint_id: int | None
    lessons_in_context: list[str]  # readable lesson ids in the episode's solver prompt
    hint_text: str | None = None  # guided only: the hint that was in the sampling context
    adapter_id: str | None = None  # the solver's adapter that sampled it (π_old); None: the base model
    episode_round: int = 1  # the session round of its episode (cycles number rounds on: cycle c holds its own rounds)
    episode_id: int = 0  # episodes.id: the rollouts of one episode and one guidance form a group (GRPO's advantages)
    hint_mode: str | None = None  # guided only: the hint's modes joined by "+" (hints.mode, e.g. "feedback+answer")


@dataclass(frozen=True)
class AdapterInfo:
    """A registered adapter."""

    id: int  # adapters.id
    adapter_id: str  # readable, e.g. "adapter-0001"
    path: str  # the adapter directory
    base_model: str  # fingerprint of the base model
    objective: str  # a registered training objective (arena/objectives.py), or "imported"
    session: str | None  # the session it was trained on
    config: dict[str, Any]
    data: dict[str, Any]
    metrics: dict[str, Any]
    eval: dict[str, Any]
    in_context: list[str]  # readable ids of the lessons whose effect was trained in
    distilled: list[str]  # readable ids of the lessons it keeps (they leave the prompt while it is in use)
    created_at: datetime
    parent_adapter: str | None = None  # the adapter it followed in a session's wake–sleep cycles (None: first / arena distill)
    cycle: int | None = None  # the cycle of `arena run --cycles` that trained it (None: arena distill)


@dataclass(frozen=True)
class AdapterRecord:
    """A new adapter to register (see :meth:`AdapterStore.register_adapter`)."""

    adapter_id: str
    path: str
    base_model: str
    objective: str
    session_id: int | None
    config: dict[str, Any]
    data: dict[str, Any]
    metrics: dict[str, Any]
    eval: dict[str, Any]
    in_context: list[str]  # readable lesson ids
    distilled: dict[str, str]  # readable lesson id -> rationale with the measured figures
    parent_adapter: str | None = None  # the previous adapter of the session's cycles (None: first / arena distill)
    cycle: int | None = None  # the wake–sleep cycle that trained it (None: arena distill)


class AdapterStore:
    """Adapter rows and lineage on top of an open :class:`LessonStore` (which the caller closes)."""

    def __init__(self, store: LessonStore) -> None:
        self.store = store

    # ----------------------------------------------------------------- training data

    @staticmethod
    def _session_id(s: Any, session: str) -> int:
        sid = s.scalar(select(SessionRow.id).where(SessionRow.name == session))
        if sid is None:
            raise StoreError(f"no session named {session!r}")
        return int(sid)

    def _train_rows(self, s: Any, sid: int) -> list[Any]:
        """Every rollout of the session's train tasks with what :func:`exclusion_reason` and distillation read.

        Rows: ``(rollout, task_key, family, lessons_in_context, hint text, round, hint mode,
        rubric_graded)``, in recording order; ``rubric_graded``: the rollout's task has a stored
        rubric (only a rubric reward stores one), so its grading record must be there.
        """
        episode = aliased(EpisodeRow)
        rubric_graded = (
            select(RubricRow.id).join(episode, episode.task_id == RubricRow.task_id)
            .where(episode.id == RolloutRow.episode_id).exists().correlate(RolloutRow)
        )
        return list(s.execute(
            select(RolloutRow, TaskRow.task_key, TaskRow.family, EpisodeRow.lessons_in_context, HintRow.text,
                   EpisodeRow.round, HintRow.mode, rubric_graded)
            .join(EpisodeRow, RolloutRow.episode_id == EpisodeRow.id)
            .join(TaskRow, EpisodeRow.task_id == TaskRow.id)
            .outerjoin(HintRow, RolloutRow.hint_id == HintRow.id)
            .where(EpisodeRow.session_id == sid, TaskRow.split == "train")
            .order_by(RolloutRow.id)
        ).all())

    def training_exclusions(self, session: str, rounds: Collection[int] | None = None) -> dict[str, int]:
        """Train rollouts :meth:`training_rollouts` leaves out, by reason (:func:`lessons.library.rubrics.exclusion_reason`).

        Reasons: ``ungraded``, ``oversized``, ``fault``, ``grading_undecided``, ``reward_hack_flagged``;
        only those with a count are listed. ``rounds``: count only episodes of these session rounds;
        None: every round.

        Raises:
            StoreError: no session called ``session``.
        """
        out: dict[str, int] = {}
        with self.store.read() as s:
            for row in self._train_rows(s, self._session_id(s, session)):
                reason = exclusion_reason(row[0], rubric_graded=bool(row[7]))
                if reason is not None and (rounds is None or row[5] in rounds):
                    out[reason] = out.get(reason, 0) + 1
        return out

    def training_rollouts(self, session: str) -> list[TrainingRollout]:
        """Every rollout of the session's train tasks that may become training data, in recording order.

        The one data path of every distillation objective (``distill``, ``sft``,
        ``guided-unweighted``, ``grpo``, ``guide-grpo``, ``opcd``, in ``arena distill`` and the
        sleeps of ``arena run --cycles``) and of ``arena export rollouts``, so the rule holds for all
        of them by construction: only rollouts for which :func:`lessons.library.rubrics.exclusion_reason`
        finds nothing — never an ungraded one (an endpoint fault, a judge that never answered, a
        verifier that crashed: reward NULL), a reply cut as ``oversized``, a rubric rollout whose
        grading (hack flags) was never recorded, nor one with reward-hack flags
        (:meth:`training_exclusions` counts what it left out). Held-out tasks never appear (they
        are not run through episodes, and the query keeps ``split == "train"``).

        Raises:
            StoreError: no session called ``session``.
        """
        with self.store.read() as s:
            rows = self._train_rows(s, self._session_id(s, session))
            return [
                TrainingRollout(
                    rollout_id=r.id,
                    session=session,
                    task_key=key,
                    family=family,
                    guided=bool(r.guided),
                    messages=[dict(m) for m in r.messages],
                    unguided_messages=[dict(m) for m in r.unguided_messages] if r.unguided_messages else None,
                    completion=r.completion,
                    token_ids=[int(t) for t in r.token_ids] if r.token_ids is not None else None,
                    logprobs=[float(x) for x in r.logprobs] if r.logprobs is not None else None,
                    reward=float(r.reward),
                    finish_reason=r.finish_reason,
                    hint_id=r.hint_id,
                    lessons_in_context=list(ctx or []),
                    hint_text=hint_text if r.guided else None,
                    adapter_id=r.adapter_id,
                    episode_round=int(rnd),
                    episode_id=int(r.episode_id),
                    hint_mode=hint_mode if r.guided else None,
                )
                for r, key, family, ctx, hint_text, rnd, hint_mode, rubric_graded in rows
                if exclusion_reason(r, rubric_graded=bool(rubric_graded)) is None
            ]

    # ----------------------------------------------------------------- adapters

    def next_adapter_id(self) -> str:
        """``adapter-NNNN`` with NNNN one above the largest registered number (``adapter-0001`` first)."""
        with self.store.read() as s:
            ids = s.scalars(select(AdapterRow.adapter_id)).all()
        numbers = [int(i[len(ADAPTER_PREFIX):]) for i in ids if i.startswith(ADAPTER_PREFIX) and i[len(ADAPTER_PREFIX):].isdigit()]
        return f"{ADAPTER_PREFIX}{max(numbers, default=0) + 1:04d}"

    def register_adapter(self, rec: AdapterRecord) -> AdapterInfo:
        """Register a trained and evaluated adapter, all in ONE transaction.

        Writes the ``adapters`` row; an ``adapter_lessons`` edge ``in_context`` for each
        lesson of ``rec.in_context`` and ``distilled`` for each of ``rec.distilled``; sets each
        distilled lesson's status to ``distilled`` with a ``DISTILL`` lesson event
        (before/after = old/new status, rationale = the measured figures). Unknown lesson
        ids are skipped.

        Raises:
            ValueError: the objective is not a name of lower-case words and hyphens of at most
                :data:`lessons.vocab.ADAPTER_OBJECTIVE_MAX_LEN` characters (the registry of
                objectives lives above this layer; arena checks the name against it before training).
            StoreError: the adapter id or path is already registered.
        """
        if not _OBJECTIVE_NAME.fullmatch(rec.objective) or len(rec.objective) > ADAPTER_OBJECTIVE_MAX_LEN:
            raise ValueError(f"objective must be lower-case words joined by hyphens, at most {ADAPTER_OBJECTIVE_MAX_LEN} "
                             f"characters, not {rec.objective!r}")
        now = utcnow()
        with self.store.write() as s, s.begin():
            if s.scalar(select(AdapterRow.id).where(AdapterRow.adapter_id == rec.adapter_id)) is not None:
                raise StoreError(f"adapter {rec.adapter_id} is already registered")
            if s.scalar(select(AdapterRow.id).where(AdapterRow.path == rec.path)) is not None:
                raise StoreError(f"an adapter is already registered at {rec.path}")
            row = AdapterRow(
                adapter_id=rec.adapter_id,
                path=rec.path,
                base_model=rec.base_model,
                objective=rec.objective,
                session_id=rec.session_id,
                config=dict(rec.config),
                data=dict(rec.data),
                metrics=dict(rec.metrics),
                evaluation=dict(rec.eval),
                parent_adapter=rec.parent_adapter,
                cycle=rec.cycle,
                created_at=now,
            )
            s.add(row)
            s.flush()
            wanted = list(dict.fromkeys([*rec.in_context, *rec.distilled]))
            lessons = {
                les.lesson_id: les for les in s.scalars(select(LessonRow).where(LessonRow.lesson_id.in_(wanted)))
            } if wanted else {}
            for lid in dict.fromkeys(rec.in_context):
                if lid in lessons:
                    s.add(AdapterLessonRow(adapter_id=row.id, lesson_id=lessons[lid].id, relation="in_context"))
            for lid, rationale in rec.distilled.items():
                les = lessons.get(lid)
                if les is None:
                    continue
                s.add(AdapterLessonRow(adapter_id=row.id, lesson_id=les.id, relation="distilled"))
                before = les.status
                les.status = "distilled"
                les.updated_at = now
                s.add(
                    LessonEventRow(
                        lesson_id=les.id,
                        op="DISTILL",
                        before=before,
                        after="distilled",
                        rationale=f"{rec.adapter_id}: {rationale}",
                        episode_id=None,
                        rollout_ids=[],
                        created_at=now,
                    )
                )
            s.flush()
            return self._info(s, row)

    def get_adapter(self, adapter_id: str) -> AdapterInfo | None:
        """The adapter with this readable id (``adapter-0001``), or None."""
        with self.store.read() as s:
            row = s.scalar(select(AdapterRow).where(AdapterRow.adapter_id == adapter_id))
            return self._info(s, row) if row is not None else None

    def find_by_path(self, path: str | Path) -> AdapterInfo | None:
        """The adapter registered at this directory (compared as resolved absolute paths), or None."""
        target = str(Path(path).expanduser().resolve())
        with self.store.read() as s:
            row = s.scalar(select(AdapterRow).where(AdapterRow.path == target))
            return self._info(s, row) if row is not None else None

    def list_adapters(self) -> list[AdapterInfo]:
        """Every registered adapter, oldest first."""
        with self.store.read() as s:
            return [self._info(s, row) for row in s.scalars(select(AdapterRow).order_by(AdapterRow.id))]

    @staticmethod
    def _info(s: Any, row: AdapterRow) -> AdapterInfo:
        edges = s.execute(
            select(AdapterLessonRow.relation, LessonRow.lesson_id)
            .join(LessonRow, AdapterLessonRow.lesson_id == LessonRow.id)
            .where(AdapterLessonRow.adapter_id == row.id)
            .order_by(AdapterLessonRow.id)
        ).all()
        by_rel: dict[str, list[str]] = {rel: [] for rel in ADAPTER_LESSON_RELATIONS}
        for rel, lid in edges:
            by_rel.setdefault(rel, []).append(lid)
        session = s.scalar(select(SessionRow.name).where(SessionRow.id == row.session_id)) if row.session_id else None
        return AdapterInfo(
            id=row.id,
            adapter_id=row.adapter_id,
            path=row.path,
            base_model=row.base_model,
            objective=row.objective,
            session=session,
            config=dict(row.config or {}),
            data=dict(row.data or {}),
            metrics=dict(row.metrics or {}),
            eval=dict(row.evaluation or {}),
            in_context=by_rel["in_context"],
            distilled=by_rel["distilled"],
            created_at=row.created_at,
            parent_adapter=row.parent_adapter,
            cycle=row.cycle,
        )
