"""The TUI's view of one library: :class:`ArenaData`, its opening, and its curation actions.

Everything here is plain Python called from Textual thread workers: each call opens its
own short read transaction (the store's engine; SQLite in WAL mode lets these reads run
while ``arena run`` writes the same file) and returns frozen dataclasses, never ORM rows.
Writes (edit, retire, votes) go through :meth:`LessonStore.curate` and
:class:`lessons.library.curation.Curator`, exactly as ``arena lessons edit/retire/upvote/downvote``
do, with provenance ``{"by": "tui"}``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError

from lessons.db.schema import EpisodeRow, EvaluationRow, LessonEventRow, LessonRow, SessionLeaseRow, SessionRow
from lessons.library.curation import CurationError, CurationPolicy, CurationResult, Provenance, TokenCounter
from lessons.library.leases import database_now
from lessons.library.read_models.adapters import AdapterReads
from lessons.library.read_models.lessons import LessonReads
from lessons.library.read_models.sessions import SessionReads
from lessons.library.store import LessonStore, StoreError

TUI_ORIGIN = "tui"  # ``origin.by`` of the events the TUI writes

# What a read or a curation action may raise that a screen shows as one line (not a crash).
USER_ERRORS: tuple[type[Exception], ...] = (SQLAlchemyError, StoreError, CurationError, ValueError)


class DatabaseProblem(Exception):
    """The database cannot be shown: ``kind`` is ``"missing"`` (no file yet) or ``"error"``
    (not a database, newer schema, unreadable); ``args[0]`` is one line for the user."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def open_store(db: str | os.PathLike[str]) -> LessonStore:
    """Open the library for the TUI without creating a file.

    Args:
        db: a SQLite path or SQLAlchemy URL (as ``arena run --db``).

    Returns:
        The open store (Alembic migrates an older schema, as every ``arena`` command does).

    Raises:
        DatabaseProblem: ``kind="missing"`` when the SQLite file does not exist or is empty
            (0 bytes); ``kind="error"`` with :class:`StoreError`'s one line when it is not a
            database, has a newer schema, or cannot be opened.
    """
    raw = os.fspath(db)
    if "://" not in raw:
        path = Path(raw)
        if not path.exists():
            raise DatabaseProblem("missing", f"no database at {raw}")
        if path.is_file() and path.stat().st_size == 0:  # a session about to write it, or a stray file
            raise DatabaseProblem("missing", f"no database at {raw} yet: the file is empty (0 bytes)")
    try:
        return LessonStore(raw)
    except StoreError as e:
        raise DatabaseProblem("error", str(e)) from None


def configure_budget(store: LessonStore, library_tokens: int) -> None:
    """The library budget of the TUI's edits (``arena run --library-tokens``).

    Raises:
        ValueError: ``library_tokens`` < 1.
    """
    if library_tokens < 1:
        raise ValueError(f"--library-tokens must be >= 1, got {library_tokens}")
    store.curation_policy = CurationPolicy(library_tokens=library_tokens)


class ArenaData(SessionReads, LessonReads, AdapterReads):
    """The TUI's view of one library: the read models of every screen, change detection, curation.

    The reads are those of :class:`SessionReads`, :class:`LessonReads` and
    :class:`AdapterReads` (mixins sharing ``store``).

    Args:
        store: an open store; the TUI's edits use its ``curation_policy``.
        token_counter: builds the solver's token count for edits (called once, lazily, in a
            worker: the local tokenizer takes seconds to load); None: ~4 chars/token.

    Thread-safe: every method opens its own transaction; building the token counter is
    guarded by a lock.
    """

    def __init__(self, store: LessonStore, token_counter: Callable[[], TokenCounter] | None = None) -> None:
        self.store = store
        self._token_counter = token_counter
        self._counter_lock = threading.Lock()

    # ----------------------------------------------------------------- change detection

    def fingerprint(self) -> tuple[Any, ...]:
        """A cheap tuple that changes whenever a session, episode, lesson or event is written.

        Max ids (indexed) plus per-session status and lesson ``updated_at``, so polling every
        few seconds costs a handful of index lookups.
        """
        with self.store.read() as s:
            return (
                s.scalar(select(func.max(SessionRow.id))),
                s.scalar(select(func.count()).select_from(SessionRow).where(SessionRow.status == "running")),
                # live leases: a crashed run's expiry turns it "stopped" without any write
                s.scalar(select(func.count()).select_from(SessionLeaseRow)
                         .where(SessionLeaseRow.expires_at > database_now(s))),
                s.scalar(select(func.max(SessionRow.finished_at))),
                s.scalar(select(func.max(EpisodeRow.id))),
                s.scalar(select(func.max(EvaluationRow.created_at))),
                s.scalar(select(func.max(LessonRow.id))),
                s.scalar(select(func.max(LessonEventRow.id))),
            )

    def is_empty(self) -> bool:
        """True when the library has no session and no lesson yet."""
        with self.store.read() as s:
            return s.scalar(select(SessionRow.id).limit(1)) is None and s.scalar(select(LessonRow.id).limit(1)) is None

    # ----------------------------------------------------------------- curation (writes)

    def _prepare(self) -> None:
        with self._counter_lock:
            if self._token_counter is not None and self.store.count_tokens is None:
                self.store.count_tokens = self._token_counter()

    def edit(self, lesson_id: str, text: str, why: str) -> CurationResult:
        """EDIT a lesson's text (``Curator.edit``), origin ``{"by": "tui"}``.

        Raises:
            lessons.library.curation.CurationError: unknown or not live lesson, bad or unchanged
                text, over the library budget.
        """
        self._prepare()
        with self.store.curate() as c:
            c.edit(lesson_id, text, why or "edited in the TUI", _prov(why))
            return c.result

    def retire(self, lesson_id: str, why: str) -> CurationResult:
        """RETIRE a lesson with a reason (``Curator.retire``).

        Raises:
            lessons.library.curation.CurationError: unknown or already retired lesson, empty reason.
        """
        with self.store.curate() as c:
            c.retire(lesson_id, why, _prov(why))
            return c.result

    def vote(self, lesson_id: str, tag: str, why: str = "") -> CurationResult:
        """UPVOTE (``tag="helpful"``) or DOWNVOTE (``"harmful"``) a lesson (``Curator.vote``),
        then its life cycle (promotion or retirement on the votes).

        Raises:
            lessons.library.curation.CurationError: unknown or retired lesson, unknown tag.
        """
        with self.store.curate() as c:
            c.vote(lesson_id, tag, _prov(why), why or f"{'up' if tag == 'helpful' else 'down'}voted in the TUI")
            return c.result


def _prov(why: str = "") -> Provenance:
    return Provenance(origin={"by": TUI_ORIGIN, **({"why": why} if why else {})})
