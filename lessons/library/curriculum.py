"""Storage of the self-play curriculum: curriculum tasks, the difficulty trajectory and task proposals.

Kept apart from :mod:`lessons.library.store` (the library proper); it works on the same database
through the store's own sessions (short transactions, ``BEGIN IMMEDIATE`` for writes on
SQLite), and returns plain frozen dataclasses. Tables: ``tasks.origin`` / ``tasks.parent_task_id``,
``curriculum_steps`` and ``task_proposals`` (:mod:`lessons.db`, revision 0006).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import aliased

from lessons.db.schema import PROPOSAL_STATUSES, SPLITS, TASK_ORIGINS, CurriculumStepRow, TaskProposalRow, TaskRow
from lessons.library.store import LessonStore, StoreError, TaskLike


@dataclass(frozen=True)
class StoredTask:
    """A stored task with everything needed to rebuild it, and where it came from."""

    task_key: str
    family: str
    split: str
    question: str
    answer: str
    source: str
    metadata: dict[str, Any]
    origin: str  # one of lessons.db.schema.TASK_ORIGINS
    parent_key: str | None  # proposer tasks: the parent's task key


@dataclass(frozen=True)
class CurriculumStep:
    """One family's difficulty in one round and the band decision taken after it."""

    round: int
    family: str  # the spec's task-key label ("chain_sum", "chain_sum#2", a JSONL family)
    step: int  # rung of the family's ladder; 0 is the spec as given
    levels: dict[str, int]  # curriculum attribute -> level
    config: dict[str, Any]  # the family config overrides at this rung
    groups: int | None = None  # groups of the family in the round (None until the round ends)
    pass_rate: float | None = None  # their mean unguided pass@1
    action: str | None = None  # up / down / stay / at_max / at_min / fixed / no_data
    next_step: int | None = None
    proposals_done: bool = False


@dataclass(frozen=True)
class ProposalRecord:
    """One proposal to store (see :meth:`CurriculumRecords.record_proposals`)."""

    parent_key: str
    proposer: str  # the proposer policy's name
    status: str  # "accepted" | "rejected"
    question: str | None
    answer: str | None
    justification: str | None
    reason_code: str | None
    reason: str | None
    check: str | None
    check_detail: dict[str, Any] = field(default_factory=dict)
    raw: list[str] = field(default_factory=list)
    task: TaskLike | None = None  # accepted: the new task (stored with origin "proposer")


@dataclass(frozen=True)
class ProposalInfo:
    """A stored proposal."""

    id: int
    round: int
    parent_key: str
    proposer: str
    status: str
    question: str | None
    answer: str | None
    justification: str | None
    reason_code: str | None
    reason: str | None
    check: str | None
    check_detail: dict[str, Any]
    task_key: str | None  # accepted: the task it became


def _step(row: CurriculumStepRow) -> CurriculumStep:
    return CurriculumStep(
        row.round, row.family, row.step, dict(row.levels), dict(row.config), row.groups, row.pass_rate,
        row.action, row.next_step, bool(row.proposals_done),
    )


