"""Each backend's declared capabilities against what it does, and no caller probing a policy for them.

A backend that declares SCORE returns per-token log-probs of a given completion; one that does not
raises LogprobsUnavailable. SAMPLE_LOGPROBS: sampled completions carry their tokens' log-probs.
SAMPLE_BATCH, PREFILL and JSON_SCHEMA: the typed call exists (``sample_batch``; ``sample``'s
``prefill`` / ``json_schema`` keyword). The local backend is exercised on a tiny random Llama (seconds
on CPU), the OpenAI backend on an in-process mock transport, llama.cpp without loading a model.
"""

from __future__ import annotations

import inspect
import math
import re
from pathlib import Path

import httpx
import pytest

from agents.backends.fake import FakePolicy
from agents.backends.llamacpp import LlamaCppPolicy
from agents.backends.local import LocalPolicy
from agents.backends.openai_backend import OpenAIPolicy
from agents.capabilities import (
    CAPABILITY_HELP,
    Capability,
    capabilities_of,
    describe_capabilities,
    has_capability,
    missing_capabilities,
)
from agents.policy import BasePolicy, LogprobsUnavailable, Policy, batch_sampler, sample_many
from agents.parsing import reply_constraints

REPO = Path(__file__).resolve().parents[2]
CHAT = [{"role": "user", "content": "What is 2 + 3?"}]
BACKEND_CLASSES = (FakePolicy, LocalPolicy, OpenAIPolicy, LlamaCppPolicy)
TABLE = {  # the capability table of the README's backends section and of agents/backends/registry.py
    FakePolicy: {Capability.SAMPLE},
    LocalPolicy: {Capability.SAMPLE, Capability.SAMPLE_BATCH, Capability.SAMPLE_LOGPROBS, Capability.SCORE,
                  Capability.TRAIN_ADAPTER, Capability.PREFILL},
    OpenAIPolicy: {Capability.SAMPLE, Capability.SAMPLE_LOGPROBS},
    LlamaCppPolicy: {Capability.SAMPLE, Capability.PREFILL, Capability.JSON_SCHEMA},
}


@pytest.fixture(scope="module")
def tiny(tiny_dir) -> LocalPolicy:
    policy = LocalPolicy(model_dir=tiny_dir, device="cpu")
    policy.load()
    return policy


def _chat_completion(request: httpx.Request) -> httpx.Response:
    """A chat-completions reply with sampled-token log-probs, as OpenAI and vLLM send them."""
    if request.url.path.endswith("/models"):
        return httpx.Response(200, json={"object": "list", "data": [{"id": "m", "object": "model"}]})
    tokens = [("The", -0.1), (" answer", -0.5), (" is", -0.2), (" 5", -0.05)]
    return httpx.Response(200, json={
        "id": "x", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "".join(t for t, _ in tokens)},
                     "logprobs": {"content": [{"token": t, "logprob": lp, "top_logprobs": []} for t, lp in tokens]}}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13},
    })


@pytest.fixture
def endpoint() -> OpenAIPolicy:
    client = httpx.Client(transport=httpx.MockTransport(_chat_completion))
    return OpenAIPolicy("m", base_url="http://127.0.0.1:9/v1", http_client=client, max_retries=0)


# --------------------------------------------------------------------------- declarations


@pytest.mark.parametrize("cls", BACKEND_CLASSES, ids=lambda c: c.__name__)
def test_every_backend_declares_its_capabilities(cls) -> None:
    assert issubclass(cls, BasePolicy)
    assert capabilities_of(cls) == TABLE[cls]
    assert Capability.SAMPLE in cls.capabilities
    assert not has_capability(cls, Capability.LOGITS)  # the logits judge is a later issue: nobody claims it yet


@pytest.mark.parametrize("cls", BACKEND_CLASSES, ids=lambda c: c.__name__)
def test_the_typed_call_of_each_declared_capability_exists_and_only_then(cls) -> None:
    params = inspect.signature(cls.sample).parameters
    assert ("prefill" in params) == has_capability(cls, Capability.PREFILL)
    assert ("json_schema" in params) == has_capability(cls, Capability.JSON_SCHEMA)
    assert callable(getattr(cls, "sample_batch", None)) == has_capability(cls, Capability.SAMPLE_BATCH)
    assert (cls is LocalPolicy) == has_capability(cls, Capability.TRAIN_ADAPTER)  # model, tokenizer, adapter


def test_the_declared_members_have_their_unknown_values_by_default() -> None:
    fake = FakePolicy(lambda m, i: "x")
    assert (fake.context_window, fake.stats, fake.adapter, fake.dtype) == (None, None, None, None)
    fake.load()
    fake.close()  # no-ops
    assert isinstance(fake, Policy)


# --------------------------------------------------------------------------- behaviour


