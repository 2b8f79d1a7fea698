"""Serving a registered adapter from a running vLLM server: ``arena adapters serve``.

vLLM loads LoRA adapters at run time when started with ``--enable-lora --max-lora-rank R``
and the environment variable ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` (vLLM docs, "LoRA
Adapters", dynamically serving LoRA adapters): ``POST /v1/load_lora_adapter`` with
``{"lora_name", "lora_path"}`` adds one, after which ``GET /v1/models`` lists it and the
OpenAI-compatible endpoints sample with it under that model name, so
``arena run --solver openai:NAME`` uses it. The adapter directory is read by the server, so
the path must be one the server can open (same machine or a shared file system).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from lessons.db.engine import one_line, redact_credentials
from lessons.library.adapters import AdapterStore
from lessons.library.store import LessonStore

TIMEOUT_S = 120.0  # loading reads the adapter's weights onto the GPU: allow a slow file system
MAX_REPLY_CHARS = 400  # of a server's error body quoted in our one line


class ServeError(Exception):
    """The adapter could not be loaded; the message is one line naming the endpoint and what happened."""


@dataclass(frozen=True)
class Served:
    """An adapter a vLLM server now serves."""

    adapter_id: str  # the library's readable id
    name: str  # the model name to sample with (``--solver openai:NAME``)
    endpoint: str  # the server's OpenAI-compatible base URL (``…/v1``)
    path: str  # the adapter directory the server loaded
    rank: int  # LoRA r (the server's --max-lora-rank must be at least this)


def api_base(endpoint: str) -> str:
    """``http://host:port/v1`` from ``http://host:port`` or ``http://host:port/v1`` (trailing slashes ignored).

    Raises:
        ServeError: not an http(s) URL with a host and a valid port, or one with credentials,
            a query or a fragment (an API key goes in ``OPENAI_API_KEY``).
    """
    url = endpoint.strip().rstrip("/")
    shown = redact_credentials(endpoint)
    example = "such as http://127.0.0.1:8000/v1"
    if not url.startswith(("http://", "https://")):
        raise ServeError(f"--endpoint must be an http(s) URL {example}, not {shown!r}")
    if redact_credentials(url) != url:  # refused before httpx parses it: its errors would quote a piece of the password
        raise ServeError(
            f"--endpoint {shown!r} must have no user, password, query or fragment (put an API key in OPENAI_API_KEY)"
        )
    try:
        parsed = httpx.URL(url)
        port = parsed.port
    except (httpx.InvalidURL, ValueError) as e:
        raise ServeError(f"--endpoint {shown!r} is not a valid URL ({one_line(e)}); use one {example}") from None
    if not parsed.host or (port is not None and not 0 < port < 65536):
        raise ServeError(f"--endpoint {shown!r} needs a host and a port between 1 and 65535, {example}")
    if parsed.userinfo or parsed.query or parsed.fragment:
        raise ServeError(
            f"--endpoint {shown!r} must have no user, password, query or fragment (put an API key in OPENAI_API_KEY)"
        )
    return url if url.endswith("/v1") else url + "/v1"


def adapter_rank(path: Path) -> int:
    """LoRA r of a peft adapter directory (``adapter_config.json``).

    Raises:
        ServeError: no readable ``adapter_config.json`` with an integer ``r`` ≥ 1.
    """
    cfg = path / "adapter_config.json"
    try:
        r = json.loads(cfg.read_text(encoding="utf-8")).get("r")
    except (OSError, ValueError, AttributeError) as e:
        raise ServeError(f"adapter directory {path} has no readable adapter_config.json ({' '.join(str(e).split())})") from None
    if not isinstance(r, int) or isinstance(r, bool) or r < 1:
        raise ServeError(f"{cfg}: 'r' must be an integer >= 1, not {r!r}")
    return r


def _reply_text(resp: httpx.Response) -> str:
    """The server's error message, one line, bounded (vLLM answers ``{"error": {"message"}}`` or ``{"message"}``)."""
    try:
        body: Any = resp.json()
    except ValueError:
        body = resp.text
    if isinstance(body, dict):
        err = body.get("error", body)
        body = err.get("message", err) if isinstance(err, dict) else err
    text = " ".join(str(body).split())
    return text[:MAX_REPLY_CHARS] + ("…" if len(text) > MAX_REPLY_CHARS else "")


