"""Session leases: one owner per session, taken atomically in the database: :class:`LeaseRepository`.

A lease is one ``session_leases`` row (owner id, host, pid, when taken, last heartbeat, expiry).
Taking it reads the row and writes it in ONE write transaction, and write transactions of a
library are serialised on both backends (``BEGIN IMMEDIATE`` on SQLite, the writers' advisory
lock on PostgreSQL: :mod:`lessons.db.engine`), so of two processes that try at once exactly one
sees no live lease and takes it; the other sees the live owner. This is the classic lease of
Gray & Cheriton (1989): the owner renews it (heartbeat) well before it expires and deletes it
when it ends; an owner that died stops renewing, and after the expiry the next owner replaces
the row.

Times are the database's clock on PostgreSQL (``now()``: processes on several hosts compare one
clock) and this host's on SQLite (a file every process reaches on one machine).
"""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from lessons.db.schema import SessionLeaseRow, SessionRow, utcnow
from lessons.library.records import DEFAULT_LEASE_TTL_S, LeaseHeld, LeaseInfo, LeaseLost, StoreError
from lessons.library.repository import Repository


@dataclass(frozen=True)
class LeaseOwner:
    """Who takes a lease: a random id per process plus the host and pid a refusal names."""

    owner: str  # "<host>:<pid>:<hex>", unique per process (a reused pid gets another id)
    host: str
    pid: int

    @classmethod
    def this_process(cls) -> LeaseOwner:
        """The owner id of this process (host name, pid and 48 random bits)."""
        host, pid = socket.gethostname()[:200], os.getpid()
        return cls(f"{host}:{pid}:{secrets.token_hex(6)}", host, pid)


def lease_info(row: SessionLeaseRow, now: datetime) -> LeaseInfo:
    """The :class:`LeaseInfo` of a ``session_leases`` row read at ``now`` (the database's clock: :func:`database_now`)."""
    return LeaseInfo(row.session_id, row.owner, row.host, row.pid, row.acquired_at, row.renewed_at, row.expires_at, now)


def database_now(s: Session) -> datetime:
    """The current time, UTC: the server's clock on PostgreSQL, this host's elsewhere (SQLite)."""
    if s.get_bind().dialect.name == "postgresql":
        now = s.scalar(select(func.now()))
        return now.astimezone(UTC)
    return utcnow()


def take_lease(s: Session, session: SessionRow, who: LeaseOwner, ttl_s: float) -> LeaseInfo:
    """Take or renew the lease of ``session`` inside the open WRITE transaction ``s``.

    Args:
        s: a write session in a transaction (serialised with every other writer of the library).
        session: the session's row.
        who: the taking process.
        ttl_s: seconds until the lease expires without a heartbeat.

    Returns:
        The lease now held by ``who``.

    Raises:
        LeaseHeld: another owner's lease has not expired (it names host, pid, since, expiry).
    """
    now = database_now(s)
    expires = now + timedelta(seconds=ttl_s)
    row = s.get(SessionLeaseRow, session.id)
    if row is not None and row.owner != who.owner and row.expires_at > now:
        held = lease_info(row, now)
        raise LeaseHeld(f"session {session.name!r} is being run by {held.describe()}; wait for it to end, "
                        "or stop that process and resume after its lease expires", held)
    if row is None:
        row = SessionLeaseRow(session_id=session.id, owner=who.owner, host=who.host, pid=who.pid,
                              acquired_at=now, renewed_at=now, expires_at=expires)
        s.add(row)
    else:
        if row.owner != who.owner:  # a dead owner's expired lease: taken over
            row.owner, row.host, row.pid, row.acquired_at = who.owner, who.host, who.pid, now
        row.renewed_at, row.expires_at = now, expires
    s.flush()
    return lease_info(row, now)


class LeaseRepository(Repository):
    """The leases of sessions: acquire, renew (heartbeat), release, read."""

    def acquire_lease(self, session_id: int, who: LeaseOwner, ttl_s: float = DEFAULT_LEASE_TTL_S) -> LeaseInfo:
        """Take the lease of session ``session_id`` for ``who`` (renew it when ``who`` holds it already).

        Args:
            session_id: the session's id.
            who: the taking process (:meth:`LeaseOwner.this_process`).
            ttl_s: seconds the lease lasts without a heartbeat (> 0).

        Returns:
            The lease ``who`` holds now.

        Raises:
            LeaseHeld: another process holds a live lease (nothing is written).
            StoreError: no such session.
            ValueError: ``ttl_s`` ≤ 0.
        """
        if ttl_s <= 0:
            raise ValueError(f"a lease lasts more than 0 seconds, not {ttl_s}")
        with self.write() as s, s.begin():
            row = s.get(SessionRow, session_id)
            if row is None:
                raise StoreError(f"no session with id {session_id}")
            return take_lease(s, row, who, ttl_s)

    def renew_lease(self, session_id: int, who: LeaseOwner, ttl_s: float = DEFAULT_LEASE_TTL_S) -> LeaseInfo:
        """The heartbeat: push the expiry of ``who``'s lease to ``ttl_s`` seconds from now.

        A lease that expired while nobody took it over is still ``who``'s and is renewed.

        Raises:
            LeaseLost: the lease is gone or another owner holds it now (nothing is written).
        """
        with self.write() as s, s.begin():
            row = s.get(SessionLeaseRow, session_id)
            if row is None or row.owner != who.owner:
                now = database_now(s)
                whom = f"by {lease_info(row, now).describe()}" if row is not None else "and released"
                raise LeaseLost(f"the lease of session id {session_id} was taken over {whom}; this process stopped")
            now = database_now(s)
            row.renewed_at, row.expires_at = now, now + timedelta(seconds=ttl_s)
            return lease_info(row, now)

    def release_lease(self, session_id: int, who: LeaseOwner) -> bool:
        """Delete ``who``'s lease of session ``session_id``; another owner's is left alone.

        Returns:
            Whether a lease of ``who`` was deleted.
        """
        with self.write() as s, s.begin():
            done = s.execute(delete(SessionLeaseRow).where(SessionLeaseRow.session_id == session_id,
                                                           SessionLeaseRow.owner == who.owner))
            return bool(done.rowcount)

    def session_lease(self, session_id: int) -> LeaseInfo | None:
        """The lease of session ``session_id`` as it is now (live or expired), or None."""
        with self.read() as s:
            row = s.get(SessionLeaseRow, session_id)
            return lease_info(row, database_now(s)) if row is not None else None
