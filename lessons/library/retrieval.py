"""Retrieval: the lessons one task's solver prompt gets, ranked and cut to a token budget.

For a task of family F the pool is the live lessons (candidate and active) of F and the
global ones, and the distilled ones unless the caller excludes them (the adapter that
distilled them is in use): the best BM25 matches of the task text (SQLite FTS5 ``bm25()``, Robertson &
Zaragoza's Okapi BM25, k1 = 1.2, b = 0.75; on PostgreSQL IDF-weighted ``ts_rank_cd``, see
:mod:`lessons.library.search`) together with the best by the curation prior
``rank_score`` (helpful − harmful + weighted measured utility), so a general lesson that
shares no word with the task ("end with the answer tag") still competes. Each lesson of
the pool is scored

    score = relevance / max relevance in the pool            (0 … 1; 0 without a match)
          + rank_score / (1 + |rank_score|)                  (−1 … 1)
          + ACTIVE_BONUS if the lesson is active (not a candidate)

and :func:`arena.episode.prompt.retrieve` packs the best into the ``<lessons>`` section up to the
solver's token budget. Both queries use indexes, so the
time does not grow with the library (``bench/retrieval.py``).

:func:`bm25_scan` is the same ranking by a full scan in Python: the fallback for a
database without a full-text index (neither SQLite's FTS5 nor PostgreSQL's ``search_vector``)
and the benchmark's baseline.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from lessons.library.store import LessonInfo, LessonStore
from lessons.ops import normalise_scope
from lessons.similarity import STOP_WORDS, content_terms

ACTIVE_BONUS = 0.25  # an active lesson outranks an equally relevant candidate
POOL = 32  # lessons taken from each of the two queries
MAX_QUERY_TERMS = 48
MAX_SEARCH_TERMS = 4  # in a large library, only the rarest query words are searched (see LessonStore.search_lessons)

_WORD = re.compile(r"[^\W\d_]\w*")  # a word starting with a letter, any script


def query_terms(text: str) -> list[str]:
    """The words of a task text worth searching for: lower-case, no stop words, no numbers.

    Numbers are dropped (a lesson is general and never repeats a task's numbers); at most
    :data:`MAX_QUERY_TERMS` distinct words, in order of first appearance.
    """
    words = [w for w in _WORD.findall(text.lower()) if (len(w) > 1 or not w.isascii()) and w not in STOP_WORDS]
    return list(dict.fromkeys(words))[:MAX_QUERY_TERMS]


@dataclass(frozen=True)
class Ranked:
    """A lesson in the pool with the parts of its score."""

    lesson: LessonInfo
    relevance: float  # BM25, 0 when the lesson matches no query term
    score: float


def combine(lessons: Sequence[tuple[LessonInfo, float]]) -> list[Ranked]:
    """Score and sort a pool of ``(lesson, bm25 relevance)``; see the module docstring."""
    top = max((rel for _, rel in lessons), default=0.0)
    ranked = []
    for les, rel in lessons:
        prior = les.rank_score / (1.0 + abs(les.rank_score))
        score = (rel / top if top > 0 else 0.0) + prior + (ACTIVE_BONUS if les.status == "active" else 0.0)
        ranked.append(Ranked(les, rel, score))
    ranked.sort(key=lambda r: (-r.score, r.lesson.created_at, r.lesson.lesson_id))
    return ranked


def bm25_scan(
    query: str, lessons: Sequence[LessonInfo], k1: float = 1.2, b: float = 0.75
) -> list[tuple[LessonInfo, float]]:
    """Okapi BM25 of every lesson against ``query`` by a full scan in Python.

    Args:
        query: the task text.
        lessons: the candidates (all of them are scored).
        k1, b: BM25's term-frequency saturation and length normalisation.

    Returns:
        ``(lesson, score)`` for every lesson, score ≥ 0, in input order. Terms are
        :func:`lessons.similarity.content_terms` (Snowball stems), so scores differ
        slightly from FTS5's porter tokenizer.
    """
    docs = [Counter(content_terms(les.text)) for les in lessons]
    if not docs:
        return []
    q = set(content_terms(" ".join(query_terms(query))))
    n = len(docs)
    avgdl = sum(sum(d.values()) for d in docs) / n or 1.0
    df = Counter(t for d in docs for t in q if t in d)
    idf = {t: math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5)) for t in df}
    out = []
    for les, d in zip(lessons, docs):
        dl = sum(d.values())
        s = 0.0
        for t in q:
            tf = d.get(t, 0)
            if tf:
                s += idf[t] * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
        out.append((les, s))
    return out


def rank_lessons(
    store: LessonStore, family: str | None, task_text: str, exclude: Collection[str] = (), pool: int = POOL,
    active_only: bool = False,
) -> list[Ranked]:
    """The pool of live lessons for a task, best first (see the module docstring).

    Args:
        store: the library.
        family: the task's family (None: every scope).
        task_text: the task's question.
        exclude: readable lesson ids to leave out (e.g. lessons an adapter in use distilled).
        pool: how many lessons each query contributes.
        active_only: leave candidates out (held-out evaluation shows only lessons that earned
            ``active`` on measured evidence; candidates gather evidence on train tasks).

    Returns:
        The ranked pool (at most ``2 * pool`` lessons).
    """
    family = normalise_scope(family) if family is not None else None
    statuses = {"statuses": ("active",)} if active_only else {}
    if store.has_fts():
        hits, top = store.retrieval_pool(query_terms(task_text), family, pool, MAX_SEARCH_TERMS, **statuses)
        by_id: dict[str, tuple[LessonInfo, float]] = {les.lesson_id: (les, rel) for les, rel in hits}
        for les in top:
            by_id.setdefault(les.lesson_id, (les, 0.0))
        pairs = list(by_id.values())
    else:
        pairs = bm25_scan(task_text, store.live_lessons(family, include_distilled=True))
        pairs = sorted(pairs, key=lambda p: -p[1])[:pool] + sorted(pairs, key=lambda p: -p[0].rank_score)[:pool]
        pairs = list({les.lesson_id: (les, rel) for les, rel in pairs}.values())
    return [
        r for r in combine(pairs)
        if r.lesson.lesson_id not in exclude and (not active_only or r.lesson.status == "active")
    ]
