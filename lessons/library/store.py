"""``LessonStore``: the one object the rest of the app opens to reach the lesson library.

The library is a SQLAlchemy database (SQLite file by default, any SQLAlchemy URL
otherwise) whose schema is :mod:`lessons.db.schema`, opened, checked and migrated by
:class:`lessons.db.engine.Database`. :class:`LessonStore` bundles one repository per
aggregate, each in its own module:

- :class:`~lessons.library.sessions.SessionRepository`: sessions and their tasks;
- :class:`~lessons.library.leases.LeaseRepository`: the one owner of a running session (its lease);
- :class:`~lessons.library.episodes.EpisodeRepository`: episodes, rollouts, hints, and the
  curation an episode's reflection applies;
- :class:`~lessons.library.lessons.LessonRepository`: lesson reads, counts, audit events,
  utility history, :meth:`~lessons.library.lessons.LessonRepository.curate`;
- :class:`~lessons.library.search.SearchRepository`: FTS5 / BM25 search;
- :class:`~lessons.library.evaluations.EvaluationRepository`: evaluations and session statistics.

Every public method opens its own short transaction and returns plain records
(:mod:`lessons.library.records`), never ORM rows. The sibling stores
(:mod:`lessons.library.rubrics`, ``adapters``, ``curriculum``, ``provenance``,
``transfer``, ``leaks``) wrap an open :class:`LessonStore` and use its public
:meth:`~lessons.db.engine.Database.read` / :meth:`~lessons.db.engine.Database.write`
sessions.

The repositories are mixins over one :class:`lessons.library.repository.Repository` (one
engine, one set of curation settings, one FTS cache) rather than objects the facade
delegates to: every method stays the very function it is on its repository (no forwarding
layer whose signatures could drift), ``store.curation_policy = ...`` still reaches every
write, and each repository can still be opened alone (``SessionRepository(url)``).
"""

from __future__ import annotations

from lessons.db.engine import SQLITE_BUSY_TIMEOUT_MS, check_database
from lessons.library.episodes import EpisodeRepository
from lessons.library.evaluations import EvaluationRepository
from lessons.library.leases import LeaseRepository
from lessons.library.lessons import LessonRepository
from lessons.library.records import (
    EpisodeRecord,
    EpisodeResult,
    EvaluationInfo,
    EventInfo,
    GroupOutcome,
    HintInfo,
    HintRecord,
    LeaseHeld,
    LeaseInfo,
    LeaseLost,
    LessonInfo,
    RolloutRecord,
    SessionInfo,
    StoreError,
    TaskInfo,
    TaskLike,
)
from lessons.library.search import PRUNE_ABOVE, SearchRepository
from lessons.library.sessions import SessionRepository
from lessons.text import normalise_lesson_text

# Names importers have always taken from this module; they live where their job is.
__all__ = [
    "PRUNE_ABOVE",
    "SQLITE_BUSY_TIMEOUT_MS",
    "EpisodeRecord",
    "EpisodeResult",
    "EvaluationInfo",
    "EventInfo",
    "GroupOutcome",
    "HintInfo",
    "HintRecord",
    "LessonInfo",
    "LeaseHeld",
    "LeaseInfo",
    "LeaseLost",
    "LessonStore",
    "RolloutRecord",
    "SessionInfo",
    "StoreError",
    "TaskInfo",
    "TaskLike",
    "check_database",
    "normalise_lesson_text",
]


class LessonStore(SessionRepository, LeaseRepository, EpisodeRepository, LessonRepository, SearchRepository,
                  EvaluationRepository):
    """The lesson library: sessions, tasks, episodes, rollouts, lessons and their audit log.

    Args:
        url: an SQLAlchemy URL (``sqlite:///arena.db``, ``postgresql+psycopg://...``) or a
            bare file path, which means a SQLite file (``arena.db``, ``runs/x.db``).

    Opening creates the SQLite file if it does not exist (but never its directory) and
    runs Alembic ``upgrade head``, so a fresh file gets the schema and an older one is
    migrated.

    Attributes:
        curation_policy: curation settings for every op applied through this store
            (:meth:`record_episode`, :meth:`curate`).
        count_tokens: the solver's tokenizer count; None: ~4 chars/token.

    Raises:
        StoreError: the directory does not exist or is not writable, the file is not a
            database, or its schema revision is newer than this version knows.
    """
