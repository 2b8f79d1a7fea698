"""`arena adapters serve`: a registered adapter loaded into a vLLM-like server at run time (POST /v1/load_lora_adapter).

The server here is a stdlib stand-in on loopback with vLLM's run-time LoRA endpoints and their replies
(vLLM docs, "LoRA Adapters"): loading checks the directory and the rank as vLLM does, then lists the name
in /v1/models. A real vLLM on a GPU is exercised by bench/gpu_vllm.sh.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cli_helpers import arena, assert_one_line_error

from arena.distill.serving import ServeError, api_base
from lessons.library.adapters import AdapterRecord, AdapterStore
from lessons.library.store import LessonStore

BASE_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"


class FakeVLLM:
    """vLLM's model list and run-time LoRA loading; ``mode``: ok, no-runtime (404), forget (200, not listed)."""

    def __init__(self, mode: str = "ok", max_lora_rank: int = 16) -> None:
        self.mode, self.max_lora_rank = mode, max_lora_rank
        self.loras: dict[str, str] = {}
        self.requests: list[tuple[str, str, dict]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def reply(self, status: int, body) -> None:
                data = (json.dumps(body) if not isinstance(body, str) else body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json" if not isinstance(body, str) else "text/plain")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                fake.requests.append(("GET", self.path, {}))
                if self.path != "/v1/models":
                    return self.reply(404, {"detail": "Not Found"})
                models = [{"id": BASE_MODEL, "object": "model", "root": BASE_MODEL, "parent": None}]
                models += [{"id": n, "object": "model", "root": p, "parent": BASE_MODEL} for n, p in fake.loras.items()]
                self.reply(200, {"object": "list", "data": models})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                fake.requests.append(("POST", self.path, body))
                if self.path != "/v1/load_lora_adapter" or fake.mode == "no-runtime":
                    return self.reply(404, {"detail": "Not Found"})
                name, path = body.get("lora_name"), Path(body.get("lora_path", ""))
                if name in fake.loras:
                    return self.reply(400, {"error": {"message": f"The lora adapter '{name}' has already been loaded.", "code": 400}})
                try:
                    rank = json.loads((path / "adapter_config.json").read_text())["r"]
                except (OSError, ValueError, KeyError):
                    return self.reply(400, {"error": {"message": f"No adapter found for {path}", "code": 400}})
                if rank > fake.max_lora_rank:
                    return self.reply(400, {"error": {"message": f"LoRA rank {rank} is greater than max_lora_rank {fake.max_lora_rank}.", "code": 400}})
                if fake.mode != "forget":
                    fake.loras[name] = str(path)
                self.reply(200, f"Success: LoRA adapter '{name}' added successfully.")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def vllm():
    servers: list[FakeVLLM] = []

    def start(mode: str = "ok", max_lora_rank: int = 16) -> FakeVLLM:
        servers.append(FakeVLLM(mode, max_lora_rank))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


@pytest.fixture
def library(tmp_path: Path) -> Path:
    """A library with adapter-0001 (LoRA r = 8) registered at tmp_path/ad."""
    ad = tmp_path / "ad"
    ad.mkdir()
    (ad / "adapter_config.json").write_text(json.dumps({"r": 8, "peft_type": "LORA", "base_model_name_or_path": BASE_MODEL}))
    (ad / "adapter_model.safetensors").write_bytes(b"")
    db = tmp_path / "arena.db"
    with LessonStore(str(db)) as store:
        AdapterStore(store).register_adapter(AdapterRecord("adapter-0001", str(ad), "fp", "distill", None, {}, {}, {}, {}, [], {}))
    return db


def test_serve_loads_the_adapter_and_the_server_lists_it(vllm, library: Path, tmp_path: Path) -> None:
    server = vllm()
    proc = arena("adapters", "serve", "adapter-0001", "--endpoint", server.url, "--db", str(library), "--name", "smol-distilled", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "adapter_id": "adapter-0001", "name": "smol-distilled", "endpoint": server.url + "/v1",
        "path": str((tmp_path / "ad").resolve()), "rank": 8,
    }  # fmt: skip
    loads = [body for method, path, body in server.requests if method == "POST"]
    assert loads == [{"lora_name": "smol-distilled", "lora_path": str((tmp_path / "ad").resolve())}]
    assert server.loras == {"smol-distilled": str((tmp_path / "ad").resolve())}
    # default name: the adapter id; the endpoint may be given with /v1
    plain = arena("adapters", "serve", "adapter-0001", "--endpoint", server.url + "/v1/", "--db", str(library))
    assert plain.returncode == 0, plain.stderr
    assert "as 'adapter-0001'" in plain.stdout and "--solver openai:adapter-0001" in plain.stdout
    # the same name again: refused before asking the server to load anything
    again = arena("adapters", "serve", "adapter-0001", "--endpoint", server.url, "--db", str(library))
    assert_one_line_error(again, "already serves a model named 'adapter-0001'")
    assert len([1 for method, *_ in server.requests if method == "POST"]) == 2


def test_a_server_without_runtime_lora_says_how_to_start_it(vllm, library: Path) -> None:
    server = vllm("no-runtime")
    proc = arena("adapters", "serve", "adapter-0001", "--endpoint", server.url, "--db", str(library))
    assert_one_line_error(proc, f"endpoint {server.url}/v1 has no POST /v1/load_lora_adapter", "--max-lora-rank 8",
                          "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True")


def test_a_refused_adapter_quotes_the_server(vllm, library: Path) -> None:
    server = vllm(max_lora_rank=4)
    proc = arena("adapters", "serve", "adapter-0001", "--endpoint", server.url, "--db", str(library))
    assert_one_line_error(proc, "refused adapter adapter-0001 (LoRA r=8", "HTTP 400: LoRA rank 8 is greater than max_lora_rank 4.")


def test_an_adapter_accepted_but_not_listed_is_an_error(vllm, library: Path) -> None:
    server = vllm("forget")
    proc = arena("adapters", "serve", "adapter-0001", "--endpoint", server.url, "--db", str(library))
    assert_one_line_error(proc, "accepted adapter adapter-0001 but does not list 'adapter-0001'")


def test_bad_input_is_one_line_and_changes_nothing(vllm, library: Path, tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    assert_one_line_error(
        arena("adapters", "serve", "adapter-0001", "--endpoint", f"http://127.0.0.1:{closed}", "--db", str(library)),
        f"cannot reach endpoint http://127.0.0.1:{closed}/v1",
    )
    server = vllm()
    assert_one_line_error(
        arena("adapters", "serve", "adapter-0009", "--endpoint", server.url, "--db", str(library)),
        "no adapter 'adapter-0009'", "registered: adapter-0001",
    )
    for endpoint, fragment in [
        ("127.0.0.1:8000", "--endpoint must be an http(s) URL"),
        ("http://[::1", "is not a valid URL"),
        ("http://127.0.0.1:abc", "is not a valid URL"),
        ("http://127.0.0.1:99999", "a port between 1 and 65535"),
        ("http://127.0.0.1:8000/v1?x=1", "must have no user, password, query or fragment"),
        ("http://user:hunter2@127.0.0.1:8000", "must have no user, password, query or fragment"),
    ]:
        proc = arena("adapters", "serve", "adapter-0001", "--endpoint", endpoint, "--db", str(library))
        assert_one_line_error(proc, fragment)
        assert "hunter2" not in proc.stderr
    assert_one_line_error(arena("adapters", "serve", "adapter-0001", "--endpoint", server.url, "--db", str(library), "--name", ""),
                          "--name must be one word")
    assert_one_line_error(arena("adapters", "serve", "adapter-0001", "--endpoint", server.url, "--db", str(tmp_path / "none.db")),
                          "none.db")
    (tmp_path / "ad" / "adapter_config.json").write_text("{not json")
    assert_one_line_error(arena("adapters", "serve", "adapter-0001", "--endpoint", server.url, "--db", str(library)),
                          "no readable adapter_config.json")
    assert server.loras == {} and not [1 for method, *_ in server.requests if method == "POST"]
    with LessonStore(str(library)) as store:
        assert [a.adapter_id for a in AdapterStore(store).list_adapters()] == ["adapter-0001"]


@pytest.mark.parametrize(
    "endpoint",
    ["http://user:hunter2/x@127.0.0.1:8000", "http://user:hun@ter2@127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1?api_key=hunter2"],
)
def test_case_005_an_endpoint_with_a_password_is_refused_without_showing_it(endpoint: str) -> None:
    """CASE-005 for ``--endpoint``: refused before httpx parses it (its "Invalid port: 'hunter2'" would quote the password)."""
    with pytest.raises(ServeError) as err:
        api_base(endpoint)
    assert "must have no user, password, query or fragment" in str(err.value) and "hun" not in str(err.value)
