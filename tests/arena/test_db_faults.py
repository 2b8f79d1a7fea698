"""Database faults under a running session (issue 32 §2), for real: a PostgreSQL restart, a full disk under SQLite.

A lost connection is retried with backoff (each retry a resume in the process) and the session
finishes with the rows of an uninterrupted run; a full disk ends the run with one line naming
the library, exit 3, nothing committed lost, and ``--resume`` completes once space is back.
"""

from __future__ import annotations

import errno
import os
import subprocess
import time
from pathlib import Path

import pytest
from db_scripts import PostgresCluster, finish, run_args, slow_server, start_run, table_counts, wait_for_episodes
from fault_scripts import content, write_tasks

from lessons.db.faults import StoreFault, classify, is_transient
from lessons.library.store import LessonStore


@pytest.fixture
def cluster():
    c = PostgresCluster()
    yield c
    c.close()


def test_a_postgresql_restart_mid_session_is_survived_with_the_rows_of_an_uninterrupted_run(
        cluster, fault_server, tmp_path):
    tasks = write_tasks(tmp_path / "adding.jsonl")
    (tmp_path / "base").mkdir()
    base = cluster.database("baseline")
    code, _, err = finish(start_run(fault_server(["normal"], content=content), run_args(base, tasks, "--session", "s"),
                                    tmp_path / "base"))
    assert code == 0, err[-2000:]
    expected = table_counts(base)

    db = cluster.database("library")
    run = start_run(slow_server(fault_server, 0.3), run_args(db, tasks, "--session", "s"), tmp_path)
    wait_for_episodes(db, "s", 1, run)
    cluster.stop()  # every connection of the run is closed under it
    time.sleep(2.0)  # the run goes on sampling; its next write finds no server
    cluster.start()
    code, _, err = finish(run)
    assert code == 0, err[-3000:]
    assert "Traceback" not in err
    assert table_counts(db) == expected
    with LessonStore(db) as st:
        assert st.get_session("s").status == "finished"


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MiB tmpfs at ``tmp_path/disk`` (as root); skips with the reason where mounting is not allowed."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root; this process is not root")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"mount -t tmpfs is not permitted here: {' '.join(proc.stderr.split())}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(directory: Path) -> Path:
    """Write a file in ``directory`` until the file system is full; the file."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as f:  # unbuffered: nothing left to flush on close
        for block in (65536, 512):  # then the last partial blocks
            try:
                while True:
                    f.write(b"\0" * block)
            except OSError as e:
                assert e.errno == errno.ENOSPC
    return filler


def test_a_full_disk_under_sqlite_stops_with_one_line_and_resume_completes_once_space_is_back(
        small_disk, fault_server, tmp_path):
    tasks = write_tasks(tmp_path / "adding.jsonl")
    (tmp_path / "base").mkdir()
    base = str(tmp_path / "base" / "arena.db")
    code, _, err = finish(start_run(fault_server(["normal"], content=content), run_args(base, tasks, "--session", "s"),
                                    tmp_path / "base"))
    assert code == 0, err[-2000:]
    expected = table_counts(base)

    db = str(small_disk / "arena.db")
    server = slow_server(fault_server, 0.3)
    run = start_run(server, run_args(db, tasks, "--session", "s", "--lease-ttl", "2"), tmp_path)
    wait_for_episodes(db, "s", 1, run)
    with LessonStore(db) as st:
        committed = table_counts(db)
        assert st.get_session("s").status == "running"
    filler = fill(small_disk)
    code, out, err = finish(run)
    errors = [line for line in err.splitlines() if line.startswith("arena: error:")]
    assert code == 3 and out == "" and "Traceback" not in err, err[-3000:]
    assert len(errors) == 1 and errors == [err.strip().splitlines()[-1]], err
    assert "database fault (sqlite3): database or disk is full" in errors[0], err
    assert f"arena run --db {db} --resume s" in errors[0]

    filler.unlink()  # the cause is gone
    after = table_counts(db)
    assert all(after[t] >= n for t, n in committed.items())  # nothing committed was lost
    time.sleep(2.5)  # a lease the full disk kept from being released expires (--lease-ttl 2)
    with LessonStore(db) as st:
        info = st.get_session("s")
    assert info.shown_status in ("failed", "stopped")  # marked, or (the mark could not be written) its lease ran out
    code, _, err = finish(start_run(server, run_args(db, tasks, "--resume", "s"), tmp_path))
    assert code == 0, err[-3000:]
    assert table_counts(db) == expected


# --------------------------------------------------------------------------- classification


def test_faults_are_sorted_into_lost_connections_and_ones_that_need_a_person(tmp_path):
    import sqlite3

    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import IntegrityError, OperationalError

    # a server that is not there: psycopg's connection failure, wrapped by SQLAlchemy, passes (retried)
    engine = create_engine("postgresql+psycopg://arena@127.0.0.1:1/x", connect_args={"connect_timeout": 2})
    with pytest.raises(OperationalError) as e:
        engine.connect()
    assert is_transient(e.value) and classify(e.value).transient and "psycopg" in str(classify(e.value))
    # a read-only SQLite file: needs a person, named by its library
    path = tmp_path / "ro.db"
    sqlite3.connect(path).execute("CREATE TABLE t (x)").connection.close()
    ro = create_engine(f"sqlite:///file:{path}?mode=ro&uri=true")
    with pytest.raises(OperationalError) as e, ro.begin() as conn:
        conn.execute(text("INSERT INTO t VALUES (1)"))
    fault = classify(e.value)
    assert isinstance(fault, StoreFault) and not fault.transient and not is_transient(e.value)
    assert str(fault) == "database fault (sqlite3): attempt to write a readonly database"
    # a bug stays a bug: an integrity error, or an error that is no database's, is not a fault
    assert classify(IntegrityError("INSERT", {}, sqlite3.IntegrityError("UNIQUE constraint failed"))) is None
    assert classify(ValueError("x")) is None
    assert classify(OSError(errno.ENOSPC, "No space left on device")).library == "the operating system"

