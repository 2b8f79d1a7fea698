"""A :class:`~agents.policy.Policy` backed by any OpenAI-compatible chat endpoint.

Works with OpenAI, vLLM (``--enable-lora``: the adapter name goes in ``model``), Ollama and
llama.cpp's servers, through the official ``openai`` client. The endpoint and key come from
the constructor or from ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY``.

What the chat API gives and does not give:

* sampling log-probs of the sampled tokens (``logprobs=True``), where the server supports
  them; they land in :attr:`Completion.logprobs`;
* no token ids (``Completion.token_ids`` stays ``[]``) and no scoring of an arbitrary
  completion, so :meth:`OpenAIPolicy.logprobs` raises :class:`LogprobsUnavailable`;
* no tokenizer, so :meth:`OpenAIPolicy.count_tokens` is an approximation.

Every failure of the endpoint surfaces as a one-line :class:`PolicyError` naming the endpoint
and the model; retries are the ``openai`` client's own bounded retries (``max_retries``), and
rate limits (HTTP 429) are retried further with tenacity, waiting what the server's
``Retry-After`` header asks.

Faults of one reply — no choices, a null content, a body that is not JSON or is cut off, a 5xx
or a timeout that outlived the retries, a closed connection — are retried a bounded number of
times (``fault_retries``) and then raised as :class:`~agents.policy.EndpointFault` with its
``kind``: it costs the caller one rollout, not the session. A reply longer than ``max_tokens``
can produce (``MAX_CHARS_PER_TOKEN`` characters a token) is cut to that bound, marked finish
reason ``length`` and flagged (``Completion.fault == "oversized"``), so nothing stored,
checkpointed or shown to the teacher grows with what a server sends.

Concurrency: episodes running in threads share one policy; at most ``max_concurrency``
requests are in flight at once (a bounded semaphore). A group of k completions is one request
with ``n=k`` where the server honours ``n`` (OpenAI, vLLM); servers that ignore it (llama.cpp)
are remembered and get k concurrent single-completion requests instead.
"""

from __future__ import annotations

import email.utils
import json
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

import openai
from openai import OpenAI
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt

from agents.backends.registry import OPENAI_CAPABILITIES
from agents.policy import BasePolicy, Completion, EndpointFault, LogprobsUnavailable, Message, PolicyError
from lessons.credentials import redact_credentials

DEFAULT_API_KEY = "sk-no-key"  # local servers (llama.cpp, vLLM, Ollama) accept any key
_CHARS_PER_TOKEN = 4
_MAX_ERROR_CHARS = 300
MAX_RETRY_AFTER_S = 300.0  # longest Retry-After we wait; a longer one fails the request
_BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)  # waits after a 429 without Retry-After
MAX_CHARS_PER_TOKEN = 16  # generous: no BPE token of English text is longer; a longer reply ignored max_tokens
_FAULT_BACKOFF_S = (0.5, 1.0, 2.0)  # waits before retrying a faulty reply (no choices, not JSON, ...)
_SHOWN_BODY_CHARS = 80  # characters of a bad body quoted in an error


def bound_reply(text: str, max_tokens: int) -> tuple[str, bool]:
    """``text`` cut to what ``max_tokens`` tokens can spell (``max_tokens × MAX_CHARS_PER_TOKEN`` characters).

    Returns:
        ``(text, cut)``: the bounded text and whether it was cut.
    """
    bound = max(1, int(max_tokens)) * MAX_CHARS_PER_TOKEN
    return (text, False) if len(text) <= bound else (text[:bound], True)


def retry_after_seconds(headers: Any, now: datetime | None = None) -> float | None:
    """Seconds a 429/503 response asks the client to wait, from its headers; None if it does not say.

    Reads ``retry-after-ms`` (OpenAI's, milliseconds) first, then ``Retry-After`` (RFC 9110:
    delay-seconds or an HTTP-date, counted from ``now``). Negative values count as 0.
    """
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - (now or datetime.now(timezone.utc))).total_seconds())


def _one_line(text: object, limit: int = _MAX_ERROR_CHARS) -> str:
    """``text`` collapsed to a single line of at most ``limit`` characters, URL passwords masked before the cut."""
    line = redact_credentials(" ".join(str(text).split()))
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _status_message(err: openai.APIStatusError) -> str:
    """The server's own error message from an HTTP error response, as one line."""
    body = err.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return _one_line(inner["message"])
        if isinstance(inner, str) and inner:
            return _one_line(inner)
        if body.get("detail"):
            return _one_line(body["detail"])
    return _one_line(err.message)


