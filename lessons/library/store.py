"""``LessonStore``: the only interface the rest of the app has to the lesson library.

The library is a SQLAlchemy database (SQLite file by default, any SQLAlchemy URL
otherwise) whose schema is :mod:`lessons.db`, created and migrated by Alembic on open.
Every public method opens its own short transaction and returns plain frozen
dataclasses, never ORM rows, so callers (the session runner, the TUI's worker threads)
hold no database state between calls.

SQLite specifics (following the SQLAlchemy pysqlite docs, "Serializable isolation /
Savepoints / Transactional DDL"): the driver's own transaction handling is switched off
and the store emits ``BEGIN`` itself, ``BEGIN IMMEDIATE`` for writes that read first, so
two processes writing the same file serialise on the write lock (waiting up to
``busy_timeout``) instead of failing on lock upgrade. WAL journal mode lets readers (a
TUI) read while a session writes.
"""

from __future__ import annotations

import os
import re
import statistics
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Protocol

import snowballstemmer
from alembic import command
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import URL, Engine, create_engine, event, func, inspect, select, update
from sqlalchemy import text as sql_text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.orm import Session, aliased

from lessons.db.schema import (
    LESSON_STATUSES,
    LIVE_STATUSES,
    RETRIEVABLE_STATUSES,
    SESSION_STATUSES,
    SPLITS,
    EpisodeRow,
    EvaluationRow,
    HintRow,
    LessonEventRow,
    LessonRow,
    LessonUtilityRow,
    RolloutRow,
    SessionRow,
    TaskRow,
    alembic_config,
    utcnow,
)
from lessons.library.curation import (
    CurationPolicy,
    Curator,
    Provenance,
    TokenCounter,
    apply_reflection,
    approx_tokens,
)
from lessons.ops import GLOBAL_SCOPE, Reflection, normalise_scope
from lessons.outcomes import count_passes, passes

_PORTER = snowballstemmer.stemmer("porter")  # the stemmer of FTS5's "porter" tokenizer (Porter 1980)


@lru_cache(maxsize=65536)
def _porter_stem(word: str) -> str:
    return _PORTER.stemWord(word)

PRUNE_ABOVE = 2000  # lessons (by row id) above which retrieval prunes query terms by IDF

SQLITE_BUSY_TIMEOUT_MS = 30_000  # how long a writer waits for another's lock before failing

_BEGIN_OPTION = "lesson_arena_sqlite_begin"  # execution option read by the "begin" listener


class StoreError(Exception):
    """A problem the user can fix (bad path, name taken, newer schema); one line, for stderr."""


# --------------------------------------------------------------------------- records in


class TaskLike(Protocol):
    """What :meth:`LessonStore.upsert_tasks` reads from a task (e.g. ``arena`` task objects)."""

    task_key: str
    family: str
    split: str
    question: str
    answer: str
    source: str
    metadata: dict[str, Any]


@dataclass
class RolloutRecord:
    """One rollout to store with its episode (see :meth:`LessonStore.record_episode`)."""

    idx: int  # 0..k-1 within the group
    messages: list[dict[str, str]]  # the context, [{"role": ..., "content": ...}]
    completion: str
    extracted_answer: str | None
    reward: float | None  # in [0, 1]; None: grading failed (ungraded, excluded from rewards and pass@k)
    critique: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop", "length", ...
    latency_s: float  # seconds spent sampling this rollout
    guided: bool = False  # sampled with a hint in context
    token_ids: list[int] | None = None  # completion token ids (T,), where the backend exposes them
    logprobs: list[float] | None = None  # sampling log-probs (T,) under ``messages``, where exposed
    unguided_messages: list[dict[str, str]] | None = None  # guided only: the same chat without the hint


@dataclass
class HintRecord:
    """The hint an episode's guided rollouts used: a stored one (``hint_id``) or a new one."""

    mode: str  # "plan", "feedback", "answer" or several joined by "+"
    text: str
    hint_id: int | None = None  # set when reusing a stored hint; None writes a new hint row


@dataclass
class EpisodeRecord:
    """A finished episode: its group of rollouts and the teacher's reflection."""

    session_id: int
    episode_key: str  # unique within the session, e.g. "r001-chain_sum/train/00003"
    round: int
    task_key: str  # a key already stored with upsert_tasks
    system_prompt: str
    lessons_in_context: list[str]  # readable lesson ids shown to the solver, in prompt order
    rollouts: list[RolloutRecord]
    reflection: Reflection | None  # the validated ops, or None when reflection failed/skipped
    reflection_raw: str = ""  # the teacher's raw reply
    reflection_error: str | None = None  # why the reply could not be parsed, if it could not
    hint: HintRecord | None = None  # set when the group all failed and guided rollouts follow
    started_at: datetime | None = None  # None: now
    finished_at: datetime | None = None  # None: now
    adapter_id: str | None = None  # readable id of the solver's LoRA adapter that sampled the rollouts; None: the base model


# --------------------------------------------------------------------------- records out


@dataclass(frozen=True)
class TaskInfo:
    """A stored task (reference answer included: for the critic and audits only)."""

    session: str
    task_key: str
    family: str
    split: str
    question: str
    answer: str


