"""Opening the library's database: URL checks, the engine, SQLite settings, Alembic migrations.

:class:`Database` is what every repository of :mod:`lessons.library` stands on: it parses
the URL (a bare path means a SQLite file), checks a SQLite file's directory and
permissions without creating anything, creates the engine, runs Alembic ``upgrade head``
and hands out short read and write sessions (units of work, after pypi/warehouse
``warehouse/db.py``).

SQLite specifics (following the SQLAlchemy pysqlite docs, "Serializable isolation /
Savepoints / Transactional DDL"): the driver's own transaction handling is switched off
and the listeners emit ``BEGIN`` themselves, ``BEGIN IMMEDIATE`` for write sessions (writes
that read first), so two processes writing the same file serialise on the write lock
(waiting up to ``busy_timeout``) instead of failing on lock upgrade. WAL journal mode lets
readers (a TUI) read while a session writes.

PostgreSQL specifics (psycopg 3, the ``postgres`` extra): write sessions start by taking
one transaction-level advisory lock (``pg_advisory_xact_lock``, PostgreSQL docs §13.3.5),
so writers serialise exactly as on SQLite and a read-then-write op (the next readable
lesson id ``scope-00042``, a vote counter, a MERGE) never races another process's; reads
run at READ COMMITTED beside them and never wait. Migrations take the same lock.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Self

from alembic import command
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import URL, Engine, create_engine, event, inspect
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, SQLAlchemyError
from sqlalchemy.orm import Session

from lessons.credentials import redact_credentials
from lessons.db.schema import alembic_config
from lessons.library.records import StoreError

SQLITE_BUSY_TIMEOUT_MS = 30_000  # how long a writer waits for another's lock before failing

_BEGIN_OPTION = "lesson_arena_sqlite_begin"  # execution option read by the "begin" listener
_WRITE_OPTION = "lesson_arena_write"  # execution option of PostgreSQL write sessions (take the writers' lock)
WRITE_LOCK_KEY = 0x4C41_5245  # the advisory lock writers of one PostgreSQL library serialise on ("LARE")


def one_line(x: object) -> str:
    """``str(x)`` with every run of whitespace (newlines included) collapsed to one space."""
    return " ".join(str(x).split())


def parse_url(url: str | os.PathLike[str]) -> URL:
    """The SQLAlchemy URL of a library: ``url`` itself if it has a scheme, else a SQLite file path.

    Args:
        url: ``sqlite:///arena.db``, ``postgresql+psycopg://...`` or a bare path (``runs/x.db``).

    Raises:
        StoreError: ``url`` is not a valid SQLAlchemy URL, or its password holds a raw ``@`` (RFC 3986
            §3.2.1 asks for ``%40``; SQLAlchemy would read the password only up to it and pass the rest,
            part of the secret, to the driver as the host name).
    """
    raw = os.fspath(url)
    try:
        parsed = make_url(raw) if "://" in raw else URL.create("sqlite", database=raw)
    except ArgumentError as e:
        raise StoreError(f"cannot open database {redact_credentials(raw)}: {redact_credentials(one_line(e))}") from None
    except ValueError:  # SQLAlchemy parses the port as an int
        raise StoreError(f"cannot open database {redact_credentials(raw)}: the port must be a number") from None
    if parsed.host is not None and "@" in parsed.host:
        # make_url ends the password at its first "@" and hands the rest to the driver as the host, whose
        # "cannot resolve host 'rest-of-password@host'" would print part of the password (CASE-005)
        raise StoreError(
            f"cannot open database {redact_credentials(raw)}: the user name or password holds a raw '@'; "
            "percent-encode it as %40"
        ) from None
    if parsed.drivername in ("postgresql", "postgres"):  # the driver this package declares: psycopg 3
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def sqlite_file(url: URL) -> Path | None:
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
    writable regular file. Other backends are checked when :class:`Database` connects.

    Raises:
        StoreError: with the reason, one line.
    """
    path = sqlite_file(parse_url(url))
    if path is not None:
        check_sqlite_path(path)


SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite 3 database file (sqlite.org/fileformat.html)


def check_sqlite_path(path: Path) -> None:
    """Check that SQLite can create/open ``path`` read-write (WAL included).

    Raises:
        StoreError: the directory is missing or not writable, or the path is a directory, a file
            that is not writable, or a non-empty file without SQLite's 16-byte header.
    """

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
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
        if head and head != SQLITE_HEADER:  # an empty file is a new database to SQLite; anything else needs its header
            fail("file is not a database")


def install_sqlite_listeners(engine: Engine) -> None:
    """WAL, busy timeout, foreign keys; BEGIN / BEGIN IMMEDIATE emitted by us, not the driver.

    Args:
        engine: a SQLite engine; each new connection gets the pragmas, each transaction
            starts with ``BEGIN`` plus the mode its connection's execution options ask for.
    """

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


def install_postgres_listeners(engine: Engine) -> None:
    """Writers' advisory lock on PostgreSQL: each write transaction begins with ``pg_advisory_xact_lock``.

    Args:
        engine: a PostgreSQL engine; transactions of connections whose execution options
            carry the write option wait for :data:`WRITE_LOCK_KEY`, which PostgreSQL
            releases at COMMIT or ROLLBACK.
    """

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Any) -> None:
        if conn.get_execution_options().get(_WRITE_OPTION):
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({WRITE_LOCK_KEY})")


