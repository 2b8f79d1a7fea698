"""Read models of the lessons screen: pages, the search box, and one lesson's history and lineage.

Lessons come from :meth:`LessonStore.list_lessons` / :meth:`LessonStore.get_lesson`, their
audit log from :meth:`LessonStore.lesson_events` and utility A/Bs from
:meth:`LessonStore.utility_history`; what the store has no method for (counts of a filter,
the lineage of one lesson, the search box's every-word prefix search) is read here through
:meth:`LessonStore.read`.
"""

from __future__ import annotations

import re

from sqlalchemy import func, select

from lessons.db.schema import (
    LESSON_STATUSES,
    AdapterLessonRow,
    AdapterRow,
    EpisodeRow,
    LessonEventRow,
    LessonRow,
    SessionRow,
)
from lessons.library.read_models.views import LessonDetail, LessonPage
from lessons.library.store import LessonStore

PAGE_SIZE = 100  # lessons per page of the lessons table
SEARCH_LIMIT = 200  # at most this many search results
LINEAGE_OPS = ("ADD", "EDIT", "MERGE", "IMPORT")  # events whose episode is a source of the lesson

_WORD = re.compile(r"\w+", re.UNICODE)


def _check_status(status: str | None) -> None:
    """:meth:`LessonStore.list_lessons`' check of ``status`` (same message), needed before the count."""
    if status is not None and status not in LESSON_STATUSES:
        raise ValueError(f"lesson status must be one of {', '.join(LESSON_STATUSES)}, not {status!r}")


class LessonReads:
    """The lessons table, its search and a lesson's detail pane.

    Args:
        store: an open store (the caller closes it).
    """

    def __init__(self, store: LessonStore) -> None:
        self.store = store

    def families(self) -> list[str]:
        """The scopes present in the library (task families and ``global``), sorted."""
        with self.store.read() as s:
            return sorted(s.scalars(select(LessonRow.scope).distinct()))

    def lesson_page(self, page: int = 0, status: str | None = None, family: str | None = None,
                    page_size: int = PAGE_SIZE) -> LessonPage:
        """One page of lessons, oldest first, filtered by status and family.

        Args:
            page: 0-based page number; clamped to the last page.
            status: one of ``LESSON_STATUSES`` or None (every status).
            family: a scope (task family or ``global``) or None.
            page_size: rows per page (≥ 1).

        Returns:
            The page, with the number of matching lessons and of pages.

        Raises:
            ValueError: unknown status or ``page_size`` < 1.
        """
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        _check_status(status)
        q = select(func.count()).select_from(LessonRow)
        if status is not None:
            q = q.where(LessonRow.status == status)
        if family is not None:
            q = q.where(LessonRow.scope == family)
        with self.store.read() as s:
            total = int(s.scalar(q) or 0)
        pages = max(1, -(-total // page_size))
        page = min(max(0, page), pages - 1)
        rows = self.store.list_lessons(status=status, scope=family, limit=page_size, offset=page * page_size)
        return LessonPage(rows, total, page, pages)

    def search(self, text: str, status: str | None = None, family: str | None = None,
               limit: int = SEARCH_LIMIT) -> LessonPage:
        """Lessons containing every word of ``text`` (word prefixes match), best BM25 first.

        The search box's search, unlike :meth:`LessonStore.search_lessons` (any of the terms,
        whole words: retrieval for a prompt). SQLite FTS5 (``lessons_fts``, porter stemming)
        where the database has it (:meth:`LessonStore.has_fts`); otherwise a case-insensitive
        substring match of every word, newest first.

        Args:
            text: the words typed (FTS5 syntax in them is inert); none: the first page.
            status, family: filters as :meth:`lesson_page`.
            limit: at most this many results.

        Returns:
            One page holding every result, with ``query`` set to ``text``.
        """
        words = _WORD.findall(text.lower())
        if not words:
            return self.lesson_page(0, status, family)
        rows = self.store.search_every_word(words, status, family, limit)
        return LessonPage(rows, len(rows), 0, 1, query=text)

    def lesson_detail(self, lesson_id: str) -> LessonDetail | None:
        """A lesson with its full history, utility A/Bs and lineage; None if there is no such lesson.

        Lineage: the episodes named by its ADD/EDIT/MERGE/IMPORT events (and its source
        episode), the lessons it was merged into / from (MERGE targets), and the adapters
        that trained on or distilled it (``adapter_lessons``) — the one-hop neighbourhood of
        :func:`lessons.library.provenance.build_graph`, read with indexed queries so a
        100k-lesson library answers at once.
        """
        les = self.store.get_lesson(lesson_id)
        if les is None:
            return None
        events = self.store.lesson_events(lesson_id)
        with self.store.read() as s:
            row_id, src_ep = s.execute(
                select(LessonRow.id, LessonRow.source_episode_id).where(LessonRow.lesson_id == lesson_id)
            ).one()
            merged_from = s.scalars(
                select(LessonRow.lesson_id)
                .join(LessonEventRow, LessonEventRow.lesson_id == LessonRow.id)
                .where(LessonEventRow.target_lesson_id == row_id, LessonEventRow.op == "MERGE")
                .order_by(LessonEventRow.id)
            ).all()
            ep_ids = [ev.episode_id for ev in events if ev.episode_id is not None and ev.op in LINEAGE_OPS]
            if src_ep is not None:
                ep_ids.insert(0, src_ep)
            ep_ids = list(dict.fromkeys(ep_ids))
            labels = {
                eid: f"{name}/{key}"
                for eid, name, key in s.execute(
                    select(EpisodeRow.id, SessionRow.name, EpisodeRow.episode_key)
                    .join(SessionRow, EpisodeRow.session_id == SessionRow.id)
                    .where(EpisodeRow.id.in_(ep_ids))
                )
            } if ep_ids else {}
            adapters = [
                (str(a), str(rel))
                for a, rel in s.execute(
                    select(AdapterRow.adapter_id, AdapterLessonRow.relation)
                    .join(AdapterRow, AdapterRow.id == AdapterLessonRow.adapter_id)
                    .where(AdapterLessonRow.lesson_id == row_id)
                    .order_by(AdapterRow.id, AdapterLessonRow.relation)
                )
            ]
        return LessonDetail(
            lesson=les,
            events=events,
            utility_history=self.store.utility_history(lesson_id),
            source_episodes=[(eid, labels[eid]) for eid in ep_ids if eid in labels],
            merged_into=list(dict.fromkeys(ev.target for ev in events if ev.op == "MERGE" and ev.target)),
            merged_from=list(dict.fromkeys(merged_from)),
            adapters=adapters,
        )
