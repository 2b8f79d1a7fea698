"""Shared pytest fixtures."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

# --------------------------------------------------------------------------- llama.cpp server

# Modules `python -m llama_cpp.server` needs (llama-cpp-python[server], in the `test` extra).
_LLAMA_SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context", "pydantic_settings")
_LLAMA_SERVER_ALIAS = "smollm2"
_LLAMA_SERVER_START_TIMEOUT_S = 60.0


def _free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL (``http://127.0.0.1:PORT/v1``) of llama.cpp's OpenAI-compatible server.

    Runs ``python -m llama_cpp.server`` (llama-cpp-python) on loopback, serving the embedded
    SmolLM2-135M-Instruct GGUF under the model name ``smollm2``; waits until ``GET /v1/models``
    answers and terminates the server at the end of the session. Skips when
    llama-cpp-python[server] is not installed. The server log is in the session's tmp dir.
    """
    missing = [m for m in _LLAMA_SERVER_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(
            f"llama.cpp server not installed (missing {', '.join(missing)}); "
            "install the test extra: pip install -e '.[test]'"
        )
    from agents.backends.model_files import smollm2_gguf_path

    port = _free_loopback_port()
    threads = str(max(1, min(4, os.cpu_count() or 1)))
    cmd = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(smollm2_gguf_path()),
        "--model_alias", _LLAMA_SERVER_ALIAS,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_ctx", "2048",
        "--n_threads", threads,
        "--n_threads_batch", threads,
        "--verbose", "False",
    ]  # fmt: skip
    log_path = tmp_path_factory.mktemp("llama_server") / "server.log"
    base_url = f"http://127.0.0.1:{port}/v1"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + _LLAMA_SERVER_START_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                tail = log_path.read_text(errors="replace")[-2000:]
                pytest.fail(f"llama.cpp server exited with code {proc.returncode}:\n{tail}")
            try:
                with urllib.request.urlopen(f"{base_url}/models", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                tail = log_path.read_text(errors="replace")[-2000:]
                pytest.fail(f"llama.cpp server did not answer within {_LLAMA_SERVER_START_TIMEOUT_S:g}s:\n{tail}")
            time.sleep(0.25)
        yield base_url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


# --------------------------------------------------------------------------- the embedded model


@pytest.fixture(scope="session")
def local_policy():
    """The real embedded SmolLM2-135M-Instruct in fp32 (converted once, then cached on disk).

    fp32 whatever ``$ARENA_CPU_DTYPE`` picks: the tests that use it check exact properties (batching leaves a
    row's tokens unchanged, sampling log-probs equal teacher forcing) that hold up to fp32 rounding (~1e-6);
    bf16, the default on CPUs with bf16 matmuls, is checked in tests/agents/test_cpu_dtype.py and by every
    ``arena`` command the suite runs in a subprocess.
    """
    import torch

    from agents.backends.local import LocalPolicy

    policy = LocalPolicy(dtype=torch.float32)
    policy.load()
    return policy


# --------------------------------------------------------------------------- fault-injecting server


def _fault_server_module():
    """tests/agents/fault_server.py, importable from any test folder."""
    here = os.path.join(os.path.dirname(__file__), "agents")
    if here not in sys.path:
        sys.path.insert(0, here)
    import fault_server

    return fault_server


@pytest.fixture
def fault_server():
    """A factory of fault-injecting OpenAI-compatible servers on loopback (``tests/agents/fault_server.py``).

    ``fault_server(["normal", "empty_choices"], **kw)`` starts one (every other chat request
    faulty) and returns it; every server started is stopped after the test.
    """
    mod = _fault_server_module()
    started = []

    def start(modes=("normal",), **kw):
        s = mod.FaultServer(modes, **kw).__enter__()
        started.append(s)
        return s

    yield start
    for s in started:
        s.close()


# --------------------------------------------------------------------------- library backends

POSTGRES_URL_ENV = "ARENA_TEST_POSTGRES_URL"  # a PostgreSQL server's URL whose user may CREATE DATABASE
REQUIRE_POSTGRES_ENV = "ARENA_REQUIRE_POSTGRES"  # "1" (CI): the PostgreSQL cases must run, not skip
LIBRARY_BACKENDS = ("sqlite", "postgresql")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run every test that opens a library through ``library_url`` on SQLite and on PostgreSQL.

    A test that also asks for ``db_path`` or ``fx`` (the TUI's fixture file) reads the
    SQLite file itself (pragmas, sqlite3 counts), so it runs on SQLite only.
    """
    sqlite_only = {"db_path", "fx"} & set(metafunc.fixturenames)
    for name in ("library_url", "empty_library_url"):
        if name in metafunc.fixturenames:
            metafunc.parametrize(name, ("sqlite",) if sqlite_only else LIBRARY_BACKENDS, indirect=True)


def _admin_url() -> str | None:
    url = os.environ.get(POSTGRES_URL_ENV, "").strip()
    if not url:
        if os.environ.get(REQUIRE_POSTGRES_ENV) == "1":
            pytest.fail(f"{REQUIRE_POSTGRES_ENV}=1 but {POSTGRES_URL_ENV} is not set: no PostgreSQL server to test on")
        return None
    return url


def _libpq(url: str) -> str:
    """A SQLAlchemy PostgreSQL URL as libpq takes it (no ``+driver``)."""
    from sqlalchemy.engine import make_url

    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def _with_database(url: str, name: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).set(drivername="postgresql+psycopg", database=name).render_as_string(hide_password=False)


class PostgresServer:
    """Fresh databases on the test PostgreSQL server: each a copy of one migrated template (fast)."""

    def __init__(self, admin_url: str) -> None:
        import psycopg

        self.admin_url = admin_url
        self._psycopg = psycopg
        self._n = 0
        self.template = f"arena_template_{os.getpid()}"
        try:
            self._exec(f'DROP DATABASE IF EXISTS "{self.template}"', f'CREATE DATABASE "{self.template}"')
        except psycopg.OperationalError as e:
            pytest.fail(f"{POSTGRES_URL_ENV} names no reachable PostgreSQL server: {' '.join(str(e).split())}")
        from lessons.library.store import LessonStore

        LessonStore(_with_database(admin_url, self.template)).close()  # every migration, once

    def _exec(self, *statements: str) -> None:
        with self._psycopg.connect(_libpq(self.admin_url), autocommit=True) as conn:
            for sql in statements:
                conn.execute(sql)

    def create(self, migrated: bool = True) -> tuple[str, str]:
        """``(name, SQLAlchemy URL)`` of a new database: migrated to head, or empty."""
        self._n += 1
        name = f"arena_test_{os.getpid()}_{self._n}"
        template = f' TEMPLATE "{self.template}"' if migrated else " TEMPLATE template0"
        self._exec(f'DROP DATABASE IF EXISTS "{name}"', f'CREATE DATABASE "{name}"{template}')
        return name, _with_database(self.admin_url, name)

    def drop(self, name: str) -> None:
        self._exec(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def close(self) -> None:
        self.drop(self.template)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The PostgreSQL server of :data:`POSTGRES_URL_ENV`; skips when none is set (fails when required)."""
    url = _admin_url()
    if url is None:
        pytest.skip(f"no PostgreSQL server: set {POSTGRES_URL_ENV}=postgresql://user@127.0.0.1:PORT/postgres to run these")
    server = PostgresServer(url)
    yield server
    server.close()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """The URL of a fresh, migrated PostgreSQL library database, dropped after the test."""
    name, url = postgres_server.create()
    yield url
    postgres_server.drop(name)


@pytest.fixture
def library_url(request: pytest.FixtureRequest, tmp_path) -> str:
    """Where the test's library lives: a SQLite file under ``tmp_path``, or a fresh PostgreSQL database."""
    if request.param == "postgresql":
        return request.getfixturevalue("postgres_url")
    return str(tmp_path / "arena.db")


@pytest.fixture
def empty_library_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    """The SQLAlchemy URL of an empty database, no schema revision yet: a SQLite file or a PostgreSQL database."""
    if request.param == "postgresql":
        server = request.getfixturevalue("postgres_server")
        name, url = server.create(migrated=False)
        yield url
        server.drop(name)
    else:
        yield f"sqlite:///{tmp_path / 'empty.db'}"