def _connection_reason(err: openai.APIConnectionError, timeout_s: float) -> str:
    """Why a connection failed, e.g. ``[Errno 111] Connection refused``."""
    if isinstance(err, openai.APITimeoutError):
        return f"timed out after {timeout_s:g}s"
    cause = err.__cause__
    reason = str(cause) if cause is not None and str(cause) else str(err)
    return _one_line(reason)


def _never_connected(err: BaseException) -> bool:
    """Whether a connection error happened before a connection was made (refused, no route, DNS), not mid-reply.

    Walks the exception chain for the transport's ``ConnectError`` (by name: the ``openai`` client
    may ship its own copy of httpx) or an ``OSError`` raised while connecting.
    """
    seen: BaseException | None = err
    for _ in range(10):
        if seen is None:
            return False
        if type(seen).__name__ in ("ConnectError", "ConnectTimeout") or isinstance(
            seen, (ConnectionRefusedError, ConnectionAbortedError)
        ):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _trim_to_text(text: str, tokens: list[str], logprobs: list[float]) -> list[float]:
    """Drop log-probs of tokens that lie past ``text`` (a stop sequence the server removed).

    Servers such as llama.cpp's report the token that produced the stop sequence although
    the text no longer contains it. Only trims when the token strings provably spell out
    ``text`` followed by the removed suffix; otherwise returns ``logprobs`` unchanged.
    """
    joined = "".join(tokens)
    if len(tokens) != len(logprobs) or len(joined) <= len(text) or not joined.startswith(text):
        return logprobs
    kept: list[float] = []
    consumed = 0
    for token, lp in zip(tokens, logprobs):
        if consumed >= len(text):
            break
        kept.append(lp)
        consumed += len(token)
    return kept


# Requests in a row that end in an endpoint fault before a session stops (resumable): a dead endpoint
# otherwise costs every later rollout its bounded retries, for the rest of a long session.
MAX_CONSECUTIVE_FAULTS = 25


