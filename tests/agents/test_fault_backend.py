"""The OpenAI backend against the fault-injecting server: each faulty reply is retried, then one EndpointFault of its kind."""

from __future__ import annotations

import pytest
from fault_server import FaultServer

from agents.backends.openai_backend import MAX_CHARS_PER_TOKEN, OpenAIPolicy, bound_reply
from agents.policy import EndpointFault

CHAT = [{"role": "user", "content": "Compute 1 plus 3."}]
KINDS = {"empty_choices": "empty_choices", "not_json": "not_json", "html": "not_json", "content_null": "content_null",
         "truncated_json": "truncated_json", "http_500": "http_5xx", "http_429": "http_429", "slow": "timeout",
         "reset": "connection"}
ATTEMPTS = {"empty_choices": 3, "not_json": 3, "html": 3, "content_null": 3, "truncated_json": 3,
            "http_500": 1, "http_429": 2, "slow": 1, "reset": 1}  # fault_retries=2; 429: rate_limit_retries=1


def policy(server: FaultServer) -> OpenAIPolicy:
    p = OpenAIPolicy("M", base_url=server.base_url, timeout_s=0.5, max_retries=0, rate_limit_retries=1)
    p._sleep = lambda s: None
    return p


@pytest.mark.parametrize("mode", sorted(KINDS))
def test_a_reply_that_stays_faulty_is_one_endpoint_fault_naming_endpoint_and_model(mode):
    with FaultServer([mode], slow_s=1.0) as server:
        with pytest.raises(EndpointFault) as info:
            policy(server).sample(CHAT, max_tokens=8)
        msg = str(info.value)
        assert info.value.kind == KINDS[mode]
        assert server.base_url in msg and "'M'" in msg and "\n" not in msg and len(msg) < 600
        assert len(server.served) == ATTEMPTS[mode]


@pytest.mark.parametrize("mode", ["empty_choices", "not_json", "content_null", "truncated_json"])
def test_one_faulty_reply_is_retried_and_the_next_is_used(mode):
    with FaultServer([mode, "normal"]) as server:
        out = policy(server).sample(CHAT, n=2, max_tokens=8)
        assert [c.text for c in out] == ["The sum is 4. <answer>4</answer>"] * 2 and server.served == [mode, "normal"]


def test_a_huge_reply_is_cut_to_what_max_tokens_allows():
    with FaultServer(["huge"]) as server:
        out = policy(server).sample(CHAT, n=2, max_tokens=96)
    assert len(out) == 2
    for c in out:
        assert len(c.text) == 96 * MAX_CHARS_PER_TOKEN and c.finish_reason == "length" and c.fault == "oversized"
    assert bound_reply("abc", 1) == ("abc", False) and bound_reply("x" * 17, 1) == ("x" * 16, True)