@lru_cache(maxsize=1)
def _script() -> ScriptDirectory:
    """The Alembic revisions shipped with this package (parsed once per process)."""
    return ScriptDirectory.from_config(alembic_config("sqlite://"))


class Database:
    """An open library database, migrated to the newest schema revision.

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
        self._url = parse_url(url)
        self._sqlite_path = sqlite_file(self._url)
        self._is_sqlite = self._url.get_backend_name() == "sqlite"
        self._is_postgres = self._url.get_backend_name() == "postgresql"
        if self._sqlite_path is not None:
            check_sqlite_path(self._sqlite_path)
        try:
            self._engine = create_engine(self._url, **self._engine_options())
        except ImportError as e:
            reason = redact_credentials(one_line(e))
            raise StoreError(f"cannot open database {self.location}: {reason}{self._driver_hint()}") from None
        except ArgumentError as e:
            raise StoreError(f"cannot open database {self.location}: {redact_credentials(one_line(e))}") from None
        if self._is_sqlite:
            install_sqlite_listeners(self._engine)
            self._write_engine = self._engine.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"})
        elif self._is_postgres:
            install_postgres_listeners(self._engine)
            self._write_engine = self._engine.execution_options(**{_WRITE_OPTION: True})
        else:
            self._write_engine = self._engine
        try:
            self._migrate()
        except StoreError:
            self._engine.dispose()
            raise
        except DBAPIError as e:
            self._engine.dispose()
            reason = one_line(e.orig) if e.orig is not None else one_line(e)
            raise StoreError(f"cannot open database {self.location}: {redact_credentials(reason)}") from None
        except (SQLAlchemyError, CommandError) as e:
            self._engine.dispose()
            raise StoreError(f"cannot migrate database {self.location}: {redact_credentials(one_line(e))}") from None

    def _engine_options(self) -> dict[str, Any]:
        """``create_engine`` options: PostgreSQL fails fast on an unreachable server (10 s, not the OS's minutes)."""
        if self._is_postgres:
            args = {} if "connect_timeout" in self._url.query else {"connect_timeout": 10}  # the URL's own wins
            return {"connect_args": args, "pool_pre_ping": True}
        return {}

    def _driver_hint(self) -> str:
        """What to install when the URL's driver is missing (PostgreSQL needs psycopg 3)."""
        if self._url.drivername == "postgresql+psycopg":
            return " (the PostgreSQL driver is missing: pip install 'lesson-arena[postgres]')"
        return ""

    # ----------------------------------------------------------------- migrations

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
                f"{self.location} is a database but not a Lesson Arena library (it has tables such as "
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
                                f"cannot migrate database {self.location}: the migration would break "
                                "foreign keys; nothing was changed"
                            )
            finally:
                if self._is_sqlite and not conn.invalidated:
                    conn.connection.dbapi_connection.execute("PRAGMA foreign_keys=ON")

    def _check_revisions(self, current: Sequence[str], known: set[str], head: str | None) -> None:
        unknown = [rev for rev in current if rev not in known]
        if unknown:
            raise StoreError(
                f"database {self.location} has schema revision {', '.join(unknown)}, which this version "
                f"of lesson-arena does not know (newest known: {head}); upgrade lesson-arena or use another database"
            )

    # ----------------------------------------------------------------- properties

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of the database (password included; don't print it)."""
        return self._url.render_as_string(hide_password=False)

    @property
    def sqlite_path(self) -> Path | None:
        """The SQLite database file, or None for other backends and in-memory SQLite."""
        return self._sqlite_path

    @property
    def is_sqlite(self) -> bool:
        """Whether the backend is SQLite (file or in-memory): FTS5 and the pragmas apply."""
        return self._is_sqlite

    @property
    def is_postgres(self) -> bool:
        """Whether the backend is PostgreSQL: its own full-text search (tsvector, GIN) and the writers' advisory lock apply."""
        return self._is_postgres

    @property
    def server_slug(self) -> str:
        """A file-name-safe name of a server's library, ``<host>-<port>-<database>`` (``library`` for SQLite):
        what local files that belong to it (checkpoints, adapters) are named after, so libraries of
        different servers used from one directory never share them."""
        if self._is_sqlite:
            return "library"
        u = self._url
        raw = f"{u.host or 'localhost'}-{u.port or 'default'}-{u.database or 'db'}"
        return re.sub(r"[^\w.-]", "_", raw).lstrip(".") or "library"

    @property
    def location(self) -> str:
        """The database as error messages name it: the SQLite file, else the URL without password."""
        if self._sqlite_path is not None:
            return str(self._sqlite_path)
        return redact_credentials(self._url.render_as_string(hide_password=True))

    # ----------------------------------------------------------------- sessions

    def read(self) -> Session:
        """A read session (unit of work) for the repositories in :mod:`lessons.library`; close it after use."""
        return Session(self._engine)

    def write(self) -> Session:
        """A write session for the repositories in :mod:`lessons.library`: its transaction starts with BEGIN IMMEDIATE on SQLite."""
        return Session(self._write_engine)

    # ----------------------------------------------------------------- close

    def close(self) -> None:
        """Close every pooled connection; the database must not be used afterwards."""
        self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({redact_credentials(self._url.render_as_string(hide_password=True))!r})"
