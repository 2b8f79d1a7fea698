"""Full-text search of lessons (SQLite FTS5 or PostgreSQL full-text search) and its term statistics.

:class:`SearchRepository` searches the backend's own index behind one interface:

- SQLite: ``lessons_fts`` (revision 0003), an external-content FTS5 table over
  ``lessons.text`` with the porter tokenizer, ranked by ``bm25()``; ``lessons_fts_vocab``
  gives each stem's document frequency.
- PostgreSQL: ``lessons.search_vector`` (revision 0011), a stored ``to_tsvector('english',
  text)`` with a GIN index. PostgreSQL's ``ts_rank_cd`` (cover density, length-normalised
  by ``1 + log(length)``) has no inverse document frequency, so each query lexeme's
  ``ts_rank_cd`` is weighted by its BM25 IDF, ``ln(1 + (N − df + 0.5) / (df + 0.5))``, with
  ``df`` from ``ts_stat`` over the library: a rare word that matches outranks a common
  one, as with BM25 on SQLite.

Both prune the query terms of retrieval in a large library by document frequency. On
other backends there is no index and search returns nothing (:mod:`lessons.library.retrieval`
then scores the live lessons in Python).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import snowballstemmer
from sqlalchemy import Float, column, func, select
from sqlalchemy import text as sql_text
from sqlalchemy.orm import Session

from lessons.db.schema import LessonRow
from lessons.library.lessons import LESSONS_TABLE, lesson_info, top_lesson_rows
from lessons.library.records import LessonInfo
from lessons.library.repository import Repository
from lessons.ops import GLOBAL_SCOPE, normalise_scope
from lessons.vocab import RETRIEVABLE_STATUSES

_PORTER = snowballstemmer.stemmer("porter")  # the stemmer of FTS5's "porter" tokenizer (Porter 1980)

PRUNE_ABOVE = 2000  # lessons (by row id) above which retrieval prunes query terms by IDF
PG_SEARCH_CONFIG = "english"  # the text search configuration of lessons.search_vector (revision 0011)
_LESSON_COLUMNS = ", ".join(f"l.{c.name}" for c in LESSONS_TABLE.c)  # the columns lesson_info reads, in table order
PG_STATS_STALE = 0.01  # PostgreSQL: recount document frequencies once the library grew by this fraction


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
        self._fts: bool | None = None  # whether the full-text index exists (looked up once)
        self._df: tuple[int, dict[str, int]] | None = None  # (max lesson row id, stem or lexeme -> document frequency)
        self._lexemes: dict[str, str] = {}  # PostgreSQL: query word -> its lexeme ('' for a stop word)
        super().__init__(url)

    def has_fts(self) -> bool:
        """Whether the database has a full-text index of lessons: FTS5 ``lessons_fts`` on SQLite
        (revision 0003), ``lessons.search_vector`` on PostgreSQL (revision 0011)."""
        if self._fts is None:
            with self.read() as s:
                if self.is_sqlite:
                    probe = "SELECT 1 FROM sqlite_master WHERE type='table' AND name='lessons_fts'"
                elif self.is_postgres:
                    probe = (
                        "SELECT 1 FROM information_schema.columns WHERE table_schema = current_schema() "
                        "AND table_name = 'lessons' AND column_name = 'search_vector'"
                    )
                else:
                    probe = ""
                self._fts = bool(probe and s.execute(sql_text(probe)).first())
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
        with self.read() as s:
            return self._search(s, terms, family, statuses, limit, max_terms)

    def retrieval_pool(
        self,
        terms: Sequence[str],
        family: str | None,
        pool: int,
        max_terms: int | None,
        statuses: Sequence[str] = RETRIEVABLE_STATUSES,
    ) -> tuple[list[tuple[LessonInfo, float]], list[LessonInfo]]:
        """Retrieval's two candidate lists in one read transaction (one snapshot, fewer round trips to a server).

        Args:
            terms, family, max_terms, statuses: as for :meth:`search_lessons`.
            pool: how many lessons each list holds at most.

        Returns:
            ``(search hits, best by rank_score)``: :meth:`search_lessons` and
            :meth:`lessons.library.lessons.LessonRepository.top_lessons`, read together.
        """
        with self.read() as s:
            return self._search(s, terms, family, statuses, pool, max_terms), top_lesson_rows(s, family, pool, statuses)

    def _search(
        self,
        s: Session,
        terms: Sequence[str],
        family: str | None,
        statuses: Sequence[str] | None,
        limit: int,
        max_terms: int | None,
    ) -> list[tuple[LessonInfo, float]]:
        """:meth:`search_lessons` in the read session ``s``: one statement returns the lessons and their relevance."""
        terms = [t for t in dict.fromkeys(terms) if t]
        if not terms or not self.has_fts():
            return []
        params: dict[str, Any] = {"limit": int(limit)}
        filters = ""
        if family is not None:
            filters += " AND l.scope IN (:family, :global_scope)"
            params.update(family=normalise_scope(family), global_scope=GLOBAL_SCOPE)
        if statuses is not None:
            names = [f":st{i}" for i in range(len(statuses))]
            filters += f" AND l.status IN ({', '.join(names)})"
            params.update({f"st{i}": st for i, st in enumerate(statuses)})
        if self.is_postgres:
            sql = self._postgres_search(s, terms, max_terms, params)
            if sql is None:
                return []
            sql = sql.format(columns=_LESSON_COLUMNS, filters=filters)
        else:
            if max_terms is not None:
                terms = self._selective_terms(s, terms, max_terms)
                if not terms:
                    return []
            params["match"] = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
            sql = (
                f"SELECT {_LESSON_COLUMNS}, -bm25(lessons_fts) AS relevance FROM lessons_fts "
                f"JOIN lessons AS l ON l.id = lessons_fts.rowid WHERE lessons_fts MATCH :match{filters} "
                "ORDER BY bm25(lessons_fts) LIMIT :limit"
            )
        stmt = sql_text(sql).columns(*LESSONS_TABLE.c, column("relevance", Float))  # typed: timestamps as UTC datetimes
        return [(lesson_info(m), float(m["relevance"])) for m in s.execute(stmt, params).mappings()]

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
            By BM25 with FTS5 (porter stemming, prefixes); elsewhere (PostgreSQL, whose
            lexemes are stems and so no prefix of a half-typed word, or an index not built),
            lessons whose lower-cased text contains every word, newest first.
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
        if self.has_fts() and self.is_sqlite:
            params["match"] = " AND ".join('"' + w.replace('"', '""') + '"*' for w in words)
            sql = (
                f"SELECT {_LESSON_COLUMNS} FROM lessons_fts JOIN lessons AS l ON l.id = lessons_fts.rowid "
                f"WHERE lessons_fts MATCH :match{filt} ORDER BY bm25(lessons_fts) LIMIT :limit"
            )
        else:
            likes = []
            for i, w in enumerate(words):
                likes.append(f"lower(l.text) LIKE :w{i}")
                params[f"w{i}"] = f"%{w}%"
            sql = f"SELECT {_LESSON_COLUMNS} FROM lessons AS l WHERE {' AND '.join(likes)}{filt} ORDER BY l.id DESC LIMIT :limit"
        stmt = sql_text(sql).columns(*LESSONS_TABLE.c)  # typed, as in _search: one statement, no second fetch by id
        with self.read() as s:
            return [lesson_info(m) for m in s.execute(stmt, params).mappings()]

    def _selective_terms(self, s: Session, terms: list[str], max_terms: int) -> list[str]:
        """The query words worth searching (see :meth:`search_lessons`), rarest first; ``s`` a read session."""
        if not terms or not self.has_fts():
            return []
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

    # ----------------------------------------------------------------- PostgreSQL

    def _postgres_search(self, s: Session, terms: list[str], max_terms: int | None, params: dict[str, Any]) -> str | None:
        """The PostgreSQL search query for ``terms`` (a template with ``{columns}`` and ``{filters}``), its
        parameters put in ``params``; ``s`` a read session.

        Each term becomes its ``english`` lexeme (stop words drop out); with ``max_terms`` a
        large library keeps its rarest lexemes as :meth:`_selective_terms` does. Relevance is
        ``Σ idf(lexeme) · ts_rank_cd(search_vector, lexeme, 1)`` over the lexemes a lesson
        matches. None when no lexeme is left.
        """
        lexemes = [lx for lx in dict.fromkeys(self._postgres_lexemes(s, terms)) if lx]
        if not lexemes:
            return None
        top, df = self._postgres_df(s)
        if max_terms is not None and top > PRUNE_ABOVE:
            ranked = sorted((df.get(lx, 0), i, lx) for i, lx in enumerate(lexemes))
            lexemes = [lx for d, _, lx in ranked if 0 < d <= top / 2][:max_terms]
            if not lexemes:
                return None
        n = max(top, 1)
        parts = []
        for i, lx in enumerate(lexemes):
            d = df.get(lx, 0)
            params[f"q{i}"] = _tsquery_lexeme(lx)
            params[f"w{i}"] = math.log(1.0 + (n - d + 0.5) / (d + 0.5))
            parts.append(f"CAST(:w{i} AS float8) * ts_rank_cd(l.search_vector, CAST(:q{i} AS tsquery), 1)")
        params["qall"] = " | ".join(_tsquery_lexeme(lx) for lx in lexemes)
        return (
            f"SELECT {{columns}}, ({' + '.join(parts)}) AS relevance FROM lessons AS l "
            "WHERE l.search_vector @@ CAST(:qall AS tsquery){filters} ORDER BY relevance DESC, l.id LIMIT :limit"
        )

    def _postgres_lexemes(self, s: Session, terms: Sequence[str]) -> list[str]:
        """Each term's lexeme under :data:`PG_SEARCH_CONFIG` ('' for a stop word), asked of the server once per word."""
        missing = [t for t in dict.fromkeys(terms) if t not in self._lexemes]
        if missing:
            rows = s.execute(
                sql_text(
                    "SELECT w, COALESCE((tsvector_to_array(to_tsvector(CAST(:cfg AS regconfig), w)))[1], '') "
                    "FROM unnest(CAST(:words AS text[])) AS w"
                ),
                {"cfg": PG_SEARCH_CONFIG, "words": missing},
            ).all()
            if len(self._lexemes) > 65536:
                self._lexemes.clear()
            self._lexemes.update({w: lx for w, lx in rows})
        return [self._lexemes.get(t, "") for t in terms]

    def _postgres_df(self, s: Session) -> tuple[int, dict[str, int]]:
        """``(max lesson row id, lexeme -> document frequency)`` from ``ts_stat`` over the library.

        ``ts_stat`` reads every lesson's vector, so in a large library (over
        :data:`PRUNE_ABOVE` lessons) the counts are kept and read again only once the library
        grew by :data:`PG_STATS_STALE` (IDF weights and pruning need proportions, not exact
        counts); a small one is recounted whenever a lesson was added.
        """
        top = int(s.scalar(select(func.max(LessonRow.id))) or 0)
        cached = self._df
        stale = cached is None or top < cached[0] or (
            top != cached[0] and (top <= PRUNE_ABOVE or top - cached[0] > PG_STATS_STALE * cached[0])
        )
        if stale:
            rows = s.execute(sql_text("SELECT word, ndoc FROM ts_stat('SELECT search_vector FROM lessons')")).all()
            cached = self._df = (top, {w: int(d) for w, d in rows})
        return cached


def _tsquery_lexeme(lexeme: str) -> str:
    """A lexeme as a ``tsquery`` operand, quoted so its characters are taken literally (no re-stemming)."""
    return "'" + lexeme.replace("\\", "\\\\").replace("'", "''") + "'"
