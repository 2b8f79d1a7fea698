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


# Chat-control tokens and special-token spellings of the templates our backends render: any
# ``<|...|>`` (ChatML/Qwen/SmolLM ``<|im_start|>``, ``<|im_end|>``, ``<|endoftext|>``, Llama 3's
# ``<|eot_id|>``, Qwen's ``<|fim_prefix|>``), ``<s>`` / ``</s>``, ``[INST]``, ``<<SYS>>``, Gemma's
# ``<start_of_turn>``, the tag-shaped added tokens of Qwen (``<tool_call>``, ``<think>``) and SmolLM2
# (``<file_sep>``, ``<jupyter_code>`` …, the list of its tokenizer.json), role tags, and our own
# section tags (``<lessons>``, ``</lessons``, any spacing or case, closed or not).
_TOKENS = (
    r"<\|[^|>]*\|>|</?\s*s\s*>|\[/?\s*INST\s*\]|<</?\s*SYS\s*>>"
    r"|<\s*/?\s*(?:start_of_turn|end_of_turn|bos|eos|pad|system|user|assistant|tool_call|tool_response|think"
    r"|repo_?name|file_?sep|filename|gh_stars|issue_(?:start|comment|closed)"
    r"|jupyter_(?:start|text|code|output|script)|empty_output|commit_(?:before|msg|after)"
    r"|fim_(?:prefix|middle|suffix|pad))\s*>"
    r"|<\s*/?\s*/?\s*lessons?\b\s*/?\s*>?"
)
_CONTROL_TOKENS = re.compile(_TOKENS, re.I)
# ... and, inside a one-line lesson, markdown headers (``### Instruction``), which a lesson never needs.
_CONTROL = re.compile(_TOKENS + r"|#{2,}\s*(?=\w)", re.I)
_ROLE_NAMES = r"system|user|assistant|developer|human|ai|tool|model"
# A role name followed by a colon or a line break, where a chat transcript would start a turn.
_ROLE = re.compile(rf"(?<![\w-])({_ROLE_NAMES})\s*(:|\n)", re.I)
# A line that starts a turn of a plain-text transcript: ``System:``, ``### Instruction:``, a bare
# ``assistant`` line (what is left of ``<|im_start|>assistant`` once the token is gone).
_LINE_ROLE = re.compile(rf"^([ \t]*)#*[ \t]*({_ROLE_NAMES}|instruction|response|input)[ \t]*(?::|$)", re.I | re.M)


def _until_stable(pattern: re.Pattern[str], text: str) -> str:
    """``text`` with every match of ``pattern`` replaced by a space, again until none is left.

    One pass can leave a token behind: in ``<|im_<|x|>start|>`` removing ``<|x|>`` leaves
    ``<|im_ start|>``, another ``<|...|>`` spelling. Each pass removes at least one ``<`` or ``[``
    or ``#``, so the loop ends.
    """
    while (out := pattern.sub(" ", text)) != text:
        text = out
    return text


def neutralise_model_text(text: str, *, one_line: bool = False) -> str:
    """Model-written text as it may appear inside another model's prompt: data, never chat structure.

    A plan hint, a critique, a rollout shown to the teacher or the judge, a proposed task, a
    criterion proposed by the teacher: text from one model becomes part of another's chat. The
    local backends render the chat with its template and tokenise the result with special tokens
    parsed (transformers' tokenizer, llama.cpp's ``special=True``), so a literal ``<|im_start|>``
    in that text would become a real control token and open a turn of its own (prompt injection
    through the template). Neutralised here:

    - invisible format characters (zero-width spaces, bidi marks: Unicode category Cf) are dropped
      first, so they cannot split a token and slip past the next step;
    - chat-control tokens and special-token spellings (any ``<|...|>``, ``<s>``, ``[INST]``,
      ``<<SYS>>``, ``<start_of_turn>``, Qwen's and SmolLM2's tag-shaped added tokens such as
      ``<tool_call>`` or ``<file_sep>``) and our ``<lessons>`` section tags are replaced by a
      space, until none is left (a space, not nothing: ``<|im_<|x|>start|>`` must not close up
      into a token);
    - a line that would start a turn of a plain-text transcript (``System: ...``, ``### Instruction:``,
      a bare ``assistant`` line) starts ``system -`` instead.

    Multi-line text keeps its line breaks (``one_line=False``, the default): plans and feedback
    hints are written in lines, completions hold working and code, and in a chat template a turn
    starts only at a control token, which is gone. Its other whitespace is kept as it is.
    ``one_line=True`` is the lesson form (:func:`neutralise_lesson`): markdown headers are removed
    too, ``Role:`` anywhere becomes ``role -``, and all whitespace collapses to single spaces, so
    the text stays one item of a numbered list.

    Ordinary text (``End with <answer></answer> tags``, ``a < b | c > d``) comes back unchanged
    (but for whitespace with ``one_line``), and neutralising twice changes nothing.

    Args:
        text: the model-written text.
        one_line: collapse it to one line (lessons).

    Returns:
        The neutralised text, stripped of surrounding whitespace.
    """
    if not text.isascii():  # ASCII has no format characters: skip the per-character scan
        text = "".join(ch for ch in text if unicodedata.category(ch) != "Cf")
    if one_line:
        text = _until_stable(_CONTROL, text)
        text = _ROLE.sub(lambda m: f"{m.group(1).lower()} - ", text)
        return re.sub(r"\s+", " ", text).strip()
    text = "\n".join(text.splitlines())  # \r\n, \r, U+2028 … as \n: the line starts below are every line's
    text = _until_stable(_CONTROL_TOKENS, text)
    text = _LINE_ROLE.sub(lambda m: f"{m.group(1)}{m.group(2).lower()} -", text)
    return text.strip()


def neutralise_lesson(text: str) -> str:
    """Lesson text as it may appear inside the solver's ``<lessons>`` section.

    Lessons are data in the prompt. A lesson (written by a model, imported, or typed by a
    person) that tries to close its section (``</lessons>``), open a chat turn
    (``<|im_start|>system``, ``[INST]``, ``<<SYS>>``, ``<start_of_turn>``, ``### Instruction``)
    or impersonate a role (``System: ...``, ``Assistant:``) is neutralised by
    :func:`neutralise_model_text` in its one-line form: format characters dropped, control tokens
    and section tags removed, ``Role:`` made ``role -``, and the text one line (no list item or
    turn can start on a new line). Ordinary advice (``End with <answer></answer> tags``) is unchanged.

    Args:
        text: the lesson's text.

    Returns:
        The neutralised one-line text.
    """
    return neutralise_model_text(text, one_line=True)


def normalise_lesson_text(text: str) -> str:
    """The form under which two lesson texts count as duplicates.

    Lower-case, punctuation removed, whitespace collapsed: ``"Add the numbers, then
    check."`` and ``"add the numbers then check"`` are the same lesson.
    """
    t = re.sub(r"[^\w\s]|_", " ", text.lower())
    return " ".join(t.split())
