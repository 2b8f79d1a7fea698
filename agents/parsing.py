"""Parse untrusted model text into a pydantic model: strip fences, extract JSON, validate, retry once.

Small and remote models alike return JSON wrapped in code fences, followed by chatter,
truncated mid-object, or with wrong types. :func:`extract_json_object` recovers the first
balanced JSON object (closing a truncated one where that is unambiguous);
:func:`parse_with_retry` validates it and, on failure, asks the model once more with the
validation error shown, then gives up and returns the failure for the caller to record
(the pattern tau2-bench #555 and gepa #390 argue for: never crash the session on a bad reply).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from agents.capabilities import Capability, has_capability
from agents.policy import Policy
from lessons.text import neutralise_model_text

M = TypeVar("M", bound=BaseModel)

_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)(?:```|$)", re.S)


MAX_JSON_DEPTH = 32  # nesting levels a model's JSON may have; our schemas need 4 (CASE-004)


class ParseError(ValueError):
    """The text holds no JSON object that validates; the message says what is wrong (one line)."""


def strip_code_fences(text: str) -> str:
    """The content of the first fenced block (```json … ```), or ``text`` unchanged if none."""
    m = _FENCE.search(text)
    return m.group(1) if m else text


def _brackets(text: str) -> tuple[list[str], bool]:
    """The brackets of ``text`` outside JSON strings, in order, and whether the text ends inside a string."""
    out: list[str] = []
    in_str = esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "{[]}":
            out.append(ch)
    return out, in_str


def _close_truncated(fragment: str) -> str:
    """Close an object cut off mid-way: end an open string, then close open brackets in order."""
    stack: list[str] = []
    brackets, in_str = _brackets(fragment)
    for ch in brackets:
        if ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif stack:
            stack.pop()
    out = fragment + ('"' if in_str else "")
    out = re.sub(r",\s*$", "", out)  # a dangling comma before the closers
    out = re.sub(r':\s*$', ": null", out)
    return out + "".join(reversed(stack))


def json_depth(text: str) -> int:
    """The deepest bracket nesting (``{`` / ``[``) in ``text``, strings skipped; linear time, no recursion."""
    depth = deepest = 0
    for ch in _brackets(text)[0]:
        if ch in "{[":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth = max(0, depth - 1)
    return deepest


def extract_json_object(text: str) -> dict:
    """The first JSON object in ``text``.

    Handles code fences, prose before/after the object, and an object truncated at the end
    of the text (max tokens reached). Raises :class:`ParseError` when there is none, and when
    the reply nests deeper than :data:`MAX_JSON_DEPTH` (which would otherwise escape as a
    ``RecursionError`` from the decoder: CASE-004).
    """
    body = strip_code_fences(text)
    start = body.find("{")
    if start < 0:
        raise ParseError("no JSON object found in the reply")
    depth = json_depth(body[start:])
    if depth > MAX_JSON_DEPTH:
        raise ParseError(f"JSON nested {depth} levels deep; at most {MAX_JSON_DEPTH} are accepted")
    decoder = json.JSONDecoder(strict=False)  # raw newlines inside strings: common, and harmless once validated
    try:
        obj, _ = decoder.raw_decode(body[start:])
    except (json.JSONDecodeError, RecursionError):
        try:
            obj = json.loads(_close_truncated(body[start:]), strict=False)
        except (json.JSONDecodeError, RecursionError) as e:
            where = f" at line {e.lineno} column {e.colno}" if isinstance(e, json.JSONDecodeError) else ""
            raise ParseError(f"invalid JSON: {getattr(e, 'msg', 'nested too deeply')}{where}") from None
    if not isinstance(obj, dict):
        raise ParseError(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def parse_model(text: str, model: type[M]) -> M:
    """Extract the JSON object from ``text`` and validate it as ``model``.

    Raises:
        ParseError: no object, invalid JSON, or a validation error (summarised on one line).
    """
    obj = extract_json_object(text)
    try:
        return model.model_validate(obj)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'object'}: {err['msg']}" for err in e.errors()[:5])
        raise ParseError(f"does not match the schema: {problems}") from None


@dataclass
class ParseOutcome(Generic[M]):
    """The result of :func:`parse_with_retry`: ``value`` or ``error``, plus every raw reply."""

    value: M | None
    error: str | None
    raw: list[str]

    @property
    def attempts(self) -> int:
        return len(self.raw)


def parse_with_retry(ask: Callable[[str | None], str], model: type[M], retries: int = 1) -> ParseOutcome[M]:
    """Ask the model, parse the reply as ``model``; on failure ask again with the error shown.

    Args:
        ask: called with ``None`` the first time and with the previous error message on a
            retry; returns the model's raw text.
        model: the pydantic model the reply must validate against.
        retries: extra attempts after the first (1 by default).

    Returns:
        A :class:`ParseOutcome`; never raises on bad model output.
    """
    raw: list[str] = []
    error: str | None = None
    for _ in range(1 + retries):
        text = ask(error)
        raw.append(text)
        try:
            return ParseOutcome(parse_model(text, model), None, raw)
        except ParseError as e:
            error = str(e)
    return ParseOutcome(None, error, raw)


def reply_constraints(policy: Policy, prefill: str, json_schema: dict | None) -> tuple[str, dict | None]:
    """The ``(prefill, json_schema)`` a reply of ``policy`` is asked with: each kept only where the backend declares it.

    A JSON schema is kept where ``policy`` declares :attr:`Capability.JSON_SCHEMA` (llama.cpp's grammar from a
    JSON schema); the prefill where it declares :attr:`Capability.PREFILL` and no schema is kept (the grammar
    starts at the reply's first character). Either is ``""`` / None otherwise.

    Args:
        policy: the backend that will be asked.
        prefill: text the reply should start with ("" for none).
        json_schema: a schema the reply should follow, or None.
    """
    schema = json_schema if json_schema is not None and has_capability(policy, Capability.JSON_SCHEMA) else None
    return (prefill if has_capability(policy, Capability.PREFILL) and schema is None else ""), schema


def sample_and_parse(
    policy: Policy,
    messages: Sequence[dict[str, str]],
    model: type[M],
    retry_template: str,
    temperature: float,
    max_tokens: int,
    seed: int | None,
    prefill: str = "",
    retries: int = 1,
    json_schema: dict | None = None,
) -> ParseOutcome[M]:
    """Sample one reply from ``policy`` and parse it as ``model``, retrying with the error shown.

    The retry appends the bad reply and ``retry_template.format(error=...)`` to ``messages``
    and samples with ``seed + attempt`` (the same seed often reproduces the same bad reply); the
    bad reply is neutralised (:func:`lessons.text.neutralise_model_text`) before it is shown again.
    ``prefill`` starts the reply on backends that declare :attr:`Capability.PREFILL` and is part of
    the returned raw text. ``json_schema`` constrains decoding on backends that declare
    :attr:`Capability.JSON_SCHEMA` (llama.cpp's grammar from a JSON schema); the prefill is then
    dropped, since the grammar starts at the reply's first character (:func:`reply_constraints`).
    Shared by the teacher and the task proposer.

    Returns:
        A :class:`ParseOutcome`; never raises on bad model output.
    """
    prefill, schema = reply_constraints(policy, prefill, json_schema)
    replies: list[str] = []

    def ask(error: str | None) -> str:
        msgs = list(messages)
        if error is not None and replies:
            msgs += [
                {"role": "assistant", "content": neutralise_model_text(replies[-1])},  # model text: no control tokens
                {"role": "user", "content": retry_template.format(error=error)},
            ]
        kwargs: dict[str, Any] = {"prefill": prefill} if prefill else {}
        if schema is not None:
            kwargs["json_schema"] = schema
        attempt_seed = None if seed is None else seed + len(replies)
        out = policy.sample(msgs, n=1, temperature=temperature, max_tokens=max_tokens, seed=attempt_seed, **kwargs)[0]
        replies.append(prefill + out.text)
        return replies[-1]

    return parse_with_retry(ask, model, retries=retries)