@dataclass(frozen=True)
class SessionInfo:
    """A stored session."""

    id: int
    name: str
    config: dict[str, Any]
    seed: int
    status: str  # "running" | "finished" | "failed" | "interrupted"
    created_at: datetime  # UTC
    finished_at: datetime | None  # UTC
    summary: dict[str, Any] | None


@dataclass(frozen=True)
class LessonInfo:
    """A lesson of the library, with its counters and measured utility."""

    lesson_id: str  # readable and stable, e.g. "chain_sum-00012"
    text: str
    scope: str  # a task family, or "global"
    status: str  # "candidate" | "active" | "retired" | "distilled"
    helpful: int
    harmful: int
    neutral: int
    times_in_context: int  # episodes whose solver prompt contained it
    created_at: datetime  # UTC
    tokens: int | None = None  # size in the solver's tokens (None: not counted yet)
    utility: float | None = None  # latest A/B effect on pass@1 (with − without), None if never measured
    utility_ci: tuple[float, float] | None = None  # its 95% CI
    utility_n: int = 0  # paired samples behind it
    rank_score: float = 0.0  # retrieval prior: helpful − harmful + weight · utility
    updated_at: datetime | None = None  # UTC

    @property
    def family(self) -> str:
        """The scope under its CLI name: a task family or ``"global"``."""
        return self.scope

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly fields (``arena lessons list/show --json``)."""
        return {
            "id": self.lesson_id,
            "text": self.text,
            "status": self.status,
            "family": self.scope,
            "helpful": self.helpful,
            "harmful": self.harmful,
            "neutral": self.neutral,
            "times_in_context": self.times_in_context,
            "tokens": self.tokens,
            "utility": self.utility,
            "utility_ci95": list(self.utility_ci) if self.utility_ci else None,
            "utility_n": self.utility_n,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat() if self.updated_at else None,
        }


@dataclass(frozen=True)
class EventInfo:
    """One entry of a lesson's audit log."""

    id: int
    lesson_id: str  # readable lesson id
    op: str  # one of lessons.db.schema.LESSON_OPS
    before: str | None
    after: str | None
    rationale: str
    episode_id: int | None
    rollout_ids: list[int]
    created_at: datetime  # UTC
    target: str | None = None  # MERGE on a source: the readable id of the lesson it went into
    origin: dict[str, Any] | None = None  # {"by": "cli"}, or where an imported event came from

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly fields (``arena lessons show --json``'s ``history``)."""
        return {
            "op": self.op,
            "before": self.before,
            "after": self.after,
            "at": self.created_at.isoformat(),
            "rationale": self.rationale,
            "episode_id": self.episode_id,
            "rollout_ids": list(self.rollout_ids),
            "target": self.target,
            "origin": self.origin,
        }


@dataclass(frozen=True)
class EvaluationInfo:
    """A stored pass@1 measurement."""

    name: str
    split: str
    with_lessons: bool
    n: int
    passes: int
    pass_at_1: float
    ci_lo: float
    ci_hi: float
    details: dict[str, Any]
    created_at: datetime  # UTC


@dataclass
class EpisodeResult:
    """What :meth:`LessonStore.record_episode` did to the library."""

    episode_id: int
    lessons_added: list[str] = field(default_factory=list)  # new lesson ids
    upvoted: list[str] = field(default_factory=list)  # helpful tags and duplicate ADDs
    downvoted: list[str] = field(default_factory=list)  # harmful tags
    neutral: list[str] = field(default_factory=list)  # neutral tags
    edited: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)  # lessons made by MERGE
    retired: list[str] = field(default_factory=list)  # by RETIRE, votes, eviction or MERGE
    promoted: list[str] = field(default_factory=list)  # candidate → active
    rejected_ops: list[str] = field(default_factory=list)  # one line per op not applied, with why
    hint_id: int | None = None  # the hint the guided rollouts used (new or reused)


@dataclass(frozen=True)
class HintInfo:
    """A stored hint and how it has fared."""

    id: int
    task_key: str
    mode: str
    text: str
    source_rollout_ids: list[int]
    times_used: int  # episodes whose guided group used it
    successes: int  # of those, episodes with at least one guided success
    created_at: datetime


@dataclass(frozen=True)
class GroupOutcome:
    """The rewards of one episode's group, unguided and (if any) guided."""

    round: int
    task_key: str
    unguided: list[float]
    guided: list[float]


# --------------------------------------------------------------------------- helpers


def normalise_lesson_text(text: str) -> str:
    """The form under which two lesson texts count as duplicates.

    Lower-case, punctuation removed, whitespace collapsed: ``"Add the numbers, then
    check."`` and ``"add the numbers then check"`` are the same lesson.
    """
    t = re.sub(r"[^\w\s]|_", " ", text.lower())
    return " ".join(t.split())


def _one_line(x: object) -> str:
    return " ".join(str(x).split())


def _sqlite_file(url: URL) -> Path | None:
    """The database file of a SQLite URL; None for other backends and in-memory SQLite."""
    if url.get_backend_name() != "sqlite":
        return None
    db = url.database
    if not db or db == ":memory:" or db.startswith("file:"):
        return None
    return Path(db)


