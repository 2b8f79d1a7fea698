"""The lease a running session holds (issue 32 §1): taken before any work, renewed by a heartbeat thread, released at the end.

:class:`SessionLease` takes the session's lease in the database
(:class:`lessons.library.leases.LeaseRepository`), so a second ``arena run --resume`` of the same
session, on this host or another, is refused while this process is alive, and a process that
died leaves a lease that expires after ``ttl_s`` seconds, after which ``--resume`` takes over.

Why a heartbeat *thread* rather than renewals at step boundaries: a session's steps are not
bounded in time — loading a model, one held-out evaluation of 128 tasks, a sleep's LoRA training
or a reflection on a slow endpoint each take minutes with no boundary in between, and a renewal
only there would need a TTL longer than the longest step, so a crashed run would stay
"running" for that long. The thread renews every ``ttl_s / 4`` seconds whatever the main thread
does (torch, llama.cpp and HTTP clients release the GIL while they work). A renewal that fails
for a moment (the database restarting) is tried again at the next beat; a renewal that finds
the lease taken by another owner (this process was suspended past its expiry) records the loss,
and the runner stops at its next step (:meth:`SessionLease.check`) before writing more.
"""

from __future__ import annotations

import logging
import threading

from lessons.library.leases import DEFAULT_LEASE_TTL_S, LeaseOwner
from lessons.library.records import LeaseInfo, LeaseLost
from lessons.library.store import LessonStore

log = logging.getLogger(__name__)


class SessionLease:
    """This process's lease of one session, with its heartbeat.

    Args:
        store: the open library.
        ttl_s: seconds the lease lasts without a heartbeat (the wait before a crashed run can be resumed).
        owner: who holds it; default :meth:`LeaseOwner.this_process`.

    Raises:
        ValueError: ``ttl_s`` ≤ 0.
    """

    def __init__(self, store: LessonStore, ttl_s: float = DEFAULT_LEASE_TTL_S, owner: LeaseOwner | None = None) -> None:
        if ttl_s <= 0:
            raise ValueError(f"--lease-ttl must be above 0 seconds, got {ttl_s}")
        self.store, self.ttl_s = store, ttl_s
        self.owner = owner or LeaseOwner.this_process()
        self.session_id: int | None = None  # the session held (None: none yet, or released)
        self.lost: LeaseLost | None = None  # set by the heartbeat when another owner took the lease
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self, session_id: int) -> LeaseInfo:
        """Take (or, when held already, renew) the lease of ``session_id`` and start the heartbeat.

        Raises:
            lessons.library.records.LeaseHeld: another live process holds it (nothing is written).
            lessons.library.records.StoreError: no such session.
        """
        info = self.store.acquire_lease(session_id, self.owner, self.ttl_s)
        self._held(session_id)
        return info

    def create_session(self, name: str, config: dict, seed: int) -> int:
        """Create the session with this lease in one transaction (:meth:`SessionRepository.create_session`); start the heartbeat.

        Raises:
            lessons.library.records.StoreError: the name is taken.
        """
        session_id = self.store.create_session(name, config, seed, owner=self.owner, lease_ttl_s=self.ttl_s)
        self._held(session_id)
        return session_id

    def _held(self, session_id: int) -> None:
        self.session_id, self.lost = session_id, None
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._beat, name="session-lease", daemon=True)
            self._thread.start()

    def _beat(self) -> None:
        """Renew every ``ttl_s / 4`` seconds until stopped or lost; a failed renewal is retried at the next beat."""
        while not self._stop.wait(self.ttl_s / 4):
            sid = self.session_id
            if sid is None:
                continue
            try:
                self.store.renew_lease(sid, self.owner, self.ttl_s)
            except LeaseLost as e:
                self.lost = e
                return
            except Exception as e:  # noqa: BLE001 - the database is away for a moment: try at the next beat
                log.info("lease heartbeat of session id %s failed: %s", sid, " ".join(str(e).split()))

    def check(self) -> None:
        """Raise when the heartbeat found the lease taken over (call before each step's writes).

        Raises:
            lessons.library.records.LeaseLost: another owner holds the session now.
        """
        if self.lost is not None:
            raise self.lost

    def release(self) -> None:
        """Stop the heartbeat and delete the lease; a release the database refuses is logged (the lease then expires)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        sid, self.session_id = self.session_id, None
        if sid is None:
            return
        try:
            self.store.release_lease(sid, self.owner)
        except Exception as e:  # noqa: BLE001 - a full disk or a lost server: the lease expires in ttl_s instead
            log.info("could not release the lease of session id %s (it expires by itself): %s", sid,
                        " ".join(str(e).split()))
