"""The OpenAI-compatible backend's concurrency, `n` and 429 handling, against an in-process fake server.

``httpx.MockTransport`` answers the ``openai`` client's requests in this process (no network):
it can ignore ``n`` like llama.cpp, rate-limit with ``Retry-After``, and counts requests in flight.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timezone

import httpx
import pytest

from agents.backends.openai_backend import OpenAIPolicy, retry_after_seconds
from agents.policy import PolicyError

CHAT = [{"role": "user", "content": "Say hi."}]


class FakeServer:
    def __init__(self, honours_n: bool = True, rate_limited: int = 0, retry_after: str | None = "2", delay_s: float = 0.0):
        self.honours_n, self.rate_limited, self.retry_after, self.delay_s = honours_n, rate_limited, retry_after, delay_s
        self.lock = threading.Lock()
        self.in_flight = self.most = 0
        self.bodies: list[dict] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        with self.lock:
            self.bodies.append(body)
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            limited = self.rate_limited > 0
            self.rate_limited -= 1
        try:
            time.sleep(self.delay_s)
            if limited:
                headers = {"retry-after": self.retry_after} if self.retry_after is not None else {}
                return httpx.Response(429, headers=headers, json={"error": {"message": "slow down"}})
            n = body.get("n", 1) if self.honours_n else 1
            seed = body.get("seed", 0)
            choices = [{"index": i, "finish_reason": "stop", "logprobs": None,
                        "message": {"role": "assistant", "content": f"reply seed={seed} i={i}"}} for i in range(n)]
            return httpx.Response(200, json={"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                                             "choices": choices,
                                             "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}})
        finally:
            with self.lock:
                self.in_flight -= 1


def policy_for(server: FakeServer, **kw) -> tuple[OpenAIPolicy, list[float]]:
    p = OpenAIPolicy("m", base_url="http://fake/v1", max_retries=0,
                     http_client=httpx.Client(transport=httpx.MockTransport(server)), **kw)
    waits: list[float] = []
    p._sleep = waits.append
    return p, waits


def test_n_is_one_request_where_the_server_honours_it():
    server = FakeServer(honours_n=True)
    p, _ = policy_for(server)
    out = p.sample(CHAT, n=4, seed=10)
    assert [c.text for c in out] == [f"reply seed=10 i={i}" for i in range(4)]
    assert len(server.bodies) == 1 and server.bodies[0]["n"] == 4 and p.supports_n is True


def test_a_server_that_ignores_n_gets_concurrent_single_requests_and_is_remembered():
    server = FakeServer(honours_n=False, delay_s=0.05)
    p, _ = policy_for(server, max_concurrency=3)
    out = p.sample(CHAT, n=5, seed=10)
    # the first request asked for n=5 and got one; completions 1..4 came from seeds 11..14
    assert sorted(c.text for c in out) == sorted(f"reply seed={10 + i} i=0" for i in range(5))
    assert p.supports_n is False and server.bodies[0]["n"] == 5 and 1 < server.most <= 3
    server.bodies.clear()
    assert len(p.sample(CHAT, n=3, seed=0)) == 3
    assert [b.get("n", 1) for b in server.bodies] == [1, 1, 1] and sorted(b["seed"] for b in server.bodies) == [0, 1, 2]


def test_threads_share_a_bounded_number_of_requests_in_flight():
    server = FakeServer(delay_s=0.03)
    p, _ = policy_for(server, max_concurrency=2)
    threads = [threading.Thread(target=p.sample, args=(CHAT,), kwargs={"n": 2}) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(server.bodies) == 6 and server.most == 2


def test_429_waits_what_retry_after_asks_then_succeeds():
    server = FakeServer(rate_limited=2, retry_after="2")
    p, waits = policy_for(server)
    out = p.sample(CHAT, n=1)
    assert out[0].text.startswith("reply") and waits == [2.0, 2.0] and len(server.bodies) == 3


def test_429_without_retry_after_backs_off_and_gives_up_with_one_line():
    server = FakeServer(rate_limited=10, retry_after=None)
    p, waits = policy_for(server, rate_limit_retries=3)
    with pytest.raises(PolicyError, match=r"HTTP 429.*slow down; lower --concurrency") as e:
        p.sample(CHAT, n=1)
    assert "\n" not in str(e.value)
    assert waits == [1.0, 2.0, 4.0] and len(server.bodies) == 4


def test_a_retry_after_too_long_to_wait_fails_at_once():
    server = FakeServer(rate_limited=1, retry_after="3600")
    p, waits = policy_for(server)
    with pytest.raises(PolicyError, match="HTTP 429"):
        p.sample(CHAT, n=1)
    assert waits == [] and len(server.bodies) == 1


def test_retry_after_header_forms():
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
    assert retry_after_seconds({"retry-after": "7"}) == 7.0
    assert retry_after_seconds({"retry-after": "1.5"}) == 1.5
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_seconds({"retry-after": "Wed, 01 Jan 2025 12:00:30 GMT"}, now=now) == 30.0
    assert retry_after_seconds({"retry-after": "Wed, 01 Jan 2025 11:00:00 GMT"}, now=now) == 0.0
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({}) is None and retry_after_seconds(None) is None
