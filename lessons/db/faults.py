"""Database faults, sorted into the ones that pass (retry) and the ones that stay (stop with one line).

A *transient* fault is a lost connection: the server restarted or was failed over, the
connection was reset. SQLAlchemy marks such an error ``connection_invalidated`` (it saw the
driver's disconnect) and its pool re-connects on the next checkout (``pool_pre_ping``,
SQLAlchemy docs "Dealing with Disconnects"); psycopg reports it as an ``OperationalError`` of
SQLSTATE class 08 (connection exception) or 57P01–57P03 (the server shutting down, crashed,
starting up), or with no SQLSTATE when it could not connect at all. A serialization failure or
deadlock (40001, 40P01) also passes when the unit of work is run again.

A *persistent* fault needs a person: a full disk (SQLite ``SQLITE_FULL``, PostgreSQL class 53),
a read-only file or transaction (``SQLITE_READONLY``, 25006), a permission (``SQLITE_PERM``,
``SQLITE_CANTOPEN``, 42501), an I/O error or a damaged file. :func:`classify` turns either into
a :class:`StoreFault` whose message is one line naming the library that reported it (``sqlite3``,
``psycopg``) and what happened.

The drivers are recognised by their exceptions' module, so psycopg need not be installed.
"""

from __future__ import annotations

import errno
import sqlite3

from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, ProgrammingError

from lessons.credentials import redact_credentials
from lessons.library.records import StoreError

TRANSIENT_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "40001", "40P01"})  # shutdown, crash, starting up; retry
PERSISTENT_SQLSTATE_CLASSES = ("53", "58", "XX")  # insufficient resources (disk full), system error, internal error
PERSISTENT_SQLSTATES = frozenset({"42501", "25006"})  # insufficient privilege, read-only transaction
# SQLite primary result codes a person must fix (sqlite.org/rescode.html)
SQLITE_PERSISTENT_CODES = {
    sqlite3.SQLITE_FULL: "database or disk is full",
    sqlite3.SQLITE_READONLY: "attempt to write a readonly database",
    sqlite3.SQLITE_PERM: "access permission denied",
    sqlite3.SQLITE_CANTOPEN: "unable to open database file",
    sqlite3.SQLITE_IOERR: "disk I/O error",
    sqlite3.SQLITE_CORRUPT: "database disk image is malformed",
    sqlite3.SQLITE_NOTADB: "file is not a database",
}
PERSISTENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO})


class StoreFault(StoreError):
    """A database (or its disk) failed under the session; one line naming the library and what happened.

    Attributes:
        library: who reported it: ``sqlite3``, ``psycopg`` or ``the operating system``.
        reason: the driver's message, one line, credentials masked.
        transient: a lost connection that may pass (retried); False: it needs a person.
    """

    def __init__(self, library: str, reason: str, transient: bool) -> None:
        self.library, self.reason, self.transient = library, reason, transient
        kind = "lost the connection to the database" if transient else "database fault"
        super().__init__(f"{kind} ({library}): {reason}")


DAMAGED_FILE_REASONS = tuple(SQLITE_PERSISTENT_CODES[c] for c in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB))


def is_damaged_file(fault: StoreFault) -> bool:
    """Whether ``fault`` says the SQLite file itself is damaged (SQLITE_CORRUPT, SQLITE_NOTADB): bad input to
    refuse, not a fault to resume past (a resume reads the same damaged pages)."""
    return fault.library == "sqlite3" and any(r in fault.reason for r in DAMAGED_FILE_REASONS)


def _one_line(x: object) -> str:
    return redact_credentials(" ".join(str(x).split()))


def _driver_error(exc: BaseException) -> BaseException | None:
    """The driver's own exception: ``exc.orig`` of a SQLAlchemy error, or ``exc`` when it is one of sqlite3 / psycopg."""
    if isinstance(exc, DBAPIError):
        return exc.orig
    if type(exc).__module__.split(".")[0] in ("sqlite3", "psycopg"):
        return exc
    return None


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a lost connection that running the unit of work again may get past (module docstring).

    Args:
        exc: any exception.
    """
    if isinstance(exc, StoreFault):
        return exc.transient
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    orig = _driver_error(exc)
    if orig is None or type(orig).__module__.split(".")[0] != "psycopg":
        return False  # SQLite has no connection to lose; "database is locked" already waited busy_timeout
    state = getattr(orig, "sqlstate", None)
    if state is None:  # could not connect at all (refused, timed out, closed unexpectedly)
        return type(orig).__name__ in ("OperationalError", "InterfaceError")
    return state.startswith("08") or state in TRANSIENT_SQLSTATES


def classify(exc: BaseException) -> StoreFault | None:
    """The :class:`StoreFault` that ``exc`` is, or None when it is no database or disk fault (a bug stays a bug).

    Args:
        exc: any exception: a SQLAlchemy ``DBAPIError``, a raw ``sqlite3`` / ``psycopg`` error (LangGraph's
            checkpoint file is written through ``sqlite3`` directly) or an ``OSError``.

    Returns:
        A transient fault (:func:`is_transient`), a persistent one (a full disk, a read-only file, a
        permission, an I/O error, a damaged file), or None — integrity, programming and data errors
        included: those are ours to fix, not the user's.
    """
    if isinstance(exc, StoreFault):
        return exc
    if isinstance(exc, (IntegrityError, ProgrammingError, DataError)):
        return None
    orig = _driver_error(exc)
    if orig is not None:
        library = type(orig).__module__.split(".")[0]
        reason = _one_line(orig) or type(orig).__name__
        if is_transient(exc):
            return StoreFault(library, reason, transient=True)
        if library == "sqlite3":
            code = getattr(orig, "sqlite_errorcode", None)
            known = SQLITE_PERSISTENT_CODES.get(code & 0xFF) if code is not None else None
            if known is None and not any(m in reason for m in SQLITE_PERSISTENT_CODES.values()):
                return None
            return StoreFault(library, reason, transient=False)
        state = getattr(orig, "sqlstate", None) or ""
        if state in PERSISTENT_SQLSTATES or state.startswith(PERSISTENT_SQLSTATE_CLASSES):
            return StoreFault(library, reason, transient=False)
        return None
    if isinstance(exc, OSError) and exc.errno in PERSISTENT_ERRNOS:
        return StoreFault("the operating system", _one_line(exc), transient=False)
    return None
