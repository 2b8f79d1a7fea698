"""Answer extraction: pull the final answer out of a solver completion.

Small models rarely follow the requested format exactly, so extraction is tolerant and
ordered from most to least explicit:

1. the **last** ``<answer>…</answer>`` block (tag case-insensitive; a missing closing tag at
   the end of the text is tolerated, since truncated outputs end mid-answer);
2. the last line that starts with ``Answer:`` / ``Final answer:`` / ``**Answer:**``;
3. the last ``\\boxed{…}`` (the LaTeX convention of math-tuned models);
4. the last number in the text (negatives, decimals, thousands separators).

The extracted string is what the critic's verifier scores (reasoning-gym ``score_answer``,
or exact / numeric match for JSONL tasks, see :func:`arena.tasks.verify.score`).
"""

from __future__ import annotations

import math
import re

__all__ = ["extract_answer", "normalise_number", "normalise_text"]

# an opening <answer> tag (attributes are not expected, stray spaces are)
_OPEN_TAG = re.compile(r"<\s*answer\s*>", re.IGNORECASE)
_CLOSE_TAG = re.compile(r"<\s*/\s*answer\s*>", re.IGNORECASE)
# contents that are the format instruction echoed back, not an answer
_PLACEHOLDERS = {"…", "...", "answer", "your answer", "your answer here", "final answer"}

# a line announcing the answer: "Answer: 42", "Final answer: 42", "**Answer:** 42",
# "**Final Answer**: 42", "### Answer: 42", "- Answer: 42"
_ANSWER_LINE = re.compile(
    r"^[\s>#*_\-]*(?:final\s+)?answer\s*(?:\*\*|__)?\s*[:：]\s*(?P<rest>.*)$",
    re.IGNORECASE,
)

# numbers: thousands-separated first ("1,234.5"), then plain ("-12", "3.14", ".5")
# (not inside an identifier such as "x2" or a version such as "1.2.3")
_NUMBER = re.compile(
    r"(?<![A-Za-z0-9_.])[-−]?(?:\d{1,3}(?:,\d{3})+(?![\d,])(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
)
_STRICT_NUMBER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)?(?:\.\d+)?(?:[eE][+-]?\d+)?")
_FRACTION = re.compile(r"([+-]?\d+)\s*/\s*(\d+)")

_WRAPPERS = ("**", "__", "`", "$", "*")


def normalise_text(s: str) -> str:
    """Normalise text for comparison: strip, case-fold, collapse runs of whitespace.

    >>> normalise_text("  The  Answer\\n is  B ")
    'the answer is b'
    """
    return " ".join(s.casefold().split())


