"""A deterministic policy for tests: completions come from a Python function, not a model."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from agents.capabilities import Capability
from agents.policy import BasePolicy, Completion, LogprobsUnavailable, Message

Responder = Callable[[Sequence[Message], int], str]


class FakePolicy(BasePolicy):
    """Implements :class:`agents.policy.Policy` with a scripted ``responder``.

    Args:
        responder: ``(messages, i) -> text`` for the i-th completion of a call (i in 0..n-1).
        name: the policy's name in stored rows.

    Records every call in ``calls`` (the messages and n) so tests can check what each role saw.
    Tokens are whitespace-separated words; log-probs are unavailable (neither sampled nor scored),
    and ``sample`` takes no prefill and no JSON schema: it only samples.
    """

    capabilities = frozenset({Capability.SAMPLE})

    def __init__(self, responder: Responder, name: str = "fake") -> None:
        self.responder = responder
        self.name = name
        self.calls: list[tuple[list[Message], int]] = []

    def sample(
        self,
        messages: Sequence[Message],
        n: int = 1,
        temperature: float = 0.7,
        max_tokens: int = 256,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
    ) -> list[Completion]:
        self.calls.append((list(messages), n))
        out = []
        for i in range(n):
            text = self.responder(messages, i)
            words = text.split()
            finish = "length" if len(words) > max_tokens else "stop"
            text = " ".join(words[:max_tokens]) if finish == "length" else text
            out.append(Completion(text=text, token_ids=list(range(min(len(words), max_tokens))), finish_reason=finish,
                                  prompt_tokens=sum(len(m["content"].split()) for m in messages)))
        return out

    def logprobs(self, messages: Sequence[Message], completion: str) -> list[float]:
        raise LogprobsUnavailable("the fake policy has no log-probs")

    def count_tokens(self, text: str) -> int:
        return len(text.split())
