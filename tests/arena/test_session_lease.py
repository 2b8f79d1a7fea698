"""One session has one owner (issue 32 §1), with real `arena run` processes on SQLite and PostgreSQL.

Two ``arena run --resume`` of one session at once: exactly one refuses, with exit 2 and one line
naming the live owner, having written nothing; the other finishes, and the library then holds
exactly the rows of an uninterrupted run. A killed run's lease is refused while it lasts and
taken over once it expires.
"""

from __future__ import annotations

import signal
import time

import pytest
from fault_scripts import content
from db_scripts import finish, run_args, slow_server, start_run, table_counts, wait_for_episodes, write_tasks

from lessons.library.store import LessonStore


@pytest.fixture
def baseline(fault_server, tmp_path_factory):
    """Row counts of one uninterrupted run of the test's command (in a library of its own, same backend)."""
    def counts(db: str, tasks) -> dict[str, int]:
        cwd = tmp_path_factory.mktemp("baseline")
        code, _, err = finish(start_run(fault_server(["normal"], content=content), run_args(db, tasks, "--session", "s"),
                                        cwd))
        assert code == 0, err[-2000:]
        return table_counts(db)

    return counts


def _other_library(request, library_url: str, tmp_path) -> str:
    if library_url.startswith("postgresql"):
        server = request.getfixturevalue("postgres_server")
        name, url = server.create()
        request.addfinalizer(lambda: server.drop(name))
        return url
    return str(tmp_path / "baseline.db")


def test_two_resumes_at_once_one_refuses_and_the_rows_equal_an_uninterrupted_run(
        fault_server, library_url, tmp_path, request, baseline):
    tasks = write_tasks(tmp_path / "adding.jsonl")
    expected = baseline(_other_library(request, library_url, tmp_path), tasks)
    server = slow_server(fault_server)
    first = start_run(server, run_args(library_url, tasks, "--session", "s"), tmp_path)
    wait_for_episodes(library_url, "s", 1, first)
    first.send_signal(signal.SIGTERM)  # stops like Ctrl-C: marked interrupted, lease released
    code, _, err = finish(first)
    assert code == 130, err[-2000:]

    a, b = (start_run(server, run_args(library_url, tasks, "--resume", "s"), tmp_path) for _ in range(2))
    results = {p.pid: finish(p) for p in (a, b)}
    refused = [pid for pid, (code, _, _) in results.items() if code == 2]
    done = [pid for pid, (code, _, _) in results.items() if code == 0]
    assert len(refused) == 1 and len(done) == 1, {pid: (c, e[-600:]) for pid, (c, _, e) in results.items()}
    _, out, err = results[refused[0]]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and out == "", err
    assert lines[0].startswith("arena: error: session 's' is being run by host ")
    assert f" pid {done[0]} since " in lines[0] and "lease expires " in lines[0]
    assert "Traceback" not in err
    assert table_counts(library_url) == expected  # no row twice, none missing
    with LessonStore(library_url) as st:
        info = st.get_session("s")
        assert info.status == "finished" and info.lease is None  # released at the end


