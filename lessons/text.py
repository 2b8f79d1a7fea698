"""Small text helpers shared by the roles, the library and its audits."""

from __future__ import annotations

import re
import unicodedata


def contains_token(text: str, token: str) -> bool:
    """Whether ``token`` occurs in ``text`` as a whole word or number (not inside 157 or 57.5).

    Used to keep a reference answer out of lessons, hints and critiques, and to find held-out
    answers in stored text. A sentence-ending period after the token still counts as a match.
    """
    return re.search(rf"(?<![\w.]){re.escape(token)}(?!\w|\.\d)", text) is not None


def redact_token(text: str, token: str, mask: str = "[reference answer withheld]") -> str:
    """``text`` with every whole-word occurrence of ``token`` (as :func:`contains_token` finds them) replaced by ``mask``."""
    if not token.strip():
        return text
    return re.sub(rf"(?<![\w.]){re.escape(token.strip())}(?!\w|\.\d)", mask, text)


# Chat-control tokens of any template (<|im_start|>, <|eot_id|>, <s>, [INST], <<SYS>>,
# <start_of_turn>), our section tags (<lessons>, </lessons, with any spacing/case, closed or
# not), and markdown role headers (### Instruction).
_CONTROL = re.compile(
    r"<\|[^|>]*\|>|</?\s*s\s*>|\[/?\s*INST\s*\]|<</?\s*SYS\s*>>"
    r"|<\s*/?\s*(start_of_turn|end_of_turn|bos|eos|pad|system|user|assistant)\s*>"
    r"|<\s*/?\s*/?\s*lessons?\b\s*/?\s*>?|#{2,}\s*(?=\w)",
    re.I,
)
# A role name followed by a colon or a line break, where a chat transcript would start a turn.
_ROLE = re.compile(r"(?<![\w-])(system|user|assistant|developer|human|ai|tool|model)\s*(:|\n)", re.I)


def neutralise_lesson(text: str) -> str:
    """Lesson text as it may appear inside the solver's ``<lessons>`` section.

    Lessons are data in the prompt. A lesson (written by a model, imported, or typed by a
    person) that tries to close its section (``</lessons>``), open a chat turn
    (``<|im_start|>system``, ``[INST]``, ``<<SYS>>``, ``<start_of_turn>``, ``### Instruction``)
    or impersonate a role (``System: ...``, ``Assistant:``) is neutralised: invisible format
    characters (zero-width spaces, bidi marks: Unicode category Cf) are dropped first so they
    cannot split a tag, control tokens and section tags are removed, ``Role:`` becomes
    ``role -``, and the text is one line (no turn can start on a new line). Ordinary advice
    (``End with <answer></answer> tags``) is unchanged.
    """
    if not text.isascii():  # ASCII has no format characters: skip the per-character scan
        text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
    text = _CONTROL.sub(" ", text)
    text = _ROLE.sub(lambda m: f"{m.group(1).lower()} - ", text)
    return re.sub(r"\s+", " ", text).strip()


def normalise_lesson_text(text: str) -> str:
    """The form under which two lesson texts count as duplicates.

    Lower-case, punctuation removed, whitespace collapsed: ``"Add the numbers, then
    check."`` and ``"add the numbers then check"`` are the same lesson.
    """
    t = re.sub(r"[^\w\s]|_", " ", text.lower())
    return " ".join(t.split())