class CurriculumRecords:
    """The curriculum's rows in a :class:`lessons.library.store.LessonStore`'s database.

    Args:
        store: an open store (its schema is at revision 0006 or later).
    """

    def __init__(self, store: LessonStore) -> None:
        self.store = store

    # ----------------------------------------------------------------- tasks

    def session_tasks(self, session_id: int) -> list[StoredTask]:
        """Every task of the session with its origin and parent, in insertion order."""
        parent = aliased(TaskRow)
        q = (
            select(TaskRow, parent.task_key)
            .outerjoin(parent, TaskRow.parent_task_id == parent.id)
            .where(TaskRow.session_id == session_id)
            .order_by(TaskRow.id)
        )
        with self.store.read() as s:
            return [
                StoredTask(t.task_key, t.family, t.split, t.question, t.answer, t.source, dict(t.meta), t.origin, pk)
                for t, pk in s.execute(q).all()
            ]

    def add_tasks(self, session_id: int, tasks: Iterable[TaskLike], origin: str = "generator") -> None:
        """Store tasks drawn by the curriculum (e.g. a harder rung); keys already stored are left alone.

        Raises:
            ValueError: an unknown origin or split.
        """
        if origin not in TASK_ORIGINS:
            raise ValueError(f"task origin must be one of {TASK_ORIGINS}, not {origin!r}")
        with self.store.write() as s, s.begin():
            self._insert(s, session_id, list(tasks), origin, {})

    @staticmethod
    def _insert(s: Any, session_id: int, tasks: Sequence[TaskLike], origin: str, parents: dict[str, int]) -> dict[str, int]:
        have = dict(s.execute(select(TaskRow.task_key, TaskRow.id).where(TaskRow.session_id == session_id)).all())
        for t in tasks:
            if t.split not in SPLITS:
                raise ValueError(f"task {t.task_key}: split must be one of {SPLITS}, not {t.split!r}")
            if t.task_key in have:
                continue
            row = TaskRow(
                session_id=session_id, task_key=t.task_key, family=t.family, split=t.split, question=t.question,
                answer=t.answer, source=t.source, meta=dict(t.metadata or {}), origin=origin,
                parent_task_id=parents.get(t.task_key),
            )
            s.add(row)
            s.flush()
            have[t.task_key] = row.id
        return have

    # ----------------------------------------------------------------- difficulty trajectory

    def steps(self, session_id: int) -> list[CurriculumStep]:
        """The session's difficulty trajectory, by round then family (insertion order)."""
        q = (
            select(CurriculumStepRow)
            .where(CurriculumStepRow.session_id == session_id)
            .order_by(CurriculumStepRow.round, CurriculumStepRow.id)
        )
        with self.store.read() as s:
            return [_step(r) for r in s.scalars(q)]

    def start_step(
        self, session_id: int, rnd: int, family: str, step: int, levels: dict[str, int], config: dict[str, Any]
    ) -> CurriculumStep:
        """Record the difficulty ``family`` trains at in round ``rnd``; an existing row (resume) is returned unchanged."""
        with self.store.write() as s, s.begin():
            row = s.scalar(
                select(CurriculumStepRow).where(
                    CurriculumStepRow.session_id == session_id,
                    CurriculumStepRow.round == rnd,
                    CurriculumStepRow.family == family,
                )
            )
            if row is None:
                row = CurriculumStepRow(
                    session_id=session_id, round=rnd, family=family, step=step, levels=dict(levels), config=dict(config)
                )
                s.add(row)
                s.flush()
            return _step(row)

    def finish_step(
        self,
        session_id: int,
        rnd: int,
        family: str,
        groups: int,
        pass_rate: float | None,
        action: str,
        next_step: int,
    ) -> CurriculumStep:
        """Record the round's pass rate for ``family`` and the band decision.

        Raises:
            StoreError: the round's row was never started.
        """
        with self.store.write() as s, s.begin():
            row = self._require(s, session_id, rnd, family)
            row.groups, row.pass_rate, row.action, row.next_step = groups, pass_rate, action, next_step
            return _step(row)

    @staticmethod
    def _require(s: Any, session_id: int, rnd: int, family: str) -> CurriculumStepRow:
        row = s.scalar(
            select(CurriculumStepRow).where(
                CurriculumStepRow.session_id == session_id,
                CurriculumStepRow.round == rnd,
                CurriculumStepRow.family == family,
            )
        )
        if row is None:
            raise StoreError(f"no curriculum step for {family} in round {rnd} of session {session_id}")
        return row

    # ----------------------------------------------------------------- proposals

    def record_proposals(self, session_id: int, rnd: int, family: str, proposals: Sequence[ProposalRecord]) -> None:
        """Store one round's proposals for ``family`` (accepted ones with their new tasks) and mark them done.

        One transaction, so an interrupted proposal stage is either wholly stored or redone.

        Raises:
            ValueError: an unknown status, or an accepted proposal without its task.
            StoreError: the round's curriculum row is missing or a parent task is not stored.
        """
        for p in proposals:
            if p.status not in PROPOSAL_STATUSES:
                raise ValueError(f"proposal status must be one of {PROPOSAL_STATUSES}, not {p.status!r}")
            if p.status == "accepted" and p.task is None:
                raise ValueError("an accepted proposal needs its task")
        with self.store.write() as s, s.begin():
            row = self._require(s, session_id, rnd, family)
            ids = dict(s.execute(select(TaskRow.task_key, TaskRow.id).where(TaskRow.session_id == session_id)).all())
            for p in proposals:
                if p.parent_key not in ids:
                    raise StoreError(f"proposal parent {p.parent_key} is not a stored task of session {session_id}")
                task_id = None
                if p.task is not None:
                    ids = self._insert(s, session_id, [p.task], "proposer", {p.task.task_key: ids[p.parent_key]})
                    task_id = ids[p.task.task_key]
                s.add(
                    TaskProposalRow(
                        session_id=session_id, round=rnd, parent_task_id=ids[p.parent_key], proposer=p.proposer,
                        question=p.question, answer=p.answer, justification=p.justification, status=p.status,
                        reason_code=p.reason_code, reason=p.reason, check=p.check, check_detail=dict(p.check_detail),
                        task_id=task_id, raw=list(p.raw),
                    )
                )
            row.proposals_done = True

    def proposals(self, session_id: int) -> list[ProposalInfo]:
        """Every proposal of the session, in the order they were made."""
        parent, made = aliased(TaskRow), aliased(TaskRow)
        q = (
            select(TaskProposalRow, parent.task_key, made.task_key)
            .join(parent, TaskProposalRow.parent_task_id == parent.id)
            .outerjoin(made, TaskProposalRow.task_id == made.id)
            .where(TaskProposalRow.session_id == session_id)
            .order_by(TaskProposalRow.id)
        )
        with self.store.read() as s:
            return [
                ProposalInfo(
                    p.id, p.round, pk, p.proposer, p.status, p.question, p.answer, p.justification, p.reason_code,
                    p.reason, p.check, dict(p.check_detail), mk,
                )
                for p, pk, mk in s.execute(q).all()
            ]

    def proposal_counts(self, session_id: int) -> dict[str, int]:
        """``{"accepted": n, "rejected": m}`` for the session."""
        with self.store.read() as s:
            rows = s.execute(
                select(TaskProposalRow.status, func.count())
                .where(TaskProposalRow.session_id == session_id)
                .group_by(TaskProposalRow.status)
            ).all()
        return {status: int(n) for status, n in rows}