def test_local_declares_score_and_scores_a_given_completion(tiny: LocalPolicy) -> None:
    lps = tiny.logprobs(CHAT, "The answer is 5.")
    assert len(lps) == tiny.count_tokens("The answer is 5.") > 0
    assert all(isinstance(x, float) and math.isfinite(x) and x <= 0.0 for x in lps)


def test_local_samples_with_logprobs_in_batches_and_after_a_prefill(tiny: LocalPolicy) -> None:
    out = tiny.sample(CHAT, n=2, temperature=0.8, max_tokens=6, seed=1)
    assert all(c.logprobs is not None and len(c.logprobs) == len(c.token_ids) for c in out)
    assert batch_sampler(tiny) is tiny
    batched = sample_many(tiny, [CHAT, CHAT], temperature=0.0, max_tokens=6)
    assert len(batched) == 2 and batched[0].text == batched[1].text
    assert tiny.sample(CHAT, n=1, temperature=0.0, max_tokens=4, prefill="The")[0].token_ids
    assert tiny.context_window == 1024 and tiny.stats is not None and tiny.dtype is not None
    assert sum(p.numel() for p in tiny.model.parameters()) > 0 and tiny.adapter is None  # weights a LoRA wraps


def test_openai_declares_sampled_logprobs_but_not_score(endpoint: OpenAIPolicy) -> None:
    c = endpoint.sample(CHAT, n=1, temperature=0.0, max_tokens=8)[0]
    assert c.text == "The answer is 5" and c.logprobs == [-0.1, -0.5, -0.2, -0.05]
    with pytest.raises(LogprobsUnavailable):
        endpoint.logprobs(CHAT, "The answer is 5")
    assert batch_sampler(endpoint) is None and endpoint.context_window is None and endpoint.stats is None


def test_fake_and_llamacpp_do_not_score(tmp_path) -> None:
    with pytest.raises(LogprobsUnavailable):
        FakePolicy(lambda m, i: "x").logprobs(CHAT, "x")
    llm = LlamaCppPolicy(tmp_path / "never-loaded.gguf", n_ctx=512)
    with pytest.raises(LogprobsUnavailable):
        llm.logprobs(CHAT, "x")  # refused without loading anything
    assert llm.context_window == 512 and llm.stats is not None
    assert FakePolicy(lambda m, i: "x").sample(CHAT, n=1)[0].logprobs is None  # no SAMPLE_LOGPROBS


def test_reply_constraints_follow_the_declarations(tiny: LocalPolicy, tmp_path) -> None:
    schema = {"type": "object"}
    assert reply_constraints(tiny, "{", schema) == ("{", None)  # prefill, no schema
    assert reply_constraints(LlamaCppPolicy(tmp_path / "x.gguf"), "{", schema) == ("", schema)  # the grammar wins
    assert reply_constraints(LlamaCppPolicy(tmp_path / "x.gguf"), "{", None) == ("{", None)
    assert reply_constraints(FakePolicy(lambda m, i: "x"), "{", schema) == ("", None)


# --------------------------------------------------------------------------- helpers


def test_missing_and_described_capabilities() -> None:
    assert missing_capabilities({Capability.SAMPLE}, [Capability.SCORE, Capability.SAMPLE, Capability.TRAIN_ADAPTER]) == [
        Capability.SCORE, Capability.TRAIN_ADAPTER]
    assert describe_capabilities([Capability.SCORE]) == "scores any completion by teacher forcing"
    assert describe_capabilities([Capability.SCORE, Capability.PREFILL, Capability.LOGITS]) == (
        "scores any completion by teacher forcing, continues a prefilled reply and returns next-token logits")
    assert set(CAPABILITY_HELP) == set(Capability)


# --------------------------------------------------------------------------- no probing

# Policy members that callers once looked for with getattr/hasattr (issue 33): now declared on Policy / BasePolicy
# or by a capability. A probe of any of them on anything is refused, whatever the object is called.
PROBED = ("sample_batch", "supports_prefill", "supports_json_schema", "context_window", "dtype", "close", "stats",
          "adapter", "load", "capabilities", "name")
PROBE = re.compile(r"\b(?:getattr|hasattr)\(\s*[\w.()]+\s*,\s*[\"'](" + "|".join(PROBED) + r")[\"']")


def test_no_module_probes_a_policy_for_a_capability() -> None:
    offenders = []
    for package in ("agents", "arena", "lessons", "tui"):
        for path in sorted((REPO / package).rglob("*.py")):
            text = path.read_text()
            offenders += [f"{path.relative_to(REPO)}: {m.group(0)}" for m in PROBE.finditer(text)]
            offenders += [f"{path.relative_to(REPO)}: {w}" for w in ("supports_prefill", "supports_json_schema") if w in text]
    assert offenders == []


def test_the_scan_sees_a_probe() -> None:
    assert PROBE.search('batch = getattr(policy, "sample_batch", None)')
    assert PROBE.search("if hasattr(p, 'close'):")
    assert not PROBE.search('getattr(e, "msg", "nested too deeply")')
