"""Full-text search of lessons (SQLite FTS5, BM25) and its term statistics: :class:`SearchRepository`.

The index ``lessons_fts`` (revision 0003) is an external-content FTS5 table over
``lessons.text`` with the porter tokenizer; ``lessons_fts_vocab`` gives each stem's
document frequency, which :meth:`SearchRepository.search_lessons` uses to prune the query
terms of retrieval in a large library. On other backends there is no index and search
returns nothing (:mod:`lessons.library.retrieval` then scores the live lessons in Python).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import snowballstemmer
from sqlalchemy import func, select
from sqlalchemy import text as sql_text

from lessons.db.schema import LessonRow
from lessons.library.lessons import LESSONS_TABLE, lesson_info
from lessons.library.records import LessonInfo
from lessons.library.repository import Repository
from lessons.ops import GLOBAL_SCOPE, normalise_scope
from lessons.vocab import RETRIEVABLE_STATUSES

_PORTER = snowballstemmer.stemmer("porter")  # the stemmer of FTS5's "porter" tokenizer (Porter 1980)

PRUNE_ABOVE = 2000  # lessons (by row id) above which retrieval prunes query terms by IDF


@lru_cache(maxsize=65536)
def _porter_stem(word: str) -> str:
    return _PORTER.stemWord(word)


class SearchRepository(Repository):
    """BM25 search over the lessons' FTS5 index, with IDF-ordered pruning of query terms.

    Args:
        url: an SQLAlchemy URL or a bare SQLite file path (see :class:`lessons.db.engine.Database`).

    Raises:
        StoreError: the database cannot be opened or migrated.
    """

    def __init__(self, url: str | os.PathLike[str]) -> None:
        self._fts: bool | None = None  # whether lessons_fts exists (looked up once)
        self._df: tuple[int, dict[str, int]] | None = None  # (max lesson row id, porter stem -> document frequency)
        super().__init__(url)

    def has_fts(self) -> bool:
        """Whether the FTS5 index ``lessons_fts`` exists (SQLite with revision 0003)."""
        if self._fts is None:
            with self.read() as s:
                self._fts = bool(
                    self.is_sqlite
                    and s.execute(sql_text("SELECT 1 FROM sqlite_master WHERE type='table' AND name='lessons_fts'")).first()
                )
        return self._fts

    def search_lessons(
        self,
        terms: Sequence[str],
        family: str | None = None,
        statuses: Sequence[str] | None = RETRIEVABLE_STATUSES,
        limit: int = 32,
        max_terms: int | None = None,
    ) -> list[tuple[LessonInfo, float]]:
        """Full-text search: lessons matching any of ``terms``, best BM25 first (SQLite FTS5).

        With ``max_terms`` (retrieval for a prompt), a library of more than
        :data:`PRUNE_ABOVE` lessons searches only its ``max_terms`` most selective terms: a
        term in more than half of the lessons adds nothing (FTS5 clamps its IDF to ~0) and
        is dropped, and of the rest the rarest are kept, so the cost follows the matches of
        rare words, not the library size (IDF-ordered term pruning, as in MaxScore-style
        dynamic pruning). Without it (``arena lessons search``) every term is searched.

        Args:
            terms: query words (each is quoted, so FTS5 syntax in them is inert; the index's
                porter stemmer applies).
            family: only lessons of this family and global ones (None: every scope).
            statuses: only these statuses (None: every status).
            limit: at most this many results.
            max_terms: search at most this many terms in a large library (None: all).

        Returns:
            ``(lesson, relevance)`` pairs, relevance = −bm25 > 0, larger is better. Empty
            when no term is given or the database has no FTS index (see :meth:`has_fts`).
        """
        terms = [t for t in dict.fromkeys(terms) if t]
        if not terms or not self.has_fts():
            return []
        if max_terms is not None:
            terms = self._selective_terms(terms, max_terms)
            if not terms:
                return []
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        sql = (
            "SELECT l.id AS id, -bm25(lessons_fts) AS relevance FROM lessons_fts "
            "JOIN lessons AS l ON l.id = lessons_fts.rowid WHERE lessons_fts MATCH :match"
        )
        params: dict[str, Any] = {"match": match, "limit": int(limit)}
        if family is not None:
            sql += " AND l.scope IN (:family, :global_scope)"
            params.update(family=normalise_scope(family), global_scope=GLOBAL_SCOPE)
        if statuses is not None:
            names = [f":st{i}" for i in range(len(statuses))]
            sql += f" AND l.status IN ({', '.join(names)})"
            params.update({f"st{i}": st for i, st in enumerate(statuses)})
        sql += " ORDER BY bm25(lessons_fts) LIMIT :limit"
        with self.read() as s:
            hits = s.execute(sql_text(sql), params).all()
            if not hits:
                return []
            rows = {m["id"]: m for m in s.execute(select(LESSONS_TABLE).where(LESSONS_TABLE.c.id.in_([h.id for h in hits]))).mappings()}
            return [(lesson_info(rows[h.id]), float(h.relevance)) for h in hits]

    def search_every_word(
        self, words: Sequence[str], status: str | None = None, family: str | None = None, limit: int = 200
    ) -> list[LessonInfo]:
        """Lessons holding every one of ``words`` as a word prefix, best first (the TUI's search box).

        :meth:`search_lessons` matches any whole term (retrieval); this one needs all of them,
        each as a prefix, so a half-typed word finds its lessons.

        Args:
            words: lower-case words (each is quoted, so FTS5 syntax in them is inert).
            status: only this status (None: every status).
            family: only this exact scope (None: every scope).
            limit: at most this many lessons.

        Returns:
            By BM25 with FTS5 (porter stemming, prefixes); without the index (not SQLite, or
            an index not built), lessons whose lower-cased text contains every word, newest first.
            Empty when ``words`` is empty.
        """
        words = [w for w in words if w]
        if not words:
            return []
        params: dict[str, Any] = {"limit": int(limit)}
        filt = ""
        if status is not None:
            filt += " AND l.status = :status"
            params["status"] = status
        if family is not None:
            filt += " AND l.scope = :family"
            params["family"] = family
        if self.has_fts():
            params["match"] = " AND ".join('"' + w.replace('"', '""') + '"*' for w in words)
            sql = (
                "SELECT l.id AS id FROM lessons_fts JOIN lessons AS l ON l.id = lessons_fts.rowid "
                f"WHERE lessons_fts MATCH :match{filt} ORDER BY bm25(lessons_fts) LIMIT :limit"
            )
        else:
            likes = []
            for i, w in enumerate(words):
                likes.append(f"lower(l.text) LIKE :w{i}")
                params[f"w{i}"] = f"%{w}%"
            sql = f"SELECT l.id AS id FROM lessons AS l WHERE {' AND '.join(likes)}{filt} ORDER BY l.id DESC LIMIT :limit"
        with self.read() as s:
            ids = [int(r.id) for r in s.execute(sql_text(sql), params)]
            if not ids:
                return []
            rows = {m["id"]: m for m in s.execute(select(LESSONS_TABLE).where(LESSONS_TABLE.c.id.in_(ids))).mappings()}
            return [lesson_info(rows[i]) for i in ids]

    def _selective_terms(self, terms: list[str], max_terms: int) -> list[str]:
        """The query words worth searching (see :meth:`search_lessons`), rarest first."""
        if not terms or not self.has_fts():
            return []
        with self.read() as s:
            top = s.scalar(select(func.max(LessonRow.id))) or 0
            if top <= PRUNE_ABOVE:  # small library: every term, matching is cheap
                return terms
            if self._df is None or self._df[0] != top:  # new lessons since: reload (edits may lag; harmless)
                rows = s.execute(sql_text("SELECT term, doc FROM lessons_fts_vocab")).all()
                self._df = (top, {t: int(d) for t, d in rows})
        df = self._df[1]
        n = max(top, 1)
        stems = [_porter_stem(t.lower()) for t in terms]
        scored = sorted(
            ((df.get(stem, 0), i, word) for i, (word, stem) in enumerate(zip(terms, stems))),
        )
        return [word for d, _, word in scored if 0 < d <= n / 2][:max_terms]