def normalise_number(s: str) -> float | None:
    """Parse a number the way a grader should read it, or ``None`` if ``s`` is not one.

    Accepts a sign (``-``, ``+`` or the Unicode minus ``−``), thousands separators,
    decimals, scientific notation, a simple fraction ``a/b``, surrounding markdown
    (``**``, backticks, ``$``) and a trailing period. NaN and infinities are rejected.

    >>> normalise_number("1,234")
    1234.0
    >>> normalise_number("-3.50.")
    -3.5
    >>> normalise_number("**7**")
    7.0
    >>> normalise_number("3/4")
    0.75
    >>> normalise_number("12 apples") is None
    True
    """
    t = _clean(s, strip_period=True)
    if t is None:
        return None
    t = t.replace("−", "-").replace(" ", "")
    if t.endswith("%"):  # "50%" is not 0.5 in a grader's eyes: refuse rather than guess
        return None
    m = _FRACTION.fullmatch(t)
    if m:
        den = int(m.group(2))
        return int(m.group(1)) / den if den else None
    if not t or not _STRICT_NUMBER.fullmatch(t) or not any(c.isdigit() for c in t):
        return None
    try:
        value = float(t.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def extract_answer(completion: str) -> str | None:
    """Extract the final answer from a solver completion.

    Args:
        completion: the raw completion text.

    Returns:
        The answer, stripped of surrounding whitespace and markdown, or ``None`` when no
        answer can be found (or the answer found is empty).

    Priority: last ``<answer>`` block > last ``Answer:`` line > last ``\\boxed{}`` >
    last number.

    >>> extract_answer("I think 3.\\n<answer> 42 </answer>")
    '42'
    >>> extract_answer("<answer>1</answer> no wait <answer>2</answer>")
    '2'
    >>> extract_answer("so the sum is <answer> 17")  # truncated output
    '17'
    >>> extract_answer("Work...\\n**Final Answer:** `-8`.")
    '-8'
    >>> extract_answer("5 + 7 makes 12, then times 100 gives 1,200")
    '1200'
    >>> extract_answer("I do not know") is None
    True
    """
    if not completion:
        return None
    for finder in (_from_tags, _from_answer_line, _from_boxed, _last_number):
        found = finder(completion)
        if found is not None:
            return found
    return None


# ---------------------------------------------------------------------------------------
# the four extractors, each returning a cleaned, non-empty answer or None


def _from_tags(text: str) -> str | None:
    """The last non-empty ``<answer>`` block; an unclosed last tag runs to the end."""
    opens = list(_OPEN_TAG.finditer(text))
    for k in range(len(opens) - 1, -1, -1):
        m = opens[k]
        # the block ends at its closing tag, or where the next block opens, or at the end
        end = opens[k + 1].start() if k + 1 < len(opens) else len(text)
        close = _CLOSE_TAG.search(text, m.end(), end)
        content = text[m.end() : close.start() if close else end]
        ans = _clean(content)
        if ans is not None and ans.casefold() not in _PLACEHOLDERS:
            return ans
    return None


def _from_answer_line(text: str) -> str | None:
    """The rest of the last ``Answer:`` line (or the next non-empty line if it is empty)."""
    lines = text.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        m = _ANSWER_LINE.match(lines[i])
        if not m:
            continue
        rest = _clean(m.group("rest"), strip_period=True)
        if rest is None:  # "Answer:\n42"
            nxt = next((ln for ln in lines[i + 1 :] if ln.strip()), "")
            rest = _clean(nxt, strip_period=True)
        if rest is not None:
            return rest
    return None


def _from_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{…}`` with balanced braces."""
    start = text.rfind("\\boxed{")
    while start != -1:
        inner = _balanced(text, start + len("\\boxed{"))
        if inner is not None:
            ans = _clean(inner)
            if ans is not None:
                return ans
        start = text.rfind("\\boxed{", 0, start)
    return None


def _last_number(text: str) -> str | None:
    """The last number in the text, thousands separators removed, Unicode minus → ``-``."""
    matches = _NUMBER.findall(text)
    if not matches:
        return None
    return matches[-1].replace(",", "").replace("−", "-")


# ---------------------------------------------------------------------------------------
# helpers


def _balanced(text: str, i: int) -> str | None:
    """Text from ``i`` up to the brace closing an already-open ``{``; None if unbalanced."""
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def _clean(s: str, *, strip_period: bool = False) -> str | None:
    """Strip whitespace, wrapping markdown (``**x**``, ```x```, ``$x$``) and ``\\boxed{}``.

    With ``strip_period``, a single trailing period is dropped too ("42." → "42").
    Returns None for an empty result.
    """
    t = s.strip()
    for _ in range(8):  # a few layers at most: "**`$42$`**."
        before = t
        if strip_period and t.endswith(".") and not t.endswith(".."):
            t = t[:-1].rstrip()
        for w in _WRAPPERS:
            if len(t) >= 2 * len(w) and t.startswith(w) and t.endswith(w):
                t = t[len(w) : -len(w)].strip()
                break
        else:
            # an unmatched bold marker at one end ("**42" from "**Answer:** **42")
            if t.startswith("**") and "**" not in t[2:]:
                t = t[2:].strip()
            elif t.endswith("**") and "**" not in t[:-2]:
                t = t[:-2].strip()
        if t.startswith("\\boxed{") and t.endswith("}"):
            inner = _balanced(t, len("\\boxed{"))
            if inner is not None and len(inner) == len(t) - len("\\boxed{") - 1:
                t = inner.strip()
        if t == before:
            break
    return t or None
