"""The backend registry: parsing each spec kind and bad specs, capabilities without a model, building, and
:func:`require_capabilities`' message (the config's checks made of it: tests/arena/test_config_backends.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.backends import registry
from agents.backends.registry import (
    BACKENDS,
    UnknownSpec,
    build_policy,
    capability_gap,
    kinds,
    normalise_spec,
    parse_spec,
    preflight,
    require_capabilities,
    spec_capabilities,
    spec_choices,
    spec_list,
)
from agents.backends.teacher_files import EMBEDDED_TEACHER
from agents.capabilities import Capability
from agents.policy import PolicyError

ALL_KINDS = "local, openai:MODEL, llamacpp:PATH or qwen2.5-coder-1.5b"


@pytest.mark.parametrize(("spec", "kind", "argument"), [
    ("local", "local", None),
    ("openai:gpt-4o", "openai", "gpt-4o"),
    ("openai:org/model:tag", "openai", "org/model:tag"),  # only the first colon separates
    ("llamacpp:models/x.gguf", "llamacpp", "models/x.gguf"),
    (EMBEDDED_TEACHER, EMBEDDED_TEACHER, None),
])
def test_each_spec_kind_parses(spec, kind, argument) -> None:
    parsed = parse_spec(spec)
    assert (parsed.kind.name, parsed.argument, parsed.text) == (kind, argument, spec)
    assert parsed.capabilities == parsed.kind.capabilities == spec_capabilities(spec)


@pytest.mark.parametrize("spec", ["", "gpt4", "LOCAL", "local:x", "openai:", "llamacpp:", "openai", "llamacpp",
                                  "openai:a\nb", "openai: gpt", "llamacpp:x.gguf ", "qwen2.5-coder-1.5b:x", "verifier"])
def test_a_bad_spec_is_one_line_naming_it_and_the_kinds(spec) -> None:
    with pytest.raises(UnknownSpec) as e:
        parse_spec(spec)
    assert str(e.value) == f"unknown model {spec!r}; use {ALL_KINDS}" and "\n" not in str(e.value)
    with pytest.raises(PolicyError, match="unknown model"):
        build_policy(spec)  # the factory's error is the one make_roles always gave


def test_normalising_makes_a_gguf_path_absolute_only(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert normalise_spec("llamacpp:m.gguf") == f"llamacpp:{tmp_path / 'm.gguf'}"
    assert normalise_spec("llamacpp:~/m.gguf") == f"llamacpp:{Path.home() / 'm.gguf'}"
    for spec in ("local", "openai:m", EMBEDDED_TEACHER, f"llamacpp:{tmp_path / 'm.gguf'}"):
        assert normalise_spec(spec) == spec


def test_the_registry_declares_what_each_policy_class_declares() -> None:
    from agents.backends.llamacpp import LlamaCppPolicy
    from agents.backends.local import LocalPolicy
    from agents.backends.openai_backend import OpenAIPolicy

    classes = {"local": LocalPolicy, "openai": OpenAIPolicy, "llamacpp": LlamaCppPolicy, EMBEDDED_TEACHER: LlamaCppPolicy}
    assert [k.name for k in BACKENDS] == list(classes)
    for kind in BACKENDS:
        assert kind.capabilities == classes[kind.name].capabilities, kind.name


def test_choices_and_help_come_from_the_registry() -> None:
    assert spec_list() == ALL_KINDS
    assert spec_choices() == "'local', 'openai:MODEL', 'llamacpp:PATH' or 'qwen2.5-coder-1.5b'"
    assert spec_choices([Capability.SAMPLE_LOGPROBS]) == "'local' or 'openai:MODEL'"
    assert [k.name for k in kinds([Capability.SCORE, Capability.TRAIN_ADAPTER])] == ["local"]
    assert spec_list([Capability.JSON_SCHEMA], about=True).startswith("llamacpp:PATH (any GGUF")


def test_the_same_spec_shares_a_policy_unless_its_adapter_or_in_flight_differ() -> None:
    a = Path("/adapters/a")
    assert parse_spec("local").instance_key(a, 8) == ("local", a, 0)
    assert parse_spec("openai:m").instance_key(a, 8) == ("openai:m", None, 8)
    assert parse_spec(EMBEDDED_TEACHER).instance_key(None, 8) == (EMBEDDED_TEACHER, None, 0)


def test_build_and_preflight(tmp_path, monkeypatch) -> None:
    from agents.backends import teacher_files
    from agents.backends.local import LocalPolicy

    local = build_policy("local", adapter=tmp_path / "lora")  # lazy: nothing loads here
    assert isinstance(local, LocalPolicy) and local.adapter == tmp_path / "lora"
    notes = tmp_path / "notes.txt"
    notes.write_text("hello")
    with pytest.raises(PolicyError, match="is not a GGUF file"):
        preflight(f"llamacpp:{notes}")
    with pytest.raises(PolicyError, match="is not a GGUF file"):
        build_policy(f"llamacpp:{notes}")
    preflight("openai:m")  # nothing to check without a request
    preflight("local")

    def missing():
        raise teacher_files.TeacherFilesError("embedded teacher part 7 of 22 is missing")

    monkeypatch.setattr(teacher_files, "embedded_teacher_path", missing)
    with pytest.raises(PolicyError, match="part 7 of 22 is missing"):
        build_policy(EMBEDDED_TEACHER)


def test_token_counters_without_a_model() -> None:
    from lessons.library.curation import approx_tokens

    assert registry.token_counter("openai:m") is approx_tokens
    assert registry.counts_tokens_offline("local") and not registry.counts_tokens_offline("llamacpp:x.gguf")
    assert registry.offline_tokenizer_choices() == "'local' or 'openai:MODEL'"
    with pytest.raises(UnknownSpec, match="'local' or 'openai:MODEL'"):
        registry.token_counter("llamacpp:x.gguf")


# --------------------------------------------------------------------------- require_capabilities


def test_require_capabilities_names_the_spec_and_what_it_lacks() -> None:
    with pytest.raises(ValueError) as e:
        require_capabilities("openai:gpt-4o", [Capability.SAMPLE, Capability.SCORE], "objective `grpo`")
    assert str(e.value) == ("objective `grpo` needs a solver that scores any completion by teacher forcing: "
                            "`openai:gpt-4o` cannot; use 'local'")
    require_capabilities("local", [Capability.SCORE, Capability.TRAIN_ADAPTER], "objective `grpo`")  # holds
    assert capability_gap(EMBEDDED_TEACHER, [Capability.SAMPLE_BATCH, Capability.LOGITS], "the judge bench", "judge") == (
        "the judge bench needs a judge that samples many prompts in one batched decode and returns next-token logits: "
        "`qwen2.5-coder-1.5b` cannot")  # nobody has logits yet: no kind to suggest
    with pytest.raises(UnknownSpec, match="unknown model 'gpt4'"):
        require_capabilities("gpt4", [Capability.SCORE], "objective `grpo`")
