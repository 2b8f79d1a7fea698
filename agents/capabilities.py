"""What a backend can do beyond :class:`agents.policy.Policy`'s three methods, declared rather than probed.

Every backend class declares ``capabilities: frozenset[Capability]`` (:class:`agents.policy.BasePolicy`
gives ``{SAMPLE}`` to one that declares nothing more); callers ask :func:`has_capability` (or check a
requirement with :func:`missing_capabilities`) instead of looking for attributes. The role specs a
user writes (``local``, ``openai:MODEL`` …) carry the same sets without any model loaded
(:mod:`agents.backends.registry`), so a training objective (:mod:`arena.objectives`) that names the
capabilities it needs from the solver is refused when the config is validated ("objective `grpo`
needs a solver that scores any completion by teacher forcing: `openai:gpt-4o` cannot").

After the capability declarations of vLLM's model interfaces (``SupportsLoRA``, ``SupportsPP``)
and prime-rl's backend checks, kept as plain data so that a check needs no model loaded.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Protocol


class Capability(StrEnum):
    """One thing a backend can do; the value is the word used in error messages and docs."""

    SAMPLE = "sample"  # Policy.sample: n completions of one chat
    SAMPLE_BATCH = "sample-batch"  # many chats in one batched decode (agents.policy.BatchSampler.sample_batch)
    SAMPLE_LOGPROBS = "sample-logprobs"  # each sampled Completion carries its tokens' log-probs (π_old of a rollout)
    SCORE = "score"  # per-token log-probs of any given completion by teacher forcing (Policy.logprobs)
    TRAIN_ADAPTER = "train-adapter"  # local torch weights a LoRA adapter trains on and loads into
    LOGITS = "logits"  # next-token logits at a position (a judge's verdict tokens as a classifier's)
    JSON_SCHEMA = "json-schema"  # decoding constrained to a JSON schema (sample(..., json_schema=))
    PREFILL = "prefill"  # the assistant reply can be started with given text (sample(..., prefill=))


# Each reads after "a backend that …" (error messages: "needs a solver that scores any completion by teacher forcing").
CAPABILITY_HELP: dict[Capability, str] = {
    Capability.SAMPLE: "samples completions",
    Capability.SAMPLE_BATCH: "samples many prompts in one batched decode",
    Capability.SAMPLE_LOGPROBS: "returns the log-probs of the tokens it samples",
    Capability.SCORE: "scores any completion by teacher forcing",
    Capability.TRAIN_ADAPTER: "has local weights a LoRA adapter trains on",
    Capability.LOGITS: "returns next-token logits",
    Capability.JSON_SCHEMA: "decodes under a JSON schema",
    Capability.PREFILL: "continues a prefilled reply",
}


class DeclaresCapabilities(Protocol):
    """Anything that declares what it can do: a policy instance or class, or a role spec's backend kind."""

    capabilities: frozenset[Capability]


def capabilities_of(backend: DeclaresCapabilities) -> frozenset[Capability]:
    """The capabilities ``backend`` (a policy instance or class) declares, as :class:`Capability` members.

    Raises:
        ValueError: a declared value that is no :class:`Capability` (a typo in a backend's declaration).
    """
    return frozenset(Capability(c) for c in backend.capabilities)


def has_capability(backend: DeclaresCapabilities, capability: Capability) -> bool:
    """Whether ``backend`` declares ``capability``."""
    return capability in capabilities_of(backend)


def missing_capabilities(declared: Iterable[Capability], needed: Iterable[Capability]) -> list[Capability]:
    """The members of ``needed`` not in ``declared``, in ``needed``'s order (empty: the requirement holds)."""
    have = set(declared)
    return [c for c in needed if c not in have]


def describe_capabilities(capabilities: Iterable[Capability]) -> str:
    """``capabilities`` as a phrase that reads after "a backend that": ``"scores … and has local weights …"``.

    Args:
        capabilities: in the order they should be named (e.g. :func:`missing_capabilities`' result).
    """
    phrases = [CAPABILITY_HELP[Capability(c)] for c in capabilities]
    return ", ".join(phrases[:-1]) + (" and " if len(phrases) > 1 else "") + (phrases[-1] if phrases else "")
