"""The `Policy` interface every model backend implements, and the errors they raise.

A policy samples completions for a chat (a list of ``{"role", "content"}`` messages) and,
where the backend can, scores a given completion token by token. The roles (solver, critic,
teacher) only talk to this interface, so tests inject a deterministic fake and the app
injects the local torch model or an OpenAI-compatible endpoint.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

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
    :class:`agents.backends.fake.FakePolicy` (deterministic, for tests).
    """

    name: str

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
        :class:`LogprobsUnavailable` where the backend cannot score arbitrary text.
        """
        ...

    def count_tokens(self, text: str) -> int:
        """Number of tokens ``text`` takes in this policy's tokenizer (approximate for remote models)."""
        ...


def sample_many(
    policy: Policy,
    chats: Sequence[Sequence[Message]],
    temperature: float,
    max_tokens: int,
    stop: Sequence[str] | None = None,
    seed: int | None = None,
) -> list[Completion]:
    """One completion per chat, batched across chats where the policy has ``sample_batch``.

    Used for held-out evaluation (greedy pass@1 over many tasks). Falls back to one
    ``sample`` call per chat.
    """
    batch: Callable | None = getattr(policy, "sample_batch", None)
    if batch is not None:
        return batch(chats, temperature=temperature, max_tokens=max_tokens, stop=stop, seed=seed)
    return [
        policy.sample(chat, n=1, temperature=temperature, max_tokens=max_tokens, stop=stop, seed=seed)[0]
        for chat in chats
    ]
