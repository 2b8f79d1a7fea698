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
    """The real embedded SmolLM2-135M-Instruct (CPU fp32 here; converted once, then cached on disk)."""
    from agents.backends.local import LocalPolicy

    policy = LocalPolicy()
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
