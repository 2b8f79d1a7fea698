"""Lesson reads, counts, audit events and utility history: :class:`LessonRepository`.

Reads return :class:`lessons.library.records.LessonInfo` / :class:`~lessons.library.records.EventInfo`;
every write to the lessons goes through :class:`lessons.library.curation.Curator`
(:meth:`LessonRepository.curate`, or the reflection applied by
:meth:`lessons.library.episodes.EpisodeRepository.record_episode`). Full-text search is
:mod:`lessons.library.search`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, aliased

from lessons.db.schema import LessonEventRow, LessonRow, LessonUtilityRow
from lessons.library.curation import Curator, approx_tokens
from lessons.library.records import EventInfo, LessonInfo
from lessons.library.repository import Repository
from lessons.ops import GLOBAL_SCOPE, normalise_scope
from lessons.vocab import LESSON_STATUSES, LIVE_STATUSES, RETRIEVABLE_STATUSES

LESSONS_TABLE = LessonRow.__table__  # Core table: hot read paths skip ORM identity-map overhead


def lesson_info(row: Any) -> LessonInfo:
    """A :class:`LessonInfo` from an ORM row or a Core row mapping of ``lessons``.

    Args:
        row: a :class:`lessons.db.schema.LessonRow`, or a mapping with the columns of
            the ``lessons`` table (``select(LESSONS_TABLE)`` rows' ``.mappings()``).
    """
    if not isinstance(row, LessonRow):
        row = SimpleNamespace(**row)
    ci = (row.utility_lo, row.utility_hi) if row.utility_lo is not None and row.utility_hi is not None else None
    return LessonInfo(
        lesson_id=row.lesson_id,
        text=row.text,
        scope=row.scope,
        status=row.status,
        helpful=row.helpful,
        harmful=row.harmful,
        neutral=row.neutral,
        times_in_context=row.times_in_context,
        created_at=row.created_at,
        tokens=row.tokens,
        utility=row.utility,
        utility_ci=ci,
        utility_n=row.utility_n or 0,
        rank_score=row.rank_score or 0.0,
        updated_at=row.updated_at,
    )


def top_lesson_rows(s: Session, family: str | None, limit: int, statuses: Sequence[str] = RETRIEVABLE_STATUSES) -> list[LessonInfo]:
    """The ``limit`` lessons of a family (and global) with the highest ``rank_score``, read in session ``s``.

    Ties by row id. One indexed query per scope (index ``ix_lessons_scope_rank_id``, in the
    query's order, so each stops after ``limit`` rows), merged; ``family`` None: every scope
    in one query.
    """
    t = LESSONS_TABLE.c
    if family is None:
        q = select(LESSONS_TABLE).where(t.status.in_(statuses)).order_by(t.rank_score.desc(), t.id).limit(limit)
        return [lesson_info(m) for m in s.execute(q).mappings()]
    rows: list[Any] = []
    for scope in dict.fromkeys([normalise_scope(family), GLOBAL_SCOPE]):
        q = select(LESSONS_TABLE).where(t.scope == scope, t.status.in_(statuses)).order_by(t.rank_score.desc(), t.id).limit(limit)
        rows += s.execute(q).mappings().all()
    rows.sort(key=lambda m: (-m["rank_score"], m["id"]))
    return [lesson_info(m) for m in rows[:limit]]


class LessonRepository(Repository):
    """The lessons of the library: filtered and ranked reads, counts, events, utility history, curation."""

    def live_lessons(self, family: str | None, include_distilled: bool = False) -> list[LessonInfo]:
        """The lessons that may enter a solver prompt (candidate and active), best first.

        Args:
            family: a task family; its lessons and the global ones are returned. None:
                every live lesson.
            include_distilled: also return lessons marked ``distilled`` (they stay in the
                prompt unless the adapter that distilled them is in use).

        Returns:
            Active before candidate, then by ``rank_score`` (helpful − harmful + weighted
            utility, descending), then creation (oldest first).
        """
        statuses = RETRIEVABLE_STATUSES if include_distilled else LIVE_STATUSES
        q = select(LessonRow).where(LessonRow.status.in_(statuses))
        if family is not None:
            q = q.where(LessonRow.scope.in_([normalise_scope(family), GLOBAL_SCOPE]))
        q = q.order_by((LessonRow.status == "active").desc(), LessonRow.rank_score.desc(), LessonRow.created_at, LessonRow.id)
        with self.read() as s:
            return [lesson_info(row) for row in s.scalars(q)]

    def active_lessons(self, family: str | None) -> list[LessonInfo]:
        """Only the ``active`` lessons of :meth:`live_lessons`, same order."""
        return [les for les in self.live_lessons(family) if les.status == "active"]

    def list_lessons(
        self, status: str | None = None, scope: str | None = None, limit: int | None = None, offset: int = 0
    ) -> list[LessonInfo]:
        """Every lesson, oldest first, optionally only those with ``status`` / ``scope``.

        Args:
            limit, offset: a page of the result (``limit`` None: all).

        Raises:
            ValueError: unknown status.
        """
        q = select(LessonRow)
        if status is not None:
            if status not in LESSON_STATUSES:
                raise ValueError(f"lesson status must be one of {', '.join(LESSON_STATUSES)}, not {status!r}")
            q = q.where(LessonRow.status == status)
        if scope is not None:
            q = q.where(LessonRow.scope == scope)
        q = q.order_by(LessonRow.id).offset(offset)
        if limit is not None:
            q = q.limit(limit)
        with self.read() as s:
            return [lesson_info(row) for row in s.scalars(q)]

    def top_lessons(self, family: str | None, limit: int, statuses: Sequence[str] = RETRIEVABLE_STATUSES) -> list[LessonInfo]:
        """The ``limit`` lessons of a family (and global) with the highest ``rank_score``.

        See :func:`top_lesson_rows`.
        """
        with self.read() as s:
            return top_lesson_rows(s, family, limit, statuses)

    def library_tokens_used(self) -> int:
        """Solver tokens held by the live lessons (uncounted ones estimated with :attr:`count_tokens`)."""
        count = self.count_tokens or approx_tokens
        with self.read() as s:
            known = s.scalar(select(func.coalesce(func.sum(LessonRow.tokens), 0)).where(LessonRow.status.in_(LIVE_STATUSES)))
            unknown = s.scalars(select(LessonRow.text).where(LessonRow.status.in_(LIVE_STATUSES), LessonRow.tokens.is_(None)))
            return int(known or 0) + sum(count(t) for t in unknown)

    def count_lessons(self) -> dict[str, int]:
        """Number of lessons per status (every status present, 0 when none)."""
        with self.read() as s:
            counts = dict(s.execute(select(LessonRow.status, func.count()).group_by(LessonRow.status)).all())
        return {st: int(counts.get(st, 0)) for st in LESSON_STATUSES}

    def get_lesson(self, lesson_id: str) -> LessonInfo | None:
        """The lesson with this readable id (e.g. ``"chain_sum-00012"``), or None."""
        with self.read() as s:
            row = s.scalar(select(LessonRow).where(LessonRow.lesson_id == lesson_id))
            return lesson_info(row) if row is not None else None

    def lesson_events(self, lesson_id: str | None = None) -> list[EventInfo]:
        """A lesson's audit log, oldest first (empty for an unknown id); None: every event."""
        target = aliased(LessonRow)
        q = (
            select(LessonEventRow, LessonRow.lesson_id, target.lesson_id)
            .join(LessonRow, LessonEventRow.lesson_id == LessonRow.id)
            .outerjoin(target, LessonEventRow.target_lesson_id == target.id)
            .order_by(LessonEventRow.id)
        )
        if lesson_id is not None:
            q = q.where(LessonRow.lesson_id == lesson_id)
        with self.read() as s:
            return [
                EventInfo(
                    id=ev.id,
                    lesson_id=lid,
                    op=ev.op,
                    before=ev.before,
                    after=ev.after,
                    rationale=ev.rationale,
                    episode_id=ev.episode_id,
                    rollout_ids=list(ev.rollout_ids or []),
                    created_at=ev.created_at,
                    target=tid,
                    origin=dict(ev.origin) if ev.origin else None,
                )
                for ev, lid, tid in s.execute(q)
            ]

    def utility_history(self, lesson_id: str) -> list[dict[str, Any]]:
        """Every utility A/B of a lesson, oldest first: n, pass_with, pass_without, effect, ci95, at."""
        q = (
            select(LessonUtilityRow)
            .join(LessonRow, LessonUtilityRow.lesson_id == LessonRow.id)
            .where(LessonRow.lesson_id == lesson_id)
            .order_by(LessonUtilityRow.id)
        )
        with self.read() as s:
            return [
                {
                    "n": u.n,
                    "pass_with": u.pass_with,
                    "pass_without": u.pass_without,
                    "effect": u.effect,
                    "ci95": [u.ci_lo, u.ci_hi],
                    "after_episodes": u.after_episodes,
                    "at": u.created_at.isoformat(),
                }
                for u in s.scalars(q)
            ]

    def utility_samples(self, session_id: int) -> int:
        """Solver samples the session's utility A/Bs drew: 2 arms x n paired samples per measured lesson."""
        with self.read() as s:
            n = s.scalar(select(func.sum(LessonUtilityRow.n)).where(LessonUtilityRow.session_id == session_id))
        return 2 * int(n or 0)

    def utility_checks(self, session_id: int) -> set[int]:
        """The ``after_episodes`` marks of the session's utility checks already stored (resume skips them)."""
        with self.read() as s:
            return set(s.scalars(select(LessonUtilityRow.after_episodes).where(LessonUtilityRow.session_id == session_id)))

    @contextmanager
    def curate(self, now: datetime | None = None) -> Iterator[Curator]:
        """A :class:`lessons.library.curation.Curator` in one write transaction (committed on exit).

        Uses the store's :attr:`curation_policy` and :attr:`count_tokens`. An exception
        inside the block rolls every op of the block back.

        Example::

            with store.curate() as c:
                new_id = c.add("Check the sign of each term.", "chain_sum", status="active",
                               prov=Provenance(origin={"by": "cli"}))
        """
        with self.write() as s, s.begin():
            yield Curator(s, self.curation_policy, self.count_tokens, now)