def check_database(url: str | os.PathLike[str]) -> None:
    """Check, without creating anything, that ``url`` can be opened as a library.

    For SQLite files: the directory exists and is writable, and the file (if present) is a
    writable regular file. Other backends are checked when :class:`LessonStore` connects.

    Raises:
        StoreError: with the reason, one line.
    """
    raw = os.fspath(url)
    try:
        parsed = make_url(raw) if "://" in raw else URL.create("sqlite", database=raw)
    except ArgumentError as e:
        raise StoreError(f"cannot open database {raw}: {_one_line(e)}") from None
    path = _sqlite_file(parsed)
    if path is not None:
        _check_sqlite_path(path)


def _check_sqlite_path(path: Path) -> None:
    """Raise StoreError unless SQLite can create/open ``path`` read-write (WAL included)."""

    def fail(reason: str) -> None:
        raise StoreError(f"cannot open database {path}: {reason}")

    parent = path.absolute().parent
    if not parent.exists():
        fail(f"directory {parent} does not exist")
    if not parent.is_dir():
        fail(f"{parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        # SQLite creates the -wal and -shm files next to the database.
        fail(f"directory {parent} is not writable")
    if path.exists():
        if path.is_dir():
            fail("it is a directory")
        if not os.access(path, os.R_OK | os.W_OK):
            fail("file is not writable")


def _install_sqlite_listeners(engine: Engine) -> None:
    """WAL, busy timeout, foreign keys; the store emits BEGIN / BEGIN IMMEDIATE itself."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # pysqlite must not emit BEGIN on its own
        cur = dbapi_connection.cursor()
        try:
            cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA journal_mode=WAL")  # fails here on a file that is not a database
        finally:
            cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        mode = conn.get_execution_options().get(_BEGIN_OPTION, "")
        conn.exec_driver_sql(f"BEGIN {mode}".rstrip())


@lru_cache(maxsize=1)
def _script() -> ScriptDirectory:
    """The Alembic revisions shipped with this package (parsed once per process)."""
    return ScriptDirectory.from_config(alembic_config("sqlite://"))


def _session_info(row: SessionRow) -> SessionInfo:
    return SessionInfo(
        id=row.id,
        name=row.name,
        config=dict(row.config or {}),
        seed=row.seed,
        status=row.status,
        created_at=row.created_at,
        finished_at=row.finished_at,
        summary=dict(row.summary) if row.summary is not None else None,
    )


_LESSONS = LessonRow.__table__  # Core table: hot read paths skip ORM identity-map overhead


def _lesson_info(row: Any) -> LessonInfo:
    """A :class:`LessonInfo` from an ORM row or a Core row mapping of ``lessons``."""
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


def _hint_info(row: HintRow, task_key: str) -> HintInfo:
    return HintInfo(
        id=row.id,
        task_key=task_key,
        mode=row.mode,
        text=row.text,
        source_rollout_ids=list(row.source_rollout_ids),
        times_used=row.times_used,
        successes=row.successes,
        created_at=row.created_at,
    )


def _evaluation_info(row: EvaluationRow) -> EvaluationInfo:
    return EvaluationInfo(
        name=row.name,
        split=row.split,
        with_lessons=row.with_lessons,
        n=row.n,
        passes=row.passes,
        pass_at_1=row.pass_at_1,
        ci_lo=row.ci_lo,
        ci_hi=row.ci_hi,
        details=dict(row.details or {}),
        created_at=row.created_at,
    )


# --------------------------------------------------------------------------- the store


class LessonStore:
    """The lesson library: sessions, tasks, episodes, rollouts, lessons and their audit log.

    Args:
        url: an SQLAlchemy URL (``sqlite:///arena.db``, ``postgresql+psycopg://...``) or a
            bare file path, which means a SQLite file (``arena.db``, ``runs/x.db``).

    Opening creates the SQLite file if it does not exist (but never its directory) and
    runs Alembic ``upgrade head``, so a fresh file gets the schema and an older one is
    migrated.

    Raises:
        StoreError: the directory does not exist or is not writable, the file is not a
            database, or its schema revision is newer than this version knows.
    """

    def __init__(self, url: str | os.PathLike[str]) -> None:
        raw = os.fspath(url)
        # curation settings for every op applied through this store (record_episode, curate)
        self.curation_policy: CurationPolicy = CurationPolicy()
        self.count_tokens: TokenCounter | None = None  # the solver's tokenizer count; None: ~4 chars/token
        self._fts: bool | None = None  # whether lessons_fts exists (looked up once)
        self._df: tuple[int, dict[str, int]] | None = None  # (max lesson row id, porter stem -> document frequency)
        try:
            self._url = make_url(raw) if "://" in raw else URL.create("sqlite", database=raw)
        except ArgumentError as e:
            raise StoreError(f"cannot open database {raw}: {_one_line(e)}") from None
        self._sqlite_path = _sqlite_file(self._url)
        self._is_sqlite = self._url.get_backend_name() == "sqlite"
        if self._sqlite_path is not None:
            _check_sqlite_path(self._sqlite_path)
        try:
            self._engine = create_engine(self._url)
        except (ArgumentError, ImportError) as e:
            raise StoreError(f"cannot open database {self._where()}: {_one_line(e)}") from None
        if self._is_sqlite:
            _install_sqlite_listeners(self._engine)
            self._write_engine = self._engine.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"})
        else:
            self._write_engine = self._engine
        try:
            self._migrate()
        except StoreError:
            self._engine.dispose()
            raise
        except DBAPIError as e:
            self._engine.dispose()
            reason = _one_line(e.orig) if e.orig is not None else _one_line(e)
            raise StoreError(f"cannot open database {self._where()}: {reason}") from None
        except (SQLAlchemyError, CommandError) as e:
            self._engine.dispose()
            raise StoreError(f"cannot migrate database {self._where()}: {_one_line(e)}") from None

    # ----------------------------------------------------------------- open / close

    def _where(self) -> str:
        if self._sqlite_path is not None:
            return str(self._sqlite_path)
        return self._url.render_as_string(hide_password=True)

    def _migrate(self) -> None:
        """Bring the schema to the newest revision (Alembic ``upgrade head``)."""
        script = _script()
        head = script.get_current_head()
        known = {rev.revision for rev in script.walk_revisions()}
        with self._engine.connect() as conn:
            current = MigrationContext.configure(conn).get_current_heads()
            foreign = [] if current else [t for t in inspect(conn).get_table_names() if t != "alembic_version"]
        if foreign:
            raise StoreError(
                f"{self._where()} is a database but not a Lesson Arena library (it has tables such as "
                f"{foreign[0]!r} and no schema revision); pass another --db"
            )
        self._check_revisions(current, known, head)
        if current == (head,):
            return
        # Migrate under the write lock, so two processes opening a fresh file do not race.
        with self._write_engine.connect() as conn:
            if self._is_sqlite:
                # Batch-mode table rebuilds drop and re-create tables: with foreign keys on,
                # the DROP would cascade into the referencing tables. The pragma only takes
                # effect outside a transaction (Alembic docs, batch mode and foreign keys).
                conn.connection.dbapi_connection.execute("PRAGMA foreign_keys=OFF")
            try:
                with conn.begin():
                    current = MigrationContext.configure(conn).get_current_heads()
                    self._check_revisions(current, known, head)
                    if current != (head,):
                        cfg = alembic_config(self._url.render_as_string(hide_password=False), connection=conn)
                        command.upgrade(cfg, "head")
                        if self._is_sqlite and conn.exec_driver_sql("PRAGMA foreign_key_check").first():
                            raise StoreError(
                                f"cannot migrate database {self._where()}: the migration would break "
                                "foreign keys; nothing was changed"
                            )
            finally:
                if self._is_sqlite and not conn.invalidated:
                    conn.connection.dbapi_connection.execute("PRAGMA foreign_keys=ON")

    def _check_revisions(self, current: Sequence[str], known: set[str], head: str | None) -> None:
        unknown = [rev for rev in current if rev not in known]
        if unknown:
            raise StoreError(
                f"database {self._where()} has schema revision {', '.join(unknown)}, which this version "
                f"of lesson-arena does not know (newest known: {head}); upgrade lesson-arena or use another database"
            )

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of the database (password included; don't print it)."""
        return self._url.render_as_string(hide_password=False)

    @property
    def sqlite_path(self) -> Path | None:
        """The SQLite database file, or None for other backends and in-memory SQLite."""
        return self._sqlite_path

    def close(self) -> None:
        """Close every pooled connection; the store must not be used afterwards."""
        self._engine.dispose()

    def __enter__(self) -> LessonStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LessonStore({self._url.render_as_string(hide_password=True)!r})"

    def read(self) -> Session:
        """A read session (unit of work) for the repositories in :mod:`lessons.library`; close it after use."""
        return Session(self._engine)

    def write(self) -> Session:
        """A write session for the repositories in :mod:`lessons.library`: its transaction starts with BEGIN IMMEDIATE on SQLite."""
        return Session(self._write_engine)

    @staticmethod
    def _require_session(s: Session, session_id: int) -> SessionRow:
        row = s.get(SessionRow, session_id)
        if row is None:
            raise StoreError(f"no session with id {session_id}")
        return row

    # ----------------------------------------------------------------- sessions

    def create_session(self, name: str, config: dict[str, Any], seed: int) -> int:
        """Create a session in status ``"running"``.

        Args:
            name: unique session name (e.g. from :meth:`new_session_name`).
            config: the session's configuration, JSON-serialisable.
            seed: the session's random seed.

        Returns:
            The new session's id.

        Raises:
            StoreError: a session with this name already exists.
        """
        with self.write() as s, s.begin():
            if s.scalar(select(SessionRow.id).where(SessionRow.name == name)) is not None:
                raise StoreError(f"session {name} already exists; use --resume {name} or pick another --session")
            row = SessionRow(name=name, config=dict(config), seed=int(seed), status="running")
            s.add(row)
            s.flush()
            return row.id

    def get_session(self, name: str) -> SessionInfo | None:
        """The session called ``name``, or None."""
        with self.read() as s:
            row = s.scalar(select(SessionRow).where(SessionRow.name == name))
            return _session_info(row) if row is not None else None

    def set_session_status(self, session_id: int, status: str, summary: dict[str, Any] | None = None) -> None:
        """Set a session's status; ``finished_at`` becomes now (None again for ``"running"``).

        Args:
            session_id: the session's id.
            status: "running" | "finished" | "failed" | "interrupted".
            summary: replaces the stored summary when given; None keeps it.

        Raises:
            ValueError: unknown status.
            StoreError: no such session.
        """
        if status not in SESSION_STATUSES:
            raise ValueError(f"session status must be one of {SESSION_STATUSES}, not {status!r}")
        with self.write() as s, s.begin():
            row = self._require_session(s, session_id)
            row.status = status
            row.finished_at = None if status == "running" else utcnow()
            if summary is not None:
                row.summary = dict(summary)

    def new_session_name(self, now: datetime | None = None) -> str:
        """A free session name ``run-YYYYMMDD-HHMMSS`` (local time), with ``-2``, ``-3``... if taken.

        Args:
            now: the time to name the session after; None: the current local time.
        """
        base = f"run-{(now or datetime.now()):%Y%m%d-%H%M%S}"
        with self.read() as s:
            taken = set(s.scalars(select(SessionRow.name).where(SessionRow.name.startswith(base, autoescape=True))))
        name, n = base, 1
        while name in taken:
            n += 1
            name = f"{base}-{n}"
        return name

    # ----------------------------------------------------------------- tasks

    def stored_tasks(self, session: str | None = None, split: str | None = None) -> list[TaskInfo]:
        """Stored tasks of one session (by name) or all sessions, optionally of one split."""
        q = select(TaskRow, SessionRow.name).join(SessionRow, TaskRow.session_id == SessionRow.id).order_by(TaskRow.id)
        if session is not None:
            q = q.where(SessionRow.name == session)
        if split is not None:
            q = q.where(TaskRow.split == split)
        with self.read() as s:
            return [
                TaskInfo(name, t.task_key, t.family, t.split, t.question, t.answer) for t, name in s.execute(q).all()
            ]

    def upsert_tasks(self, session_id: int, tasks: Iterable[TaskLike]) -> dict[str, int]:
        """Store a session's tasks; tasks whose key is already stored are left as they are.

        Args:
            session_id: the session's id.
            tasks: objects with ``task_key, family, split, question, answer, source,
                metadata`` (a dict); a key repeated within ``tasks`` is stored once.

        Returns:
            task_key -> task id, for every key in ``tasks``. Idempotent: the same keys give
            the same ids on every call.

        Raises:
            ValueError: a split other than "train" / "heldout".
            StoreError: no such session.
        """
        tasks = list(tasks)
        for t in tasks:
            if t.split not in SPLITS:
                raise ValueError(f"task {t.task_key}: split must be one of {SPLITS}, not {t.split!r}")
        with self.write() as s, s.begin():
            self._require_session(s, session_id)
            ids: dict[str, int] = {
                key: task_id
                for key, task_id in s.execute(
                    select(TaskRow.task_key, TaskRow.id).where(TaskRow.session_id == session_id)
                )
            }
            new: dict[str, TaskRow] = {}
            for t in tasks:
                if t.task_key in ids or t.task_key in new:
                    continue
                new[t.task_key] = TaskRow(
                    session_id=session_id,
                    task_key=t.task_key,
                    family=t.family,
                    split=t.split,
                    question=t.question,
                    answer=t.answer,
                    source=t.source,
                    meta=dict(t.metadata or {}),
                )
            s.add_all(new.values())
            s.flush()
            ids.update({key: row.id for key, row in new.items()})
            return {t.task_key: ids[t.task_key] for t in tasks}

    # ----------------------------------------------------------------- episodes

    def finished_episode_keys(self, session_id: int) -> set[str]:
        """The keys of every episode recorded for the session (a resumed session skips them)."""
        with self.read() as s:
            return set(s.scalars(select(EpisodeRow.episode_key).where(EpisodeRow.session_id == session_id)))

    def record_episode(self, rec: EpisodeRecord) -> EpisodeResult | None:
        """Store a finished episode and apply its curation, in one transaction.

        Writes the episode and its rollouts, adds 1 to ``times_in_context`` of each lesson
        in ``rec.lessons_in_context``, then applies ``rec.reflection``:

        tags, RETIRE, MERGE, EDIT and ADD ops, each through :class:`lessons.library.curation.Curator`
        with this episode and its rollouts as provenance (see
        :func:`lessons.library.curation.apply_reflection`): a new lesson starts as a ``candidate``
        ``f"{scope}-{n:05d}"``, a near-duplicate ADD upvotes the existing lesson, ops on
        lessons not in context and ops over the library budget are rejected (listed in
        ``rejected_ops``), and votes move lessons along the life cycle.

        Lesson ids in context that are not in the library are skipped. ``mean_reward`` is
        the mean reward of the unguided rollouts (of all rollouts if every one is guided;
        0.0 without rollouts).

        Args:
            rec: the episode.

        Returns:
            What was applied (:class:`EpisodeResult`), or None if ``(rec.session_id,
            rec.episode_key)`` was already recorded; then nothing is written.

        Raises:
            StoreError: no such session, or the task key was not stored with
                :meth:`upsert_tasks`.
        """
        now = utcnow()
        context_ids = list(dict.fromkeys(rec.lessons_in_context))
        graded = [r for r in rec.rollouts if r.reward is not None]
        unguided = [r.reward for r in graded if not r.guided] or [r.reward for r in graded]
        mean_reward = statistics.fmean(unguided) if unguided else 0.0
        reflection_json: dict[str, Any] | None = None
        if rec.reflection is not None or rec.reflection_raw or rec.reflection_error:
            reflection_json = {
                "raw": rec.reflection_raw,
                "parsed": rec.reflection.model_dump(mode="json") if rec.reflection is not None else None,
                "error": rec.reflection_error,
            }

        with self.write() as s, s.begin():
            self._require_session(s, rec.session_id)
            exists = s.scalar(
                select(EpisodeRow.id).where(
                    EpisodeRow.session_id == rec.session_id, EpisodeRow.episode_key == rec.episode_key
                )
            )
            if exists is not None:
                return None
            task_id = s.scalar(
                select(TaskRow.id).where(TaskRow.session_id == rec.session_id, TaskRow.task_key == rec.task_key)
            )
            if task_id is None:
                raise StoreError(
                    f"task {rec.task_key} is not stored for session {rec.session_id}; call upsert_tasks first"
                )

            episode = EpisodeRow(
                session_id=rec.session_id,
                episode_key=rec.episode_key,
                round=rec.round,
                task_id=task_id,
                system_prompt=rec.system_prompt,
                lessons_in_context=list(context_ids),
                reflection=reflection_json,
                reflection_error=rec.reflection_error,
                mean_reward=mean_reward,
                started_at=rec.started_at or now,
                finished_at=rec.finished_at or now,
            )
            s.add(episode)
            s.flush()
            rollouts = [
                RolloutRow(
                    episode_id=episode.id,
                    idx=r.idx,
                    guided=r.guided,
                    messages=[dict(m) for m in r.messages],
                    completion=r.completion,
                    extracted_answer=r.extracted_answer,
                    reward=float(r.reward) if r.reward is not None else None,
                    critique=r.critique,
                    prompt_tokens=r.prompt_tokens,
                    completion_tokens=r.completion_tokens,
                    finish_reason=r.finish_reason,
                    latency_s=float(r.latency_s),
                    token_ids=list(r.token_ids) if r.token_ids is not None else None,
                    logprobs=list(r.logprobs) if r.logprobs is not None else None,
                    unguided_messages=[dict(m) for m in r.unguided_messages] if r.unguided_messages else None,
                    adapter_id=rec.adapter_id,
                )
                for r in rec.rollouts
            ]
            s.add_all(rollouts)
            s.flush()
            rollout_ids = [r.id for r in rollouts]
            result = EpisodeResult(episode_id=episode.id)
            if rec.hint is not None:
                result.hint_id = self._record_hint(s, rec, task_id, episode.id, rollouts)

            in_context: dict[str, LessonRow] = {}
            if context_ids:
                rows = s.scalars(select(LessonRow).where(LessonRow.lesson_id.in_(context_ids)))
                in_context = {row.lesson_id: row for row in rows}
                if in_context:
                    s.execute(
                        update(LessonRow)
                        .where(LessonRow.id.in_([row.id for row in in_context.values()]))
                        .values(times_in_context=LessonRow.times_in_context + 1)
                    )

            refl = rec.reflection
            if refl is not None:
                curator = Curator(s, self.curation_policy, self.count_tokens, now)
                apply_reflection(curator, refl, context_ids, Provenance(episode.id, rollout_ids))
                c = curator.result
                result.lessons_added = c.added
                result.upvoted, result.downvoted, result.neutral = c.upvoted, c.downvoted, c.neutral
                result.edited, result.merged, result.retired, result.promoted = c.edited, c.merged, c.retired, c.promoted
                result.rejected_ops = c.rejected
            return result

    def _record_hint(
        self, s: Session, rec: EpisodeRecord, task_id: int, episode_id: int, rollouts: list[RolloutRow]
    ) -> int:
        """Create or reuse the episode's hint, link its guided rollouts, update its counters."""
        assert rec.hint is not None
        guided = [r for r in rollouts if r.guided]
        success = any(passes(r.reward) for r in guided)
        if rec.hint.hint_id is not None:
            hint = s.get(HintRow, rec.hint.hint_id)
            if hint is None or hint.task_id != task_id:
                raise StoreError(f"hint {rec.hint.hint_id} does not belong to task {rec.task_key}")
        else:
            hint = HintRow(
                task_id=task_id,
                episode_id=episode_id,
                mode=rec.hint.mode,
                text=rec.hint.text,
                source_rollout_ids=[r.id for r in rollouts if not r.guided],
                times_used=0,
                successes=0,
            )
            s.add(hint)
            s.flush()
        s.execute(
            update(HintRow)
            .where(HintRow.id == hint.id)
            .values(times_used=HintRow.times_used + 1, successes=HintRow.successes + int(success))
        )
        for r in guided:
            r.hint_id = hint.id
        return hint.id

    def find_hint(self, session_id: int, task_key: str, mode: str, max_failures: int = 2) -> HintInfo | None:
        """The stored hint to reuse for a task before writing a new one, or None.

        Among the session's hints for ``task_key`` with this ``mode``, the one with the best
        success rate (then the newest); a hint used ``max_failures`` times without a single
        guided success is not reused, so a new one gets written.
        """
        with self.read() as s:
            rows = s.execute(
                select(HintRow, TaskRow.task_key)
                .join(TaskRow, HintRow.task_id == TaskRow.id)
                .where(TaskRow.session_id == session_id, TaskRow.task_key == task_key, HintRow.mode == mode)
            ).all()
        usable = [(h, k) for h, k in rows if not (h.successes == 0 and h.times_used >= max_failures)]
        if not usable:
            return None
        h, k = max(usable, key=lambda hk: (hk[0].successes / max(1, hk[0].times_used), hk[0].id))
        return _hint_info(h, k)

    def hints(self, session_id: int | None = None) -> list[HintInfo]:
        """Stored hints (of one session, or all), oldest first."""
        q = select(HintRow, TaskRow.task_key).join(TaskRow, HintRow.task_id == TaskRow.id).order_by(HintRow.id)
        if session_id is not None:
            q = q.where(TaskRow.session_id == session_id)
        with self.read() as s:
            return [_hint_info(h, k) for h, k in s.execute(q).all()]

    def group_outcomes(self, session_id: int) -> list[GroupOutcome]:
        """Every recorded episode's unguided and guided rewards, in episode order."""
        with self.read() as s:
            rows = s.execute(
                select(EpisodeRow.id, EpisodeRow.round, TaskRow.task_key, RolloutRow.guided, RolloutRow.reward)
                .join(TaskRow, EpisodeRow.task_id == TaskRow.id)
                .join(RolloutRow, RolloutRow.episode_id == EpisodeRow.id)
                .where(EpisodeRow.session_id == session_id, RolloutRow.reward.is_not(None))
                .order_by(EpisodeRow.id, RolloutRow.id)
            ).all()
        groups: dict[int, GroupOutcome] = {}
        for eid, rnd, key, guided, reward in rows:
            g = groups.setdefault(eid, GroupOutcome(rnd, key, [], []))
            (g.guided if guided else g.unguided).append(float(reward))
        return list(groups.values())

    # ----------------------------------------------------------------- lessons

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
            return [_lesson_info(row) for row in s.scalars(q)]

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
            return [_lesson_info(row) for row in s.scalars(q)]

    def has_fts(self) -> bool:
        """Whether the FTS5 index ``lessons_fts`` exists (SQLite with revision 0003)."""
        if self._fts is None:
            with self.read() as s:
                self._fts = bool(
                    self._is_sqlite
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
            rows = {m["id"]: m for m in s.execute(select(_LESSONS).where(_LESSONS.c.id.in_([h.id for h in hits]))).mappings()}
            return [(_lesson_info(rows[h.id]), float(h.relevance)) for h in hits]

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

    def top_lessons(self, family: str | None, limit: int, statuses: Sequence[str] = RETRIEVABLE_STATUSES) -> list[LessonInfo]:
        """The ``limit`` lessons of a family (and global) with the highest ``rank_score``.

        One indexed query per scope (index ``ix_lessons_scope_rank``), merged; None: every
        scope in one query.
        """
        t = _LESSONS.c
        with self.read() as s:
            if family is None:
                q = select(_LESSONS).where(t.status.in_(statuses)).order_by(t.rank_score.desc(), t.id).limit(limit)
                return [_lesson_info(m) for m in s.execute(q).mappings()]
            rows: list[Any] = []
            for scope in dict.fromkeys([normalise_scope(family), GLOBAL_SCOPE]):
                q = (
                    select(_LESSONS)
                    .where(t.scope == scope, t.status.in_(statuses))
                    .order_by(t.rank_score.desc(), t.id)
                    .limit(limit)
                )
                rows += s.execute(q).mappings().all()
            rows.sort(key=lambda m: (-m["rank_score"], m["id"]))
            return [_lesson_info(m) for m in rows[:limit]]

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
            return _lesson_info(row) if row is not None else None

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

    # ----------------------------------------------------------------- evaluations

    def record_evaluation(
        self,
        session_id: int,
        name: str,
        split: str,
        with_lessons: bool,
        rewards: Sequence[float],
        ci: tuple[float, float],
        details: dict[str, Any],
    ) -> None:
        """Store (or replace) the evaluation ``name`` of a session.

        Args:
            session_id: the session's id.
            name: e.g. "heldout_before", "heldout_after", "heldout_after_no_lessons";
                recording the same name again replaces the earlier row.
            split: the split evaluated ("heldout", "train").
            with_lessons: whether the solver had the lessons in context.
            rewards: one reward in [0, 1] per task; a task passes when reward >= 1 (up to
                1e-9); n = len(rewards), pass_at_1 = passes / n (0.0 when n = 0).
            ci: (low, high) confidence interval of pass_at_1.
            details: stored as given, with ``details["rewards"] = list(rewards)`` added
                unless the caller set that key.

        Raises:
            StoreError: no such session.
        """
        n = len(rewards)
        k = count_passes(rewards)
        payload = dict(details)
        payload.setdefault("rewards", [float(r) for r in rewards])
        values = dict(
            split=split,
            with_lessons=bool(with_lessons),
            n=n,
            passes=k,
            pass_at_1=k / n if n else 0.0,
            ci_lo=float(ci[0]),
            ci_hi=float(ci[1]),
            details=payload,
            created_at=utcnow(),
        )
        with self.write() as s, s.begin():
            self._require_session(s, session_id)
            row = s.scalar(
                select(EvaluationRow).where(EvaluationRow.session_id == session_id, EvaluationRow.name == name)
            )
            if row is None:
                s.add(EvaluationRow(session_id=session_id, name=name, **values))
            else:
                for key, value in values.items():
                    setattr(row, key, value)

    def evaluations(self, session_id: int) -> dict[str, EvaluationInfo]:
        """The session's evaluations by name, in the order they were first recorded."""
        q = select(EvaluationRow).where(EvaluationRow.session_id == session_id).order_by(EvaluationRow.id)
        with self.read() as s:
            return {row.name: _evaluation_info(row) for row in s.scalars(q)}

    # ----------------------------------------------------------------- stats

    def session_stats(self, session_id: int) -> dict[str, Any]:
        """Counts for a session's summary line.

        Returns:
            ``episodes``; ``rollouts`` (all, guided included); ``guided_rollouts``;
            ``mean_reward`` (mean over unguided rollouts, 0.0 if none); ``lessons_added``
            (ADD events from this session's episodes); ``lessons_active`` and
            ``lessons_candidate`` (lessons with that status in the whole library, all
            sessions); ``lessons_retired`` (likewise); ``reflections_failed`` (episodes stored
            with a ``reflection_error``).
        """
        in_session = EpisodeRow.session_id == session_id
        with self.read() as s:
            episodes = s.scalar(select(func.count()).select_from(EpisodeRow).where(in_session)) or 0
            rollouts = s.scalar(select(func.count(RolloutRow.id)).join(EpisodeRow).where(in_session)) or 0
            guided = (
                s.scalar(select(func.count(RolloutRow.id)).join(EpisodeRow).where(in_session, RolloutRow.guided)) or 0
            )
            mean = s.scalar(select(func.avg(RolloutRow.reward)).join(EpisodeRow).where(in_session, ~RolloutRow.guided))
            added = (
                s.scalar(
                    select(func.count(LessonEventRow.id))
                    .join(EpisodeRow, LessonEventRow.episode_id == EpisodeRow.id)
                    .where(in_session, LessonEventRow.op == "ADD")
                )
                or 0
            )
            by_status = dict(s.execute(select(LessonRow.status, func.count()).group_by(LessonRow.status)).all())
            failed = (
                s.scalar(select(func.count(EpisodeRow.id)).where(in_session, EpisodeRow.reflection_error.is_not(None)))
                or 0
            )
        return {
            "episodes": episodes,
            "rollouts": rollouts,
            "guided_rollouts": guided,
            "mean_reward": float(mean) if mean is not None else 0.0,
            "lessons_added": added,
            "lessons_active": int(by_status.get("active", 0)),
            "lessons_candidate": int(by_status.get("candidate", 0)),
            "lessons_retired": int(by_status.get("retired", 0)),
            "reflections_failed": failed,
        }

    def rollouts_by_round(self, session_id: int) -> dict[int, int]:
        """Stored rollouts (unguided and guided) of the session per round: the rollout budget spent."""
        q = (
            select(EpisodeRow.round, func.count(RolloutRow.id))
            .join(RolloutRow, RolloutRow.episode_id == EpisodeRow.id)
            .where(EpisodeRow.session_id == session_id)
            .group_by(EpisodeRow.round)
        )
        with self.read() as s:
            return {int(rnd): int(n) for rnd, n in s.execute(q)}

    def round_rewards(self, session_id: int) -> dict[int, list[list[float]]]:
        """The rewards of each episode's group, by round: the input of pass@k per round.

        Returns:
            round -> one list per episode (in recording order) of its unguided rollouts'
            rewards (by ``idx``). Rounds without episodes are absent.
        """
        q = (
            select(EpisodeRow.round, EpisodeRow.id, RolloutRow.reward)
            .join(RolloutRow, RolloutRow.episode_id == EpisodeRow.id)
            .where(EpisodeRow.session_id == session_id, ~RolloutRow.guided, RolloutRow.reward.is_not(None))
            .order_by(EpisodeRow.round, EpisodeRow.id, RolloutRow.idx, RolloutRow.id)
        )
        groups: dict[int, dict[int, list[float]]] = {}
        with self.read() as s:
            for rnd, episode_id, reward in s.execute(q):
                groups.setdefault(rnd, {}).setdefault(episode_id, []).append(reward)
        return {rnd: list(by_episode.values()) for rnd, by_episode in groups.items()}
