"""Real `arena run` processes against the fault-injecting server, for the lease and database-fault tests (issue 32).

``start_run`` starts ``arena run`` (solver and teacher ``openai:M`` on the test's server, a task
file of sums), ``wait_for_episodes`` polls the library until a run has stored some episodes,
``table_counts`` counts every table's rows, and :class:`PostgresCluster` is a throwaway
PostgreSQL server of the test's own (initdb on a free loopback port) that a test may stop and
start again.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from glob import glob
from pathlib import Path

import pytest
from fault_scripts import content, write_tasks
from sqlalchemy import func, select

from lessons.db.schema import Base, EpisodeRow
from lessons.library.store import LessonStore

REPO = Path(__file__).resolve().parents[2]
REQUIRE_POSTGRES_ENV = "ARENA_REQUIRE_POSTGRES"  # "1" (CI): the PostgreSQL cases must run, not skip


def run_args(db: str, tasks: Path, *extra: str) -> list[str]:
    """The command line after ``arena``: a small session on ``openai:M`` (4 train tasks, 2 held-out, k = 2)."""
    return ["run", "--db", db, "--tasks-file", str(tasks), "--solver", "openai:M", "--teacher", "openai:M",
            "--train-tasks", "4", "--heldout-tasks", "2", "--rounds", "1", "--rollouts", "2", "--max-tokens", "96",
            "--utility-every", "0", "--concurrency", "1", *extra]


def slow_server(fault_server, slow_s: float = 0.15):
    """A server whose every reply takes ``slow_s`` seconds: a run lasts long enough for another to meet it."""
    return fault_server(lambda i, body: "slow", content=content, slow_s=slow_s)


def start_run(server, args: Sequence[str], cwd: Path) -> subprocess.Popen:
    """``python -m arena.cli ARGS`` in ``cwd`` (checkpoint files land there), text pipes."""
    env = {**os.environ, "OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "x", "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(REPO)}  # this checkout's packages, whatever cwd is
    return subprocess.Popen([sys.executable, "-m", "arena.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)


def finish(proc: subprocess.Popen, timeout: float = 180) -> tuple[int, str, str]:
    """Wait for ``proc``; ``(returncode, stdout, stderr)``."""
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def wait_for_episodes(db: str, session: str, n: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Poll until session ``session`` in ``db`` has ``n`` stored episodes (fails if ``proc`` ends first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        try:
            with LessonStore(db) as st:
                info = st.get_session(session)
                if info is not None:
                    with st.read() as s:
                        done = s.scalar(select(func.count()).select_from(EpisodeRow)
                                        .where(EpisodeRow.session_id == info.id))
                    if done >= n:
                        return
        except Exception:  # noqa: BLE001 - the file is being created, or the server restarts
            pass
        time.sleep(0.1)
    pytest.fail(f"no {n} episodes of {session} within {timeout} s")


def table_counts(db: str) -> dict[str, int]:
    """Rows of every table of the schema."""
    with LessonStore(db) as st, st.read() as s:
        return {t.name: s.scalar(select(func.count()).select_from(t)) for t in Base.metadata.sorted_tables}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresCluster:
    """A PostgreSQL server of the test's own: ``initdb`` in a temporary folder, on a free loopback port.

    Run as the ``postgres`` user when this process is root (``runuser``), as ``.ci/run`` does.
    Skips when the binaries are missing, unless ``ARENA_REQUIRE_POSTGRES=1`` (then it fails).
    """

    def __init__(self) -> None:
        bins = sorted(glob("/usr/lib/postgresql/*/bin/initdb"))
        if not bins:
            msg = "no PostgreSQL binaries in /usr/lib/postgresql/*/bin to start a throwaway server"
            if os.environ.get(REQUIRE_POSTGRES_ENV) == "1":
                pytest.fail(msg)
            pytest.skip(msg)
        self.bin = Path(bins[-1]).parent
        self.dir = Path(tempfile.mkdtemp(prefix="arena-pg-"))
        self.port = free_port()
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")
        self._run("initdb", "-D", str(self.dir / "data"), "-A", "trust", "-U", "arena")
        self.start()

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bin / tool), *args]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)

    @property
    def url(self) -> str:
        return f"postgresql://arena@127.0.0.1:{self.port}/postgres"

    def database(self, name: str) -> str:
        """Create database ``name``; its SQLAlchemy URL."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://arena@127.0.0.1:{self.port}/{name}"

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.dir / "data"), "-l", str(self.dir / "server.log"), "-w",
                  "-o", f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=off", "start")

    def stop(self) -> None:
        """A fast shutdown: every connection is closed under its client, as in a restart or a failover."""
        self._run("pg_ctl", "-D", str(self.dir / "data"), "-m", "fast", "-w", "stop")

    def close(self) -> None:
        try:
            self.stop()
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


__all__ = ["PostgresCluster", "finish", "run_args", "slow_server", "start_run", "table_counts", "wait_for_episodes",
           "write_tasks"]
