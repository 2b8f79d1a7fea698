"""The `Policy` interface every model backend implements, and the errors they raise.

A policy samples completions for a chat (a list of ``{"role", "content"}`` messages) and,
where the backend can, scores a given completion token by token. The roles (solver, critic,
teacher) only talk to this interface, so tests inject a deterministic fake and the app
injects the local torch model or an OpenAI-compatible endpoint.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast, runtime_checkable

from agents.capabilities import Capability, has_capability

if TYPE_CHECKING:
    import torch

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": str}


class PolicyError(RuntimeError):
    """A backend failed in a way the user can act on (unreachable endpoint, unknown model).

    The message is one line meant for stderr; the CLI prints it and exits with code 2.
    """


class EndpointFault(PolicyError):
    """One reply of an endpoint was unusable after the bounded retries (a transient fault, not a misconfiguration).

    It costs the one rollout or held-out item that asked for it, never the session: callers
    that can go on record the fault and continue. The message names the endpoint, the model
    and what happened.

    Attributes:
        kind: one of :data:`FAULT_KINDS`, for counting faults by kind.
    """

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


FAULT_KINDS = (
    "empty_choices",  # HTTP 200 with no choices
    "content_null",  # a choice whose message content is null
    "not_json",  # a body that is not JSON (HTML, plain text, garbage)
    "truncated_json",  # JSON cut off before its end
    "http_5xx",  # a server error that outlived the client's retries
    "http_429",  # rate-limited past the Retry-After waits
    "timeout",  # no reply within the request timeout
    "connection",  # connection refused, reset or closed without a reply
    "oversized",  # a reply longer than max_tokens can produce, cut to the bound (the rollout is kept)
    "verifier",  # not an endpoint's: the task's verifier raised on the answer, so the rollout is ungraded
)


class LogprobsUnavailable(PolicyError):
    """The backend cannot score an arbitrary completion (e.g. a chat API without echo)."""


@dataclass
class Completion:
    """One sampled completion.

    Attributes:
        text: the completion text, stop sequence and end-of-turn token removed.
        token_ids: completion token ids (length T) where the backend exposes them, else ``[]``.
        logprobs: per-token sampling log-probs (length T, natural log) under the sampling
            context where the backend exposes them, else ``None``.
        finish_reason: ``"stop"`` (end of turn or a stop sequence) or ``"length"`` (max tokens).
        prompt_tokens: number of prompt tokens (0 where unknown).
        fault: a fault the reply carried and the backend repaired, else None: ``"oversized"``
            (longer than ``max_tokens`` can produce; ``text`` was cut to the bound and
            ``finish_reason`` set to ``"length"``).
    """

    text: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None
    finish_reason: str = "stop"
    prompt_tokens: int = 0
    fault: str | None = None

    @property
    def completion_tokens(self) -> int:
        return len(self.token_ids) if self.token_ids else max(1, len(self.text.split()))


class RoleStats:
    """What one model did over a session: calls, tokens and busy seconds, for tokens/s per role in the summary.

    Calls that overlap in time (concurrent episodes decoded in one batch) count their shared wall
    time once: ``seconds`` is the union of the intervals between :meth:`begin` and :meth:`end`.
    Thread-safe.

    Attributes:
        calls: generation calls ended.
        prompt_tokens: prompt tokens of those calls, summed.
        completion_tokens: tokens generated, summed.
        seconds: wall seconds during which at least one call was running.
    """

    def __init__(self) -> None:
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.seconds = 0.0
        self._running = 0
        self._since = 0.0
        self._lock = threading.Lock()

    def begin(self) -> None:
        """A call starts (pair with :meth:`end`)."""
        with self._lock:
            if self._running == 0:
                self._since = time.perf_counter()
            self._running += 1

    def end(self, prompt_tokens: int, completion_tokens: int) -> None:
        """A call ended having read ``prompt_tokens`` and generated ``completion_tokens``."""
        with self._lock:
            self._running -= 1
            if self._running == 0:
                self.seconds += time.perf_counter() - self._since
            self.calls += 1
            self.prompt_tokens += prompt_tokens
            self.completion_tokens += completion_tokens

    @property
    def tokens_per_s(self) -> float | None:
        """Completion tokens per busy second; None before the first call."""
        return self.completion_tokens / self.seconds if self.seconds > 0 else None

    def as_dict(self) -> dict:
        """``{"calls", "prompt_tokens", "completion_tokens", "seconds", "tokens_per_s"}`` (seconds and tok/s rounded)."""
        tps = self.tokens_per_s
        return {"calls": self.calls, "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "seconds": round(self.seconds, 2), "tokens_per_s": None if tps is None else round(tps, 2)}


@runtime_checkable
class Policy(Protocol):
    """A chat model the roles can sample from.

    Implementations: :class:`agents.backends.local.LocalPolicy` (SmolLM2 in torch),
    :class:`agents.backends.openai_backend.OpenAIPolicy` (any OpenAI-compatible server),
    :class:`agents.backends.llamacpp.LlamaCppPolicy` (a GGUF in process, generation only),
    :class:`agents.backends.fake.FakePolicy` (deterministic, for tests). Each inherits
    :class:`BasePolicy`, which gives the declared members below their "not known / nothing to do"
    values, so no caller looks for an attribute with ``getattr``.

    Attributes:
        name: the policy's name in stored rows and the summary (``"openai:<model>"`` …).
        capabilities: what the backend can do beyond sampling (:class:`agents.capabilities.Capability`);
            callers branch on :func:`agents.capabilities.has_capability`. The call a capability adds:
            SAMPLE_BATCH, :meth:`BatchSampler.sample_batch`; PREFILL, ``sample(..., prefill="text")``
            (the reply continues it; it is not part of the returned text); JSON_SCHEMA,
            ``sample(..., json_schema=schema)`` (decoded under it; a prefill is dropped with a schema);
            SCORE, :meth:`logprobs` returns (it raises :class:`LogprobsUnavailable` otherwise).
        context_window: prompt + completion tokens the model takes, or None where unknown (an endpoint).
        stats: the model's call, token and busy-second counters (:class:`RoleStats`), or None where the
            backend keeps none (an endpoint, a test double).
        adapter: the LoRA adapter directory applied on top of local weights, or None (the base model,
            or a backend without local weights; an endpoint serves an adapter under its model name).
        dtype: the torch dtype local weights sample and score in, or None (no local torch weights).
    """

    name: str
    capabilities: frozenset[Capability]
    context_window: int | None
    stats: RoleStats | None
    adapter: Path | None
    dtype: torch.dtype | None

    def sample(
        self,
        messages: Sequence[Message],
        n: int = 1,
        temperature: float = 0.7,
        max_tokens: int = 256,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
    ) -> list[Completion]:
        """Sample ``n`` completions of one chat (one batched call where the backend allows).

        Args:
            messages: the chat, system message first if any.
            n: number of completions (the group size k for the solver).
            temperature: sampling temperature; 0 means greedy decoding.
            max_tokens: cap on completion tokens per completion.
            stop: strings that end a completion (not included in the text).
            seed: makes sampling reproducible where the backend supports it.

        Returns:
            ``n`` :class:`Completion` objects in sampling order.

        Raises:
            PolicyError: the backend is unreachable or misconfigured.
        """
        ...

    def logprobs(self, messages: Sequence[Message], completion: str) -> list[float]:
        """Per-token log-probs of ``completion`` as the assistant reply to ``messages``.

        Returns a list of length T (completion tokens, natural log, float). Raises
        :class:`LogprobsUnavailable` where the backend cannot score arbitrary text (it does not
        declare :attr:`agents.capabilities.Capability.SCORE`).
        """
        ...

    def count_tokens(self, text: str) -> int:
        """Number of tokens ``text`` takes in this policy's tokenizer (approximate for remote models)."""
        ...

    def load(self) -> None:
        """Load the model now rather than on first use (idempotent; a no-op where nothing loads).

        Raises:
            PolicyError: the model cannot be loaded.
        """
        ...

    def close(self) -> None:
        """Free the model (a later call loads it again); a no-op where nothing is held."""
        ...


