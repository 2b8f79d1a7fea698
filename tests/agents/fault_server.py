"""A fault-injecting OpenAI-compatible server for tests: stdlib only, loopback only, a free port.

``FaultServer`` answers ``GET /v1/models`` (the model ``M``, or the ``models`` it is given) and ``POST /v1/chat/completions``.
Each chat request gets the mode its index picks (``modes`` cycles over the requests, or a
callable ``(index, body) -> mode`` that may look at the request); the modes are those a user meets when a server misbehaves:

========================  ========================================================================
``normal``                a short valid answer (``content(body)``, else ``<answer>{answer}</answer>``), ``n`` choices
``empty_choices``         HTTP 200 with ``choices: []`` (CASE-001)
``huge``                  HTTP 200, content of ``huge_chars`` characters, finish reason stop (CASE-002)
``not_json``              HTTP 200, body ``{not json`` as application/json (CASE-003)
``html``                  HTTP 200, an HTML page as text/html
``content_null``          HTTP 200, a choice whose content is null
``truncated_json``        HTTP 200, a valid reply cut off halfway
``http_500``              HTTP 500 with an error body
``http_429``              HTTP 429 with ``Retry-After: 0``
``slow``                  a normal answer after ``slow_s`` seconds
``reset``                 the connection closed without a reply
========================  ========================================================================

Use as a context manager: ``with FaultServer(["normal", "empty_choices"]) as s: s.base_url``.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODES = ("normal", "empty_choices", "huge", "not_json", "html", "content_null", "truncated_json",
         "http_500", "http_429", "slow", "reset")
MODEL = "M"


def _reply(choices: list[dict[str, Any]], completion_tokens: int = 3) -> dict[str, Any]:
    return {"id": "x", "object": "chat.completion", "created": 0, "model": MODEL, "choices": choices,
            "usage": {"prompt_tokens": 10, "completion_tokens": completion_tokens, "total_tokens": 10 + completion_tokens}}


def _choice(i: int, content: str | None, finish: str = "stop") -> dict[str, Any]:
    return {"index": i, "message": {"role": "assistant", "content": content}, "finish_reason": finish}


class FaultServer:
    """The server; ``modes`` picks each chat request's mode by its index (0-based, in arrival order).

    Args:
        modes: a sequence cycled over the requests (``["normal", "empty_choices"]``: every other
            request is faulty), or a callable ``(index, body) -> mode``.
        answer: what a normal reply answers (inside ``<answer>`` tags).
        content: ``body -> text`` of a normal reply (e.g. a solver's answer or a teacher's JSON); overrides ``answer``.
        huge_chars: length of a ``huge`` reply.
        slow_s: seconds a ``slow`` reply waits.
        models: the ids ``GET /v1/models`` lists (``()``: an endpoint that lists none).

    Attributes:
        requests: the JSON bodies of the chat requests received, in order.
        served: the mode each chat request got, in order.
        listings: ``GET /v1/models`` requests received.
    """

    def __init__(self, modes: Sequence[str] | Callable[[int, dict[str, Any]], str] = ("normal",), answer: str = "4",
                 huge_chars: int = 400_000, slow_s: float = 2.0,
                 content: Callable[[dict[str, Any]], str] | None = None, models: Sequence[str] = (MODEL,)) -> None:
        for m in ([] if callable(modes) else modes):
            if m not in MODES:
                raise ValueError(f"unknown fault mode {m!r}; one of {', '.join(MODES)}")
        self.modes, self.answer, self.huge_chars, self.slow_s = modes, answer, huge_chars, slow_s
        self.content = content
        self.models = tuple(models)
        self.listings = 0
        self.requests: list[dict[str, Any]] = []
        self.served: list[str] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True, name="fault-server")

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>/v1``."""
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def mode_of(self, index: int, body: dict[str, Any] | None = None) -> str:
        """The mode of chat request ``index`` (with request ``body``)."""
        mode = self.modes(index, body or {}) if callable(self.modes) else self.modes[index % len(self.modes)]
        if mode not in MODES:
            raise ValueError(f"unknown fault mode {mode!r}")
        return mode

    def __enter__(self) -> FaultServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving and free the port."""
        self._httpd.shutdown()
        self._httpd.server_close()

    def _next(self, body: dict[str, Any]) -> str:
        with self._lock:
            mode = self.mode_of(len(self.requests), body)
            self.requests.append(body)
            self.served.append(mode)
        return mode

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, body: bytes, content_type: str = "application/json",
                      headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                try:
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a `slow` reply past its timeout)
                    self.close_connection = True

            def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
                self._send(status, json.dumps(obj).encode(), headers=headers)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.rstrip("/") == "/v1/models":
                    with server._lock:
                        server.listings += 1
                    self._json(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in server.models]})
                else:
                    self._json(404, {"error": {"message": "Not Found"}})

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._json(404, {"error": {"message": "Not Found"}})
                    return
                body = json.loads(raw or b"{}")
                mode = server._next(body)
                n = int(body.get("n") or 1)
                text = server.content(body) if server.content else (
                    f"The sum is {server.answer}. <answer>{server.answer}</answer>")
                normal = _reply([_choice(i, text) for i in range(n)])
                if mode == "normal":
                    self._json(200, normal)
                elif mode == "slow":
                    time.sleep(server.slow_s)
                    self._json(200, normal)
                elif mode == "empty_choices":
                    self._json(200, _reply([], 0))
                elif mode == "huge":
                    text = "9 " * (server.huge_chars // 2)
                    self._json(200, _reply([_choice(i, text) for i in range(n)], server.huge_chars // 2))
                elif mode == "not_json":
                    self._send(200, b"{not json")
                elif mode == "html":
                    self._send(200, b"<html><body><h1>502 Bad Gateway</h1></body></html>", "text/html")
                elif mode == "content_null":
                    self._json(200, _reply([_choice(i, None) for i in range(n)]))
                elif mode == "truncated_json":
                    whole = json.dumps(normal).encode()
                    self._send(200, whole[: len(whole) // 2])
                elif mode == "http_500":
                    self._json(500, {"error": {"message": "internal error (injected)"}})
                elif mode == "http_429":
                    self._json(429, {"error": {"message": "rate limited (injected)"}}, {"Retry-After": "0"})
                elif mode == "reset":
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                else:  # pragma: no cover - checked in __init__
                    self._json(500, {"error": {"message": f"unknown mode {mode}"}})

        return Handler
