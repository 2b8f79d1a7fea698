"""Session leases (issue 32 §1): one owner per session, taken atomically on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import time

import pytest

from lessons.library.leases import LeaseOwner
from lessons.library.store import LeaseHeld, LeaseLost, LessonStore


def owner(n: int) -> LeaseOwner:
    return LeaseOwner(f"host{n}:{100 + n}:abc", f"host{n}", 100 + n)


def test_a_second_owner_is_refused_with_the_live_owner_named_and_nothing_written(store: LessonStore) -> None:
    sid = store.create_session("s", {}, 0, owner=owner(1), lease_ttl_s=30)
    before = store.session_lease(sid)
    with pytest.raises(LeaseHeld) as e:
        store.acquire_lease(sid, owner(2), ttl_s=30)
    msg = str(e.value)
    assert "host host1 pid 101 since " in msg and "lease expires " in msg and "'s'" in msg
    assert "\n" not in msg
    after = store.session_lease(sid)
    assert (after.owner, after.renewed_at, after.expires_at) == (before.owner, before.renewed_at, before.expires_at)
    assert store.get_session("s").shown_status == "running"


def test_the_owner_renews_and_an_expired_lease_is_taken_over_and_the_old_owner_learns_it(store: LessonStore) -> None:
    sid = store.create_session("s", {}, 0, owner=owner(1), lease_ttl_s=0.5)
    first = store.session_lease(sid)
    again = store.acquire_lease(sid, owner(1), ttl_s=0.5)  # the owner itself: renewed, not refused
    assert again.acquired_at == first.acquired_at and again.expires_at >= first.expires_at
    time.sleep(0.7)
    assert store.get_session("s").shown_status == "stopped"  # running, but nobody alive owns it
    taken = store.acquire_lease(sid, owner(2), ttl_s=30)
    assert (taken.host, taken.pid) == ("host2", 102) and taken.live
    with pytest.raises(LeaseLost, match="host host2 pid 102"):
        store.renew_lease(sid, owner(1), ttl_s=30)
    assert not store.release_lease(sid, owner(1))  # another's lease is left alone
    assert store.session_lease(sid).owner == owner(2).owner
    assert store.release_lease(sid, owner(2))
    assert store.session_lease(sid) is None and store.get_session("s").shown_status == "stopped"
    store.set_session_status(sid, "finished")
    assert store.get_session("s").shown_status == "finished"


def test_a_session_created_without_an_owner_shows_stopped_while_running(store: LessonStore) -> None:
    store.create_session("s", {}, 0)
    assert store.get_session("s").status == "running" and store.get_session("s").shown_status == "stopped"


def test_owners_racing_for_one_lease_get_it_exactly_once(library_url: str) -> None:
    """Eight stores (eight connection pools) try at the same instant: one wins, seven see it held."""
    with LessonStore(library_url) as st:
        sid = st.create_session("s", {}, 0)
    stores = [LessonStore(library_url) for _ in range(8)]
    start = threading.Barrier(len(stores))
    won: list[int] = []
    refused: list[int] = []

    def take(i: int) -> None:
        start.wait()
        try:
            stores[i].acquire_lease(sid, owner(i), ttl_s=30)
            won.append(i)
        except LeaseHeld:
            refused.append(i)

    threads = [threading.Thread(target=take, args=(i,)) for i in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert len(won) == 1 and len(refused) == 7
        assert stores[0].session_lease(sid).owner == owner(won[0]).owner
    finally:
        for st in stores:
            st.close()