class BasePolicy:
    """What every backend inherits: the declared members of :class:`Policy` at their defaults.

    A backend overrides what it has: ``capabilities`` (default: it only samples), a known
    ``context_window``, ``stats`` counters, local weights' ``adapter`` and ``dtype``, a ``load`` and
    a ``close`` that do something. ``sample``, ``logprobs`` and ``count_tokens`` are its own.
    """

    capabilities: frozenset[Capability] = frozenset({Capability.SAMPLE})  # a class attribute; a wrapper may set its own
    context_window: int | None = None  # tokens; None: unknown
    stats: RoleStats | None = None  # None: no counters
    adapter: Path | None = None  # None: base weights, or no local weights
    dtype: torch.dtype | None = None  # None: no local torch weights

    def load(self) -> None:
        """Nothing to load: a backend with weights overrides this."""

    def close(self) -> None:
        """Nothing to free: a backend with weights overrides this."""


class BatchSampler(Policy, Protocol):
    """:attr:`Capability.SAMPLE_BATCH`: one completion per chat for many chats in one batched decode."""

    def sample_batch(
        self,
        chats: Sequence[Sequence[Message]],
        temperature: float = 0.0,
        max_tokens: int = 256,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
    ) -> list[Completion]:
        """One completion per chat, in input order (chat i on the random stream of ``seed`` and i).

        Args:
            chats: the chats; temperature, max_tokens, stop, seed: as :meth:`Policy.sample`.
        """
        ...


def batch_sampler(policy: Policy) -> BatchSampler | None:
    """``policy`` as a :class:`BatchSampler` where it declares :attr:`Capability.SAMPLE_BATCH`, else None."""
    return cast(BatchSampler, policy) if has_capability(policy, Capability.SAMPLE_BATCH) else None


def sample_many(
    policy: Policy,
    chats: Sequence[Sequence[Message]],
    temperature: float,
    max_tokens: int,
    stop: Sequence[str] | None = None,
    seed: int | None = None,
) -> list[Completion]:
    """One completion per chat, batched across chats where the policy declares :attr:`Capability.SAMPLE_BATCH`.

    Used for held-out evaluation (greedy pass@1 over many tasks). Falls back to one
    ``sample`` call per chat.
    """
    batch = batch_sampler(policy)
    if batch is not None:
        return batch.sample_batch(chats, temperature=temperature, max_tokens=max_tokens, stop=stop, seed=seed)
    return [
        policy.sample(chat, n=1, temperature=temperature, max_tokens=max_tokens, stop=stop, seed=seed)[0]
        for chat in chats
    ]
