"""The lesson life cycle replayed from the audit log: a lesson's status at any past time.

The inverse of the writes: :class:`lessons.library.curation.Curator` records every status
change it makes (RETIRE, PROMOTE, and a MERGE that retires its sources) and
:meth:`lessons.library.adapters.AdapterStore.register_adapter` records DISTILL, each as a
``lesson_events`` row; :func:`replay_status` reads those rows back into a
:class:`StatusHistory`. A change to what those writers record changes this module too.
Kept out of ``curation.py`` (already over ~500 lines) because it reads the events two
writers produce and writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from lessons.db.schema import LESSON_STATUSES

STATUS_OPS = ("RETIRE", "PROMOTE", "DISTILL")  # ops whose event holds the old and new status in before / after
REPLAY_OPS = ("ADD", "MERGE", *STATUS_OPS)  # the events :func:`replay_status` reads (MERGE: only a source's, with a target)


class StatusEvent(Protocol):
    """What :func:`replay_status` reads of an audit-log event (:class:`lessons.library.store.EventInfo` has it)."""

    op: str
    before: str | None
    after: str | None
    target: Any  # the lesson a MERGE source was merged into (None: no target)
    episode_id: int | None
    created_at: datetime


def added_status(episode_id: int | None) -> str:
    """The status an ADD gives: ``candidate`` for a teacher's lesson (from an episode), ``active`` for a hand-written one."""
    return "candidate" if episode_id is not None else "active"


@dataclass(frozen=True)
class StatusHistory:
    """A lesson's status over time, replayed from its audit log by :func:`replay_status`."""

    initial: str  # the status from creation until the first change
    changes: tuple[tuple[datetime, str], ...] = ()  # (when, new status), oldest first

    def at(self, when: datetime) -> str:
        """The status at ``when`` (the changes made at or before it applied)."""
        status = self.initial
        for at, new in self.changes:
            if at <= when:
                status = new
        return status


def replay_status(current: str, events: Iterable[StatusEvent]) -> StatusHistory:
    """A lesson's status history from its audit log, by the rules its writers record it with.

    RETIRE / PROMOTE / DISTILL events hold the old status in ``before`` and the new one in
    ``after``; a MERGE with a target retires its source (``before``/``after`` are texts). The
    status before the first change is that change's ``before``; when the first change is a
    MERGE, the status its ADD gave (:func:`added_status`), or else ``current``. A lesson that
    never changed status always had ``current``.

    Args:
        current: the lesson's status now.
        events: the lesson's events, oldest first (others than :data:`REPLAY_OPS` are skipped).

    Returns:
        The replayed :class:`StatusHistory`.
    """
    initial: str | None = None
    changes: list[tuple[datetime, str]] = []
    for ev in events:
        if ev.op == "ADD":
            if initial is None:
                initial = added_status(ev.episode_id)
            continue
        if ev.op == "MERGE":
            if ev.target is None:  # the event of the lesson a merge made: no status change
                continue
            new = "retired"
        elif ev.op in STATUS_OPS:
            new = ev.after
        else:
            continue
        if new not in LESSON_STATUSES:
            continue
        if not changes and ev.op != "MERGE" and ev.before in LESSON_STATUSES:
            initial = ev.before
        changes.append((ev.created_at, new))
    if not changes:
        return StatusHistory(current)
    return StatusHistory(initial if initial is not None else current, tuple(changes))