class OpenAIPolicy(BasePolicy):
    """A chat model behind an OpenAI-compatible endpoint (``openai`` client).

    Args:
        model: model name the server knows (for vLLM LoRA serving, the adapter name).
        base_url: endpoint root, e.g. ``http://127.0.0.1:8000/v1``; defaults to
            ``$OPENAI_BASE_URL``, else the ``openai`` client's default (api.openai.com).
        api_key: defaults to ``$OPENAI_API_KEY``, else the placeholder ``"sk-no-key"`` so
            local servers that check no key work without configuration.
        timeout_s: per-request timeout in seconds.
        max_retries: retries the ``openai`` client makes on connection errors, 408/409/429
            and 5xx responses (with backoff); 0 disables them.
        max_concurrency: requests in flight at once, over all threads using this policy.
        rate_limit_retries: further attempts after a 429 the client's own retries did not
            clear, each after the server's ``Retry-After`` (at most ``MAX_RETRY_AFTER_S``) or,
            without one, a backoff of 1, 2, 4, … 30 s.
        http_client: an ``httpx.Client`` for the ``openai`` client (proxies, tests).
        fault_retries: further attempts after a faulty reply (no choices, null content, not
            JSON, cut-off JSON), after 0.5, 1, 2 s; then :class:`EndpointFault`.

    Raises:
        PolicyError: no model name, ``max_concurrency`` < 1, or a base URL that does not parse
            (named with its password masked).

    Attributes:
        name: ``"openai:<model>"``.
        model: the model name sent with every request.
        base_url: the effective endpoint root (for messages), its password masked as ``***``.

    Capabilities: sampling, with the sampled tokens' log-probs requested on every call (returned
    where the server gives them). No scoring of given text (:meth:`logprobs` raises), no prefill,
    no JSON schema, no batch of chats, no local weights; its context window is unknown (None).
    """

    capabilities = OPENAI_CAPABILITIES  # agents.backends.registry: known there without importing this module

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        max_concurrency: int = 8,
        rate_limit_retries: int = 6,
        http_client: Any = None,
        fault_retries: int = 2,
        max_consecutive_faults: int = MAX_CONSECUTIVE_FAULTS,
    ) -> None:
        if not model:
            raise PolicyError("the openai backend needs a model name")
        if max_concurrency < 1:
            raise PolicyError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.model = model
        self.name = f"openai:{model}"
        self.timeout_s = float(timeout_s)
        url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        try:
            self._client = OpenAI(
                base_url=url,
                api_key=api_key or os.environ.get("OPENAI_API_KEY") or DEFAULT_API_KEY,
                timeout=self.timeout_s,
                max_retries=max_retries,
                **({"http_client": http_client} if http_client is not None else {}),
            )
        except Exception as e:  # the transport's InvalidURL (the client may ship its own httpx)
            if url is None:
                raise
            shown = redact_credentials(url)
            # the parser's own message may quote a piece of the password ("Invalid port: 's3'"): only without one
            why = f" ({_one_line(e)})" if shown == url else " (percent-encode a '/' in its password as %2F)"
            raise PolicyError(f"endpoint base URL {shown} is not a valid URL{why}; use one such as "
                              "http://127.0.0.1:8000/v1") from None
        # every message names the endpoint by this: a base URL's user:password@ is shown as user:***@
        self.base_url = redact_credentials(str(self._client.base_url).rstrip("/"))
        self._request_logprobs = True  # switched off if the server rejects the parameter
        self.max_concurrency = max_concurrency
        self._slots = threading.BoundedSemaphore(max_concurrency)
        self.rate_limit_retries = rate_limit_retries
        self.fault_retries = fault_retries
        # a dead endpoint: this many requests in a row that ended in a fault stop the session (resumable)
        self.max_consecutive_faults = max_consecutive_faults
        self._consecutive_faults = 0
        self._fault_lock = threading.Lock()
        self.supports_n: bool | None = None  # learnt from the first reply to n > 1
        self._sleep: Callable[[float], None] = time.sleep  # tests record the waits instead

    # ------------------------------------------------------------------ errors

    def _policy_error(self, err: openai.OpenAIError) -> PolicyError:
        """Translate an ``openai`` exception into a one-line :class:`PolicyError` naming the endpoint and the model.

        Transient faults (a timeout, a closed connection, a 5xx) become :class:`EndpointFault`.
        """
        if isinstance(err, openai.APITimeoutError):
            return EndpointFault(
                f"endpoint {self.base_url} sent no reply within {self.timeout_s:g} s for model '{self.model}'", "timeout"
            )
        if isinstance(err, openai.APIConnectionError):
            reason = _connection_reason(err, self.timeout_s)
            if _never_connected(err):
                return EndpointFault(
                    f"cannot reach OpenAI-compatible endpoint at {self.base_url} for model '{self.model}': {reason}",
                    "connection",
                )
            return EndpointFault(
                f"endpoint {self.base_url} closed the connection without a complete reply for model "
                f"'{self.model}': {reason}",
                "connection",
            )
        if isinstance(err, openai.AuthenticationError):
            return PolicyError(
                f"endpoint {self.base_url} rejected the API key (HTTP 401): set OPENAI_API_KEY "
                f"to a valid key ({_status_message(err)})"
            )
        if isinstance(err, openai.PermissionDeniedError):
            return PolicyError(
                f"endpoint {self.base_url} denied access to model '{self.model}' (HTTP 403): "
                f"check OPENAI_API_KEY ({_status_message(err)})"
            )
        if isinstance(err, openai.NotFoundError):
            return PolicyError(
                f"model '{self.model}' not found at {self.base_url} "
                f"(HTTP 404: {_status_message(err)}; check the model name and that the URL ends in /v1)"
            )
        if isinstance(err, openai.APIStatusError):
            message = (f"endpoint {self.base_url} returned HTTP {err.status_code} for model "
                       f"'{self.model}': {_status_message(err)}")
            return EndpointFault(message, "http_5xx") if err.status_code >= 500 else PolicyError(message)
        return PolicyError(f"OpenAI-compatible endpoint at {self.base_url} failed for model '{self.model}': {_one_line(err)}")

    def _reply_fault(self, response: Any) -> EndpointFault | None:
        """What is wrong with a parsed reply (not a completion object, no choices, a null content), else None."""
        if not hasattr(response, "choices"):  # the client hands back the body text when it is not JSON
            return EndpointFault(
                f"endpoint {self.base_url} returned a reply that is not JSON for model '{self.model}': "
                f"{_one_line(response, _SHOWN_BODY_CHARS)!r}", "not_json",
            )
        if not response.choices:
            return EndpointFault(f"endpoint {self.base_url} returned a reply with no choices for model '{self.model}'",
                                 "empty_choices")
        for c in response.choices:
            message = getattr(c, "message", None)
            if message is None or (message.content is None and not getattr(message, "tool_calls", None)):
                return EndpointFault(
                    f"endpoint {self.base_url} returned a choice without content for model '{self.model}'",
                    "content_null",
                )
        return None

    def _decode_fault(self, err: json.JSONDecodeError) -> EndpointFault:
        """The fault of a body that did not parse: cut off (the error is at its end) or not JSON at all."""
        doc = err.doc or ""
        shown = _one_line(doc, _SHOWN_BODY_CHARS)
        at_end = err.pos >= len(doc.rstrip()) or err.msg.startswith("Unterminated string")
        if doc.lstrip()[:1] in ("{", "[") and at_end:
            return EndpointFault(
                f"endpoint {self.base_url} returned JSON cut off after {len(doc)} characters for model "
                f"'{self.model}': {shown!r}", "truncated_json",
            )
        return EndpointFault(
            f"endpoint {self.base_url} returned a reply that is not JSON for model '{self.model}': {shown!r}", "not_json"
        )

    # ------------------------------------------------------------------ sampling

    def _create(self, messages: Sequence[Message], n: int, **kwargs: Any) -> Any:
        """One usable reply (:meth:`_create_with_retries`), counting requests that end in a fault in a row.

        One fault costs one rollout; ``max_consecutive_faults`` of them in a row, with no usable
        reply between, mean the endpoint is down, and every later rollout would fail the same way
        after its retries: the session stops there instead (everything stored so far is kept, and
        ``--resume`` continues once the endpoint is back).

        Raises:
            EndpointFault: the reply stayed faulty.
            PolicyError: a misconfiguration, or the endpoint failed ``max_consecutive_faults`` requests in a row.
        """
        try:
            response = self._create_with_retries(messages, n, **kwargs)
        except EndpointFault as err:
            with self._fault_lock:
                self._consecutive_faults += 1
                down = 0 < self.max_consecutive_faults <= self._consecutive_faults
            if down:
                raise PolicyError(
                    f"endpoint {self.base_url} for model '{self.model}' failed {self._consecutive_faults} requests in a "
                    f"row (last: {err}); stopping the session here, with everything so far stored: fix the endpoint "
                    "and run again with --resume"
                ) from None
            raise
        with self._fault_lock:
            self._consecutive_faults = 0
        return response

    def _create_with_retries(self, messages: Sequence[Message], n: int, **kwargs: Any) -> Any:
        """One usable ``chat.completions.create`` reply, a faulty one retried ``fault_retries`` times.

        Raises:
            EndpointFault: the reply stayed faulty (see :meth:`_reply_fault`, :meth:`_decode_fault`,
                and the transient HTTP and connection faults of :meth:`_policy_error`).
            PolicyError: a misconfiguration (bad key, unknown model, another 4xx).
        """
        for attempt in range(1 + max(0, self.fault_retries)):
            try:
                response = self._create_once(messages, n, **kwargs)
                fault = self._reply_fault(response)
            except json.JSONDecodeError as err:
                fault = self._decode_fault(err)
            except EndpointFault as err:
                if err.kind in ("http_429", "timeout", "connection", "http_5xx"):
                    raise  # the client (and tenacity for 429s) already retried these within their bounds
                fault = err
            if fault is None:
                return response
            if attempt < self.fault_retries:
                self._sleep(_FAULT_BACKOFF_S[min(attempt, len(_FAULT_BACKOFF_S) - 1)])
        tries = 1 + max(0, self.fault_retries)
        raise EndpointFault(f"{fault} ({tries} attempt{'s' if tries > 1 else ''})", fault.kind)

    def _create_once(self, messages: Sequence[Message], n: int, **kwargs: Any) -> Any:
        """One ``chat.completions.create`` call (waiting for a free slot, retrying 429s); errors become :class:`PolicyError`."""
        params: dict[str, Any] = dict(model=self.model, messages=list(messages), **kwargs)
        if n != 1:
            params["n"] = n
        if self._request_logprobs:
            # top_logprobs=0: llama-cpp-python's server only returns log-probs when
            # top_logprobs is set; 0 asks for the sampled tokens' log-probs alone.
            params.update(logprobs=True, top_logprobs=0)
        try:
            for attempt in Retrying(
                retry=retry_if_exception_type(openai.RateLimitError),
                stop=stop_after_attempt(1 + max(0, self.rate_limit_retries)),
                wait=self._rate_limit_wait,
                sleep=self._sleep,
                reraise=True,
            ):
                with attempt, self._slots:
                    return self._client.chat.completions.create(**params)
        except openai.BadRequestError as err:
            if self._request_logprobs and "logprob" in _status_message(err).lower():
                self._request_logprobs = False  # this server/model refuses log-probs
                return self._create_once(messages, n, **kwargs)
            raise self._policy_error(err) from None
        except openai.RateLimitError as err:
            raise EndpointFault(
                f"endpoint {self.base_url} kept rate-limiting requests for model '{self.model}' (HTTP 429; waited "
                f"up to {self.rate_limit_retries} times, at most {MAX_RETRY_AFTER_S:g} s each): {_status_message(err)}; "
                "lower --concurrency or raise the limit", "http_429",
            ) from None
        except openai.OpenAIError as err:
            raise self._policy_error(err) from None
        raise AssertionError("unreachable")  # pragma: no cover - Retrying returns or raises

    def _rate_limit_wait(self, state: RetryCallState) -> float:
        """Seconds to wait after a 429: the server's Retry-After, else 1, 2, 4, … 30 s."""
        err = state.outcome.exception() if state.outcome is not None else None
        asked = retry_after_seconds(getattr(getattr(err, "response", None), "headers", None))
        if asked is not None:
            if asked > MAX_RETRY_AFTER_S:
                raise err  # type: ignore[misc] - not worth waiting for; reported as a PolicyError
            return asked
        return _BACKOFF_S[min(state.attempt_number - 1, len(_BACKOFF_S) - 1)]

    @staticmethod
    def _to_completion(choice: Any, prompt_tokens: int, max_tokens: int) -> Completion:
        """The :class:`Completion` of one choice, its text and log-probs bounded by ``max_tokens``."""
        text = (choice.message.content or "") if choice.message is not None else ""
        text, cut = bound_reply(str(text), max_tokens)
        logprobs: list[float] | None = None
        content = getattr(choice.logprobs, "content", None) if choice.logprobs is not None else None
        if content:
            logprobs = [float(t.logprob) for t in content[: max(1, int(max_tokens))]]
            if not cut:
                logprobs = _trim_to_text(text, [t.token or "" for t in content], logprobs)
        return Completion(
            text=text,
            token_ids=[],
            logprobs=logprobs,
            finish_reason="length" if cut or choice.finish_reason == "length" else "stop",
            prompt_tokens=prompt_tokens if isinstance(prompt_tokens, int) else 0,
            fault="oversized" if cut else None,
        )

    def sample(
        self,
        messages: Sequence[Message],
        n: int = 1,
        temperature: float = 0.7,
        max_tokens: int = 256,
        stop: Sequence[str] | None = None,
        seed: int | None = None,
    ) -> list[Completion]:
        """Sample ``n`` completions of one chat via ``chat.completions.create``.

        Sends one request with ``n=n``. Servers that ignore ``n`` (llama.cpp's servers return a
        single choice) get one more request per missing completion, issued concurrently (at
        most ``max_concurrency`` in flight), and are remembered (:attr:`supports_n` False): later
        groups go straight to ``n`` concurrent single requests. With a ``seed``, the request for
        completion ``i`` uses ``seed + i`` so the completions are not copies of each other.
        Thread-safe. A 429 is retried after the server's ``Retry-After``.

        Log-probs of the sampled tokens are requested (``logprobs=True``) and returned in
        :attr:`Completion.logprobs` where the server provides them, else ``None``;
        ``token_ids`` is always ``[]`` (the chat API returns no ids).

        Args:
            messages: the chat, system message first if any.
            n: number of completions; ``n <= 0`` returns ``[]``.
            temperature: sampling temperature; 0 asks the server for greedy decoding.
            max_tokens: cap on completion tokens per completion.
            stop: strings that end a completion (not included in the text; at most 4 for OpenAI).
            seed: passed to the server (best-effort reproducibility).

        Returns:
            ``n`` :class:`Completion` objects, finish reason ``"length"`` or ``"stop"``; a text
            longer than ``max_tokens × MAX_CHARS_PER_TOKEN`` characters is cut to that bound
            (finish reason ``"length"``, ``fault`` ``"oversized"``).

        Raises:
            EndpointFault: a reply stayed faulty after the bounded retries (no choices, null
                content, not JSON, cut-off JSON, 5xx, timeout, closed connection, rate limited
                past the waits); its ``kind`` says which.
            PolicyError: unknown model, bad API key, or another 4xx.
        """
        if n <= 0:
            return []
        kwargs: dict[str, Any] = dict(temperature=float(temperature), max_tokens=int(max_tokens))
        if stop:
            kwargs["stop"] = list(stop)

        def request(count: int, index: int) -> list[Completion]:
            """``count`` completions starting at position ``index`` of the group (seed + index)."""
            kw = dict(kwargs, **({"seed": seed + index} if seed is not None else {}))
            response = self._create(messages, count, **kw)  # choices checked there
            usage = getattr(response, "usage", None)
            prompt_tokens = getattr(usage, "prompt_tokens", 0) if usage is not None else 0
            choices = sorted(response.choices, key=lambda c: c.index if isinstance(c.index, int) else 0)
            return [self._to_completion(c, prompt_tokens or 0, max_tokens) for c in choices]

        completions: list[Completion] = []
        if n == 1 or self.supports_n is not False:
            completions = request(n, 0)[:n]
            if n > 1 and self.supports_n is None:
                self.supports_n = len(completions) == n
        missing = list(range(len(completions), n))
        if missing:  # the server ignores n: one request per missing completion, concurrently
            with ThreadPoolExecutor(max_workers=min(len(missing), self.max_concurrency)) as pool:
                for part in pool.map(lambda i: request(1, i)[:1], missing):
                    completions += part
        return completions[:n]

    def logprobs(self, messages: Sequence[Message], completion: str) -> list[float]:
        """Not available: always raises :class:`LogprobsUnavailable`.

        The chat completions API cannot score a given completion (there is no echo of
        assistant tokens). Log-probs of *sampled* tokens come back from :meth:`sample` in
        :attr:`Completion.logprobs` where the server supports them; to score arbitrary text,
        use the local backend (:class:`agents.backends.local.LocalPolicy`).

        Raises:
            LogprobsUnavailable: always.
        """
        raise LogprobsUnavailable(
            f"{self.name}: the chat completions API cannot score a given completion; sampling "
            "log-probs are returned by sample() in Completion.logprobs, and the local backend "
            "scores arbitrary completions"
        )

    def count_tokens(self, text: str) -> int:
        """Approximate token count: ``ceil(len(text) / 4)``.

        Remote models expose no tokenizer, so this is the usual four-characters-per-token
        estimate for English text; good for budgets, not for exact lengths.
        """
        return math.ceil(len(text) / _CHARS_PER_TOKEN)

    # ------------------------------------------------------------------ preflight

    def check(self) -> None:
        """Fail fast if the endpoint is unreachable or does not serve :attr:`model`.

        Lists the server's models (``GET /models``): if the list is non-empty and the model is
        not in it (Ollama's implicit ``:latest`` tag counts as a match), raises. Servers that
        answer the listing with 404 get a one-token chat completion instead.

        Raises:
            PolicyError: unreachable endpoint, bad API key, unknown model (the message lists
                the available models), or another HTTP error.
        """
        try:
            page = self._client.models.list()
        except openai.NotFoundError:
            self._create_once([{"role": "user", "content": "ping"}], 1, max_tokens=1, temperature=0.0)
            return
        except openai.OpenAIError as err:
            raise self._policy_error(err) from None
        available = [m.id for m in (page.data or []) if getattr(m, "id", None)]
        if not available or self.model in available or f"{self.model}:latest" in available:
            return
        shown = ", ".join(available[:20]) + (", ..." if len(available) > 20 else "")
        raise PolicyError(f"model '{self.model}' not found at {self.base_url}; available: {shown}")
