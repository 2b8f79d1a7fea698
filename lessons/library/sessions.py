"""Sessions and their tasks: :class:`SessionRepository`.

A session is one ``arena run`` (its name, config, seed, status and summary); its tasks are
stored once per session with their reference answers (for the critic and audits only).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from lessons.db.schema import EpisodeRow, SessionLeaseRow, SessionRow, TaskRow, utcnow
from lessons.library.leases import DEFAULT_LEASE_TTL_S, LeaseOwner, database_now, lease_info, take_lease
from lessons.library.records import SessionInfo, StoreError, TaskInfo, TaskLike
from lessons.library.repository import Repository
from lessons.vocab import SESSION_STATUSES, SPLITS


def require_session(s: Session, session_id: int) -> SessionRow:
    """The row of session ``session_id`` in the open session ``s``.

    Raises:
        StoreError: no session with this id.
    """
    row = s.get(SessionRow, session_id)
    if row is None:
        raise StoreError(f"no session with id {session_id}")
    return row


def _session_info(row: SessionRow, s: Session) -> SessionInfo:
    lease = s.get(SessionLeaseRow, row.id)
    return SessionInfo(
        id=row.id,
        name=row.name,
        config=dict(row.config or {}),
        seed=row.seed,
        status=row.status,
        created_at=row.created_at,
        finished_at=row.finished_at,
        summary=dict(row.summary) if row.summary is not None else None,
        lease=None if lease is None else lease_info(lease, database_now(s)),
    )


class SessionRepository(Repository):
    """Sessions (create, look up, set status, name) and their stored tasks."""

    def create_session(self, name: str, config: dict[str, Any], seed: int, owner: LeaseOwner | None = None,
                       lease_ttl_s: float = DEFAULT_LEASE_TTL_S) -> int:
        """Create a session in status ``"running"``, with ``owner``'s lease in the same transaction.

        Args:
            name: unique session name (e.g. from :meth:`new_session_name`).
            config: the session's configuration, JSON-serialisable.
            seed: the session's random seed.
            owner: the process that will run it (:class:`lessons.library.leases.LeaseOwner`): it holds the
                session's lease from the moment the row exists, so no ``--resume`` can slip in between; None: no lease.
            lease_ttl_s: seconds the lease lasts without a heartbeat.

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
            if owner is not None:
                take_lease(s, row, owner, lease_ttl_s)
            return row.id

    def get_session(self, name: str) -> SessionInfo | None:
        """The session called ``name``, or None."""
        with self.read() as s:
            row = s.scalar(select(SessionRow).where(SessionRow.name == name))
            return _session_info(row, s) if row is not None else None

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
            row = require_session(s, session_id)
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

    def latest_session_with_episodes(self) -> str | None:
        """The name of the newest session (by id) that has at least one recorded episode, or None."""
        with self.read() as s:
            return s.scalar(
                select(SessionRow.name)
                .join(EpisodeRow, EpisodeRow.session_id == SessionRow.id)
                .order_by(SessionRow.id.desc())
                .limit(1)
            )

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
                TaskInfo(name, t.task_key, t.family, t.split, t.question, t.answer, t.source, dict(t.meta or {}))
                for t, name in s.execute(q).all()
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
            require_session(s, session_id)
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