def _models(client: httpx.Client, base: str) -> list[str]:
    resp = client.get(f"{base}/models")
    if resp.status_code != 200:
        raise ServeError(f"endpoint {base} answered GET /models with HTTP {resp.status_code}: {_reply_text(resp)}")
    try:
        data = resp.json()["data"]
        return [str(m["id"]) for m in data]
    except (ValueError, KeyError, TypeError):
        raise ServeError(f"endpoint {base} answered GET /models with something that is not a model list") from None


def serve_adapter(
    store: LessonStore, adapter_id: str, endpoint: str, name: str | None = None, timeout_s: float = TIMEOUT_S
) -> Served:
    """Load a registered adapter into a running vLLM server and check that the server lists it.

    Args:
        store: the library the adapter is registered in.
        adapter_id: its readable id (``adapter-0001``).
        endpoint: the server (``http://host:port`` or ``…/v1``).
        name: the model name to serve it under (default: ``adapter_id``).
        timeout_s: per HTTP request, seconds.

    Returns:
        What is served, and under which name.

    Raises:
        ServeError: unknown adapter, a directory that is gone or not a LoRA adapter, an
            unreachable endpoint, a server without run-time LoRA loading, or one that refuses
            the adapter (its message quoted), or that does not list it afterwards.
    """
    base = api_base(endpoint)
    info = AdapterStore(store).get_adapter(adapter_id)
    if info is None:
        known = [a.adapter_id for a in AdapterStore(store).list_adapters()]
        raise ServeError(f"no adapter {adapter_id!r} in {store.location} (registered: {', '.join(known) or 'none'})")
    path = Path(info.path)
    if not path.is_dir():
        raise ServeError(f"adapter {adapter_id}'s directory {path} does not exist any more")
    rank = adapter_rank(path)
    lora_name = (adapter_id if name is None else name).strip()
    if not lora_name or any(c.isspace() for c in lora_name):
        raise ServeError(f"--name must be one word without spaces, not {name!r}")
    key = os.environ.get("OPENAI_API_KEY", "").strip()
    headers = {"Authorization": f"Bearer {key}"} if key else {}  # vLLM's --api-key guards these endpoints too
    try:
        with httpx.Client(timeout=timeout_s, headers=headers) as client:
            if lora_name in _models(client, base):
                raise ServeError(f"endpoint {base} already serves a model named {lora_name!r}; pass another --name")
            resp = client.post(f"{base}/load_lora_adapter", json={"lora_name": lora_name, "lora_path": str(path.resolve())})
            if resp.status_code == 404:
                raise ServeError(
                    f"endpoint {base} has no POST /v1/load_lora_adapter: start vLLM with --enable-lora "
                    f"--max-lora-rank {rank} and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"
                )
            if resp.status_code != 200:
                raise ServeError(
                    f"endpoint {base} refused adapter {adapter_id} (LoRA r={rank}, {path}): "
                    f"HTTP {resp.status_code}: {_reply_text(resp)}"
                )
            if lora_name not in _models(client, base):
                raise ServeError(f"endpoint {base} accepted adapter {adapter_id} but does not list {lora_name!r} in /v1/models")
    except httpx.TimeoutException:
        raise ServeError(f"endpoint {base} gave no reply within {timeout_s:g} s") from None
    except (httpx.HTTPError, httpx.InvalidURL) as e:
        raise ServeError(f"cannot reach endpoint {base}: {one_line(e) or type(e).__name__}") from None
    return Served(adapter_id=adapter_id, name=lora_name, endpoint=base, path=str(path.resolve()), rank=rank)
