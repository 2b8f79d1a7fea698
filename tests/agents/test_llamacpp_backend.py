"""The in-process llama.cpp backend (``llamacpp:PATH``) on a small real GGUF: the SmolLM2-135M file the project ships.

What is checked: the chat template of the GGUF is applied, greedy decoding is deterministic, a
JSON schema constrains the reply (a valid object even from a 135M model), prefill starts the reply,
the context bound is enforced, and bad files are refused with one line before any load.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp")

from agents.backends.llamacpp import LlamaCppPolicy, default_threads, usable_cpus  # noqa: E402
from agents.backends.model_files import smollm2_gguf_path  # noqa: E402
from agents.policy import EndpointFault, LogprobsUnavailable, PolicyError  # noqa: E402

CHAT = [{"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "What is 2 + 3? Reply with the number."}]


@pytest.fixture(scope="module")
def policy() -> LlamaCppPolicy:
    p = LlamaCppPolicy(smollm2_gguf_path(), n_ctx=1024, n_threads=2)
    yield p
    p.close()


def test_the_gguf_chat_template_opens_an_assistant_turn(policy: LlamaCppPolicy) -> None:
    text = policy.prompt_text(CHAT, prefill="Sure")
    assert text.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>")
    assert text.endswith("<|im_start|>assistant\nSure")


def test_greedy_decoding_is_deterministic_and_counted(policy: LlamaCppPolicy) -> None:
    before = policy.stats.completion_tokens
    a = policy.sample(CHAT, n=1, temperature=0.0, max_tokens=12)[0]
    b = policy.sample(CHAT, n=1, temperature=0.0, max_tokens=12)[0]
    assert a.text == b.text and a.text
    assert a.finish_reason in ("stop", "length") and 0 < len(a.token_ids) <= 13
    assert a.logprobs is None and a.prompt_tokens > 20
    assert policy.stats.completion_tokens > before and policy.stats.tokens_per_s > 0


def test_a_json_schema_constrains_the_reply(policy: LlamaCppPolicy) -> None:
    schema = {"type": "object", "properties": {"verdict": {"enum": ["PASS", "FAIL"]}, "why": {"type": "string", "maxLength": 40}},
              "required": ["verdict", "why"], "additionalProperties": False}
    for seed in range(3):
        out = policy.sample(CHAT, n=1, temperature=0.8, max_tokens=64, seed=seed, prefill="ignored", json_schema=schema)[0]
        obj = json.loads(out.text, strict=False)  # llama.cpp's string rule admits raw control characters
        assert list(obj) == ["verdict", "why"] and obj["verdict"] in ("PASS", "FAIL") and len(obj["why"]) <= 40


def test_every_role_schema_decodes_without_crashing_the_process(tmp_path: Path) -> None:
    """Session 24: the proposer's schema (a 4,000-character justification) made llama.cpp refuse its grammar,
    and llama-cpp-python then killed `arena run --curriculum frontier` with SIGSEGV. Each role's schema is
    decoded in a child process, so a crash fails this test instead of the suite."""
    import subprocess
    import sys

    from agents.backends.llamacpp import GRAMMAR_MAX_LENGTH, grammar_schema
    from agents.roles.proposer import ProposedTask
    from agents.roles.rubric import ExplicitJudgement, ImplicitJudgement
    from agents.roles.teacher import reflection_schema

    schemas = {"proposer": ProposedTask.model_json_schema(), "judge": ExplicitJudgement.model_json_schema(),
               "implicit": ImplicitJudgement.model_json_schema(),
               "reflection": reflection_schema(["chain_sum-00001", "chain_sum-00002"], "chain_sum")}
    assert ProposedTask.model_json_schema()["properties"]["justification"]["maxLength"] > GRAMMAR_MAX_LENGTH
    for name, schema in schemas.items():
        lengths = [v for k, v in _walk(grammar_schema(schema)) if k == "maxLength"]
        assert all(v <= GRAMMAR_MAX_LENGTH for v in lengths), name
    path = tmp_path / "schemas.json"
    path.write_text(json.dumps(schemas))
    code = (
        "import json, sys\n"
        "from agents.backends.llamacpp import LlamaCppPolicy\n"
        "from agents.backends.model_files import smollm2_gguf_path\n"
        "p = LlamaCppPolicy(smollm2_gguf_path(), n_ctx=1024, n_threads=1)\n"
        f"for name, schema in json.load(open({str(path)!r})).items():\n"
        "    out = p.sample([{'role': 'user', 'content': 'Write a new arithmetic task.'}], n=1, temperature=0.0,\n"
        "                   max_tokens=24, json_schema=schema)[0]\n"
        "    print(name, len(out.text), flush=True)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert [line.split()[0] for line in run.stdout.splitlines()] == list(schemas)


def _walk(node: object):
    """(key, value) of every dict entry in a JSON schema, depth first."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield k, v
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


def test_seeded_samples_repeat_and_differ_across_seeds(policy: LlamaCppPolicy) -> None:
    a = [c.text for c in policy.sample(CHAT, n=3, temperature=1.0, max_tokens=16, seed=7)]
    b = [c.text for c in policy.sample(CHAT, n=3, temperature=1.0, max_tokens=16, seed=7)]
    assert a == b
    assert len(set(a)) > 1


def test_a_prompt_beyond_the_context_costs_that_call(tmp_path: Path) -> None:
    p = LlamaCppPolicy(smollm2_gguf_path(), n_ctx=256, n_threads=1)
    long = [{"role": "user", "content": "word " * 400}]
    with pytest.raises(EndpointFault, match="no room to reply") as e:
        p.sample(long, max_tokens=8)
    assert e.value.kind == "oversized"
    p.close()


def test_scoring_given_text_is_not_offered(policy: LlamaCppPolicy) -> None:
    with pytest.raises(LogprobsUnavailable):
        policy.logprobs(CHAT, "5")
    assert policy.count_tokens("hello world") == 2


@pytest.mark.parametrize("make, message", [
    (lambda d: d, "is a directory"),
    (lambda d: (d / "notes.txt").write_text("not a model") and d / "notes.txt", "not a GGUF file"),
    (lambda d: d / "absent.gguf", "does not exist"),
])
def test_bad_files_are_refused_before_loading(tmp_path: Path, make, message: str) -> None:
    p = LlamaCppPolicy(make(tmp_path))
    with pytest.raises(PolicyError, match=message):
        p.check()
    with pytest.raises(PolicyError, match=message):
        p.load()


def test_thread_count_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ARENA_TEACHER_THREADS", "1")
    assert default_threads() == 1
    monkeypatch.setenv("ARENA_TEACHER_THREADS", "two")
    with pytest.raises(PolicyError, match="whole number"):
        default_threads()
    top = 4 * usable_cpus()
    monkeypatch.setenv("ARENA_TEACHER_THREADS", str(top))
    assert default_threads() == top
    # a new user's 100000 made llama.cpp abort (std::bad_alloc) at the first decode, mid-session
    for bad in ("0", str(top + 1), "100000"):
        monkeypatch.setenv("ARENA_TEACHER_THREADS", bad)
        with pytest.raises(PolicyError, match=rf"must be in \[1, {top}\].*got {bad}$"):
            default_threads()
