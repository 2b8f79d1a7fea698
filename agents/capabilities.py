"""What a backend can do beyond :class:`agents.policy.Policy`'s three methods, declared rather than probed.

Every backend class declares ``capabilities: frozenset[Capability]``; callers ask
:func:`has_capability` (or check a requirement with :func:`missing_capabilities`) instead of
looking for attributes. A training objective (:mod:`arena.objectives`) names the
capabilities it needs from the solver, and the config is refused before any model loads when the
solver's backend lacks one ("objective `grpo` needs a solver that scores: `openai:` cannot").

After the capability declarations of vLLM's model interfaces (``SupportsLoRA``, ``SupportsPP``)
and prime-rl's backend checks, kept as plain data so that a check needs no model loaded.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum


class Capability(StrEnum):
    """One thing a backend can do; the value is the word used in error messages and docs."""

    SAMPLE = "sample"  # Policy.sample: n completions of one chat
    SAMPLE_BATCH = "sample-batch"  # many chats in one batched decode (sample_batch)
    SCORE = "score"  # per-token log-probs of any given completion by teacher forcing (Policy.logprobs)
    TRAIN_ADAPTER = "train-adapter"  # local torch weights a LoRA adapter trains on and loads into
    LOGITS = "logits"  # next-token logits at a position (a judge's verdict tokens as a classifier's)
    JSON_SCHEMA = "json-schema"  # decoding constrained to a JSON schema
    PREFILL = "prefill"  # the assistant reply can be started with given text


CAPABILITY_HELP: dict[Capability, str] = {
    Capability.SAMPLE: "samples completions",
    Capability.SAMPLE_BATCH: "samples many prompts in one batched decode",
    Capability.SCORE: "scores any completion by teacher forcing",
    Capability.TRAIN_ADAPTER: "has local weights a LoRA adapter trains on",
    Capability.LOGITS: "returns next-token logits",
    Capability.JSON_SCHEMA: "decodes under a JSON schema",
    Capability.PREFILL: "continues a prefilled reply",
}


def capabilities_of(backend: object) -> frozenset[Capability]:
    """The capabilities ``backend`` (a policy instance or class) declares; an undeclared one has only :attr:`Capability.SAMPLE`."""
    declared = getattr(backend, "capabilities", None)
    if declared is None:
        return frozenset({Capability.SAMPLE})
    return frozenset(Capability(c) for c in declared)


def has_capability(backend: object, capability: Capability) -> bool:
    """Whether ``backend`` declares ``capability``."""
    return capability in capabilities_of(backend)


def missing_capabilities(declared: Iterable[Capability], needed: Iterable[Capability]) -> list[Capability]:
    """The members of ``needed`` not in ``declared``, in ``needed``'s order (empty: the requirement holds)."""
    have = set(declared)
    return [c for c in needed if c not in have]