def test_a_killed_runs_lease_is_refused_until_it_expires_then_resume_takes_over(
        fault_server, library_url, tmp_path, request, baseline):
    tasks = write_tasks(tmp_path / "adding.jsonl")
    expected = baseline(_other_library(request, library_url, tmp_path), tasks)
    server = slow_server(fault_server)
    ttl = 8.0  # longer than a resume's start-up (imports, model checks) on a quiet machine
    first = start_run(server, run_args(library_url, tasks, "--session", "s", "--lease-ttl", str(ttl)), tmp_path)
    wait_for_episodes(library_url, "s", 1, first)
    first.kill()  # SIGKILL: no clean-up at all, the lease stays behind
    first.wait()
    killed_at = time.monotonic()

    code, out, err = finish(start_run(server, run_args(library_url, tasks, "--resume", "s"), tmp_path))
    with LessonStore(library_url) as st:
        info = st.get_session("s")
    if code == 0:  # a loaded machine: the resume's start-up outlasted the dead owner's lease, so it took over, rightly
        assert time.monotonic() - killed_at >= ttl and info.status == "finished", (code, err[-2000:])
        assert table_counts(library_url) == expected
        return
    if time.monotonic() - killed_at < ttl - 0.5:  # still within the dead owner's lease
        assert code == 2 and len(err.strip().splitlines()) == 1 and f" pid {first.pid} since " in err, err
        assert info.shown_status == "running"
    while True:
        with LessonStore(library_url) as st:
            info = st.get_session("s")
        if info.shown_status != "running":
            break
        assert time.monotonic() - killed_at < ttl + 5, "the dead owner's lease never expired"
        time.sleep(0.2)
    assert (info.status, info.shown_status) == ("running", "stopped")  # crashed: never left "running" for ever

    resumed = start_run(server, run_args(library_url, tasks, "--resume", "s"), tmp_path)  # no --lease-ttl given
    lease = None
    while lease is None or lease.pid != resumed.pid:  # until the resumed run holds the lease
        assert resumed.poll() is None, resumed.communicate()[1][-2000:]
        with LessonStore(library_url) as st:
            lease = st.get_session("s").lease
        time.sleep(0.05)
    assert (lease.expires_at - lease.renewed_at).total_seconds() == pytest.approx(ttl)  # the session's own, not 60 s
    code, out, err = finish(resumed)
    assert code == 0, err[-2000:]
    assert table_counts(library_url) == expected


def test_a_run_whose_lease_was_taken_over_leaves_the_session_to_its_new_owner(tmp_path):
    """A new user's trial: the old owner, stopping on LeaseLost, marked the session `failed` under its new owner."""
    import json
    import sqlite3

    from langgraph.checkpoint.memory import InMemorySaver

    from agents.backends.fake import FakePolicy
    from arena.config import SessionConfig
    from arena.episode.context import Roles
    from arena.session.lease import SessionLease
    from arena.session.runner import run_session
    from arena.tasks.sources import load_tasks
    from lessons.library.leases import LeaseOwner
    from lessons.library.records import LeaseLost

    rows = [{"question": f"Compute {10 + i} plus {20 + i}.", "answer": str(30 + 2 * i), "family": "adding"} for i in range(6)]
    (tmp_path / "adding.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    db = tmp_path / "arena.db"
    cfg = SessionConfig(db=str(db), families=[], tasks_file=tmp_path / "adding.jsonl", train_tasks=2, heldout_tasks=2,
                        rounds=1, rollouts=2, utility_every=0, hint_modes=[])
    splits = load_tasks([], cfg.tasks_file, cfg.train_tasks, cfg.heldout_tasks, cfg.seed)
    roles = Roles(FakePolicy(lambda m, i: "<answer>0</answer>"),
                  FakePolicy(lambda m, i: json.dumps({"analysis": "x", "add": [], "tags": []})))
    store = LessonStore(str(db))
    lease, other = SessionLease(store), LeaseOwner("elsewhere:7:0", "elsewhere", 7)

    def taken_over(final) -> None:  # this process was suspended past its lease; a --resume elsewhere took it
        sid = store.get_session("s").id
        with sqlite3.connect(db) as c:
            c.execute("update session_leases set expires_at = '2000-01-01 00:00:00.000000' where session_id = ?", (sid,))
        store.acquire_lease(sid, other, ttl_s=3600)
        lease.lost = LeaseLost("taken over")  # what the heartbeat records at its next beat

    try:
        with pytest.raises(LeaseLost):
            run_session(cfg, store, roles, splits, "s", checkpointer=InMemorySaver(), on_episode=taken_over, lease=lease)
        info = store.get_session("s")
        assert info.status == "running" and info.lease is not None and info.lease.owner == other.owner
    finally:
        lease.release()
        store.close()
