"""Hints for groups that all failed: the teacher's guidance for a guided re-attempt.

When every rollout of a group fails there is nothing to compare and no policy gradient.
Guide (Nath et al., arXiv 2506.13923) and Agent-RLVR (arXiv 2506.11425) put guidance in
context and re-attempt; the guided successes are later trained as if the hint had been absent.
Three modes, combinable:

- ``plan``: the teacher writes a strategy, shown the reference answer (and a rubric task's
  judge-only reference) as privileged information but told not to state it (a plan that does,
  states any number the task does not hold — a worked-out result — or repeats judge-only text,
  is rejected and regenerated);
- ``feedback``: the verifier's and critic's feedback on the failed attempts, Agent-RLVR's
  environment feedback (a line that would reveal the answer is dropped; of a rubric grade only
  its reward and the verifier's note are shown, never the judge's critique);
- ``answer``: the verifiable answer is given and the solver must derive it — STaR's
  rationalization (Zelikman et al. 2022). A rubric-only task has none: its free-text reference
  is the judge's only, so no ``answer`` part is written for it.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from agents.policy import Message, Policy
from lessons.text import contains_token, neutralise_model_text

HINT_MODES = ("plan", "feedback", "answer")

# Must make the teacher give a strategy for THIS task without the final answer.
# Written for the 1.5B teacher. Told only "never write the answer", it wrote it in 4 of 4 plans; told to "describe
# the steps in words and carry out no calculation", all three of its tries were refused for 14 of 15 all-fail groups
# of a session (the answer, in each of 18 tries replayed). Shown one worked plan that splits the task into operations on the task's own numbers
# and leaves every result to the student, it wrote a plan that passes the screen for 16 of 18 (bench/RESULTS.md,
# issue 31, session 23). :func:`plan_problem` still screens every plan; a plan may state no number the task does not hold.
PLAN_SYSTEM = (
    "You are a teacher. A student failed a task several times. Write a plan of at most 3 short sentences that "
    "splits the task into easier steps the student can do. Each step names an operation on numbers from the task "
    "and leaves its result for the student to work out. Never write the result of any step, and never write the "
    "final answer: the student must compute them. You are shown the correct answer only so that your plan leads to it."
)
# the worked plan, shown for the arithmetic families it is written in (elsewhere its numbers would mislead)
PLAN_EXAMPLE_FAMILIES = frozenset({"chain_sum", "basic_arithmetic"})
PLAN_EXAMPLE_QUESTION = "State the final answer to the following arithmetic problem: 12 - 30 ="
PLAN_EXAMPLE_ANSWER = "-18"
PLAN_EXAMPLE_FAILED = (("12 - 30 = 18", "answer '18' is incorrect"), ("The answer is 42.", "no <answer> tag"))
PLAN_EXAMPLE_REPLY = ("30 is larger than 12, so the result is negative. Work out 30 - 12, then put a minus sign in "
                      "front of it. Write only that number inside the answer tag.")
PART_SEPARATOR = "\n\n"  # between the parts of a hint (plan, feedback, answer)
PLAN_ATTEMPTS = 3  # a plan that states the answer is regenerated up to this many times in all
ECHO_WORDS = 6  # consecutive words a plan may not share with judge-only text (a shorter text: all its words)
NO_ANSWER_PART = "answer part not written (the task has no verifiable answer; its reference is the judge's only)"
# A plan that claims a final answer ("The correct answer is 8", "<answer>8</answer>"): right, it leaks;
# wrong (a small teacher often computes wrongly), it misleads the guided re-attempt. Either way it is no plan.
_ANSWER_CLAIM = re.compile(r"<\s*answer\s*>|\\boxed|\b(?:answer|result)s?\b[^.\n]{0,40}?"
                           r"(?:\b(?:is|must be|would be|should be|will be|equals)\b|[=:])\s*[*_$(\[]*\s*[-−+]?\s*\.?\d",
                           re.IGNORECASE)


class HintModeError(ValueError):
    """An unknown hint mode; the message lists the valid ones (one line)."""


class HintRefused(Exception):
    """No part of a hint could be written without leaking: ``rejected`` says why, one entry per refused attempt or part."""

    def __init__(self, rejected: Sequence[str]) -> None:
        self.rejected = list(rejected)
        super().__init__("; ".join(self.rejected) or "no hint part written")


def parse_hint_modes(values: Iterable[str]) -> tuple[str, ...]:
    """Modes from repeated and/or comma-separated values, in canonical order, deduplicated.

    ``["plan,feedback", "answer"]`` → ``("plan", "feedback", "answer")``; ``["none"]`` → ``()``
    (no hints). Raises :class:`HintModeError` on an unknown mode, on a value with no mode at all
    (``""``, ``","``: an unset shell variable must not turn hints off silently) and on ``none``
    given beside a mode.
    """
    modes: set[str] = set()
    none = False
    for v in values:
        parts = [p.strip().lower() for p in v.split(",")]
        if not any(parts):
            raise HintModeError(f"empty hint mode {v!r}; choose from {', '.join(HINT_MODES)}, or none for no hints")
        for part in filter(None, parts):
            if part == "none":
                none = True
                continue
            if part not in HINT_MODES:
                raise HintModeError(f"unknown hint mode {part!r}; choose from {', '.join(HINT_MODES)} or none")
            modes.add(part)
    if none and modes:
        raise HintModeError(f"hint mode none cannot be combined with {', '.join(sorted(modes))}; give one or the other")
    return tuple(m for m in HINT_MODES if m in modes)


@dataclass
class FailedAttempt:
    """What a hint may use of one failed rollout.

    ``critique`` is the whole grade's critique, for the teacher's plan prompt; ``feedback`` is what
    a ``feedback`` part may show the solver: None means the critique itself (a verifier's, which
    names no rubric criterion); a rubric grade passes its reward and verifier note instead, since
    the judge's critique names the rubric's criteria.
    """

    completion: str
    extracted_answer: str | None
    critique: str
    feedback: str | None = None


@dataclass
class Hint:
    """A written hint: its text, the modes it combines (``"plan+answer"``) and what was rejected on the way."""

    mode: str
    text: str
    rejected: list[str] = field(default_factory=list)


def _clip(text: str, limit: int) -> str:
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def feedback_hint(
    failed: Sequence[FailedAttempt], reference_answer: str | None, limit: int = 4
) -> tuple[str, list[str]]:
    """Agent-RLVR-style environment feedback: each distinct failed answer with what the solver may see of its grade.

    Args:
        failed: the group's failed rollouts; each line shows ``feedback`` (else ``critique``).
        reference_answer: the verifiable answer, kept out of every line; None: the task has none.
        limit: at most this many lines.

    Returns:
        ``(text, rejected)``; a line that would reveal the reference answer is dropped and named
        in ``rejected``.
    """
    lines, rejected, seen = [], [], set()
    for a in failed:
        key = (a.extracted_answer or "").strip()
        if key in seen:
            continue
        seen.add(key)
        shown = f"answered {a.extracted_answer!r}" if a.extracted_answer else "gave no answer"
        note = a.critique if a.feedback is None else a.feedback
        line = f"- An earlier attempt {shown}" + (f": {note}" if note else ".")
        if reference_answer and contains_token(line, reference_answer.strip()):
            rejected.append("feedback line rejected (contains the reference answer)")
            continue
        lines.append(line)
        if len(lines) >= limit:
            break
    if not lines:
        return "", rejected
    return "Feedback on earlier attempts (all wrong):\n" + "\n".join(lines), rejected


def answer_hint(reference_answer: str) -> str:
    """STaR rationalization: the answer is given; the solver must derive it."""
    return (
        f"The correct final answer is {reference_answer.strip()}. Work out the steps that lead to it, "
        f"then give it on the last line as <answer>{reference_answer.strip()}</answer>."
    )


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def repeats_text(text: str, source: str, n: int = ECHO_WORDS) -> bool:
    """Whether ``text`` holds ``n`` consecutive words of ``source`` (all of them when it has fewer, at least 2).

    Case and punctuation are ignored; a one-word source never counts (a single word is no copy).
    """
    src = _words(source)
    k = min(n, len(src))
    if k < 2:
        return False
    words = _words(text)
    grams = {tuple(words[i : i + k]) for i in range(len(words) - k + 1)}
    return any(tuple(src[i : i + k]) in grams for i in range(len(src) - k + 1))


# a numbered list's markers ("1. Add …  2. Subtract …"): numbers of the plan's layout, not of its arithmetic. A
# marker opens the text, a line or a sentence ("… 5. 2. Take …"); "to get 3. Write" ends a sentence with a number
_LIST_MARKER = re.compile(r"(?:^|(?<=\n)|(?<=[.!?:;)]\s))\s*(\d{1,2})[.)](?=\s+[A-Z*])")
_NUMBER = re.compile(r"(?<![\w.])[-−+]?\d+(?:\.\d+)?(?!\w|\.\d)")


_STEP_MARKER = re.compile(r"(?:\*\*)?\b[Ss]tep\s+(\d{1,2})\s*[:.)](?:\*\*)?")


def _without_list_markers(text: str) -> str:
    """``text`` with the markers of a numbered list removed: "1." "2." … or "Step 1:" "Step 2:" … in order
    from 1, at least two of them.

    A lone "1." is kept, and so is a number ending a sentence ("to get 3. Write it"): only a run
    1, 2, … each opening the text, a line or a sentence reads as a list.
    """
    for pattern in (_LIST_MARKER, _STEP_MARKER):
        marks = list(pattern.finditer(text))
        run = 0
        while run < len(marks) and int(marks[run].group(1)) == run + 1:
            run += 1
        if run < 2:
            continue
        out, last = [], 0
        for m in marks[:run]:
            out.append(text[last:m.start()])
            last = m.end()
        text = "".join(out) + text[last:]
    return text


_UNITS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
          "sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def spelled(n: int) -> str | None:
    """``n`` in English words for 0 ≤ n ≤ 999 ("twenty-eight", "one hundred five"); None outside that range."""
    if not 0 <= n <= 999:
        return None
    if n < 20:
        return _UNITS[n]
    if n < 100:
        return _TENS[n // 10] + ("" if n % 10 == 0 else f"-{_UNITS[n % 10]}")
    rest = n % 100
    return f"{_UNITS[n // 100]} hundred" + (f" {spelled(rest)}" if rest else "")


def _spells(text: str, answer: str) -> bool:
    """Whether ``text`` writes ``answer``'s magnitude out in words ("negative three" for -3), hyphens and spaces alike."""
    digits = answer.strip().lstrip("-−+")
    words = spelled(int(digits)) if digits.isdigit() else None
    if words is None:
        return False
    norm = " ".join(re.findall(r"[a-z]+", text.lower()))
    return re.search(rf"\b{re.escape(' '.join(re.findall(r'[a-z]+', words)))}\b", norm) is not None


def _magnitude(number: str) -> float:
    return abs(float(number.replace("−", "-")))


def foreign_numbers(text: str, task: str) -> list[str]:
    """Numbers ``text`` states that ``task`` does not hold (signs ignored, list markers left out), in order.

    A plan that names a number the task does not hold has worked something out: an intermediate
    result, a final one, or a wrong one (the 1.5B teacher's plans: "add 94 and 77 to get 171",
    "subtract 5 from the sum"). Either way the student is told a result instead of how to reach it.
    """
    held = {_magnitude(n) for n in _NUMBER.findall(task)}
    return [n for n in _NUMBER.findall(_without_list_markers(text)) if _magnitude(n) not in held]


# "so the result is negative": the worked plan's sign step, which the teacher copies to tasks it does not fit
_SIGN_CLAIM = re.compile(r"\b(?:result|answer|difference|sum|total)\b[^.;]{0,30}?\b(negative|positive)\b", re.IGNORECASE)


def wrong_sign(text: str, reference_answer: str | None) -> bool:
    """Whether ``text`` says the result is negative (or positive) when the numeric reference answer is not.

    The 1.5B teacher copies the worked plan's "30 is larger than 12, so the result is negative" to
    tasks whose answer is positive (a new user's trial: "84 is larger than 12, so the result is
    negative" for 84 − 12); a plan that misleads the guided re-attempt is no plan. Zero is neither.
    """
    try:
        value = float((reference_answer or "").strip().replace("−", "-"))
    except ValueError:
        return False
    claims = {m.group(1).lower() for m in _SIGN_CLAIM.finditer(text)}
    return ("negative" in claims and value >= 0) or ("positive" in claims and value <= 0)


PLAN_MIN_WORDS = 3  # a plan names at least this many words of two or more letters
PLAN_MIN_LETTER_SHARE = 0.3  # and letters are at least this share of its non-space characters
PLAN_MAX_BRACKET_SHARE = 0.05  # and braces or square brackets at most this share (JSON, nested lists)


# a link, a tag (<plan>, <step>; chat-control tokens are neutralised first), a code fence,
# or a run of 24+ characters with no space (base64, hex, a path)
_NOT_PLAN_TEXT = re.compile(r"://|www\.|</?[A-Za-z|][^<>]{0,40}>|```|\S{24,}")


def not_prose(text: str) -> str | None:
    """Why ``text`` is no plan in words (a reply of brackets, JSON or symbols), or None when it reads as prose.

    An endpoint's reply is untrusted: a new user's fake server answered a plan request with
    ``{"analysis": {"a": {"a": …`` 853 levels deep and with ``[[[[…``, and both were shown to the
    solver as hints. A plan holds no link, tag, code fence or 24-character run without a space
    (base64, a URL), and needs :data:`PLAN_MIN_WORDS` distinct words, letters for
    :data:`PLAN_MIN_LETTER_SHARE` of its non-space characters and braces or square brackets for at
    most :data:`PLAN_MAX_BRACKET_SHARE` of them: "Work out (3 + 4) * 2 first, then
    subtract" passes, a plan may restate the task's arithmetic; "Compute (3 + 4) * 2 - 5" (one word) does not.
    """
    if _NOT_PLAN_TEXT.search(neutralise_model_text(text)):  # chat-control tokens are neutralised at the prompt, not refused
        return "is not a plan in words: a link, markup, code or an encoded blob"
    words = {w.lower() for w in re.findall(r"[^\W\d_]{2,}", text)}
    dense = [c for c in text if not c.isspace()]
    letters = sum(c.isalpha() for c in dense)
    brackets = sum(c in "{}[]" for c in dense)
    if (len(words) < PLAN_MIN_WORDS or letters < PLAN_MIN_LETTER_SHARE * len(dense)
            or brackets > PLAN_MAX_BRACKET_SHARE * len(dense)):
        return (f"is not a plan in words: {len(words)} distinct words, {letters} letters and {brackets} brackets "
                f"of {len(dense)} characters")
    return None


def plan_problem(text: str, reference_answer: str | None, judge_only: Sequence[str] = (), task: str | None = None) -> str | None:
    """Why a plan cannot be shown to the solver, or None when it can.

    A plan is refused when it is empty; contains the reference answer, its magnitude ("28" of
    "-28": the answer but for its sign) or either spelled out ("negative three", :func:`spelled`),
    unless the task shows that number itself ("subtract 9 from 0" names a number of "0 - 9", not
    the magnitude of its answer -9); claims any final answer ("the answer is 8", an ``<answer>``
    tag: right, it leaks; wrong, it misleads the guided re-attempt); says the result is negative
    or positive when it is not (:func:`wrong_sign`); states a number the task does not hold
    (:func:`foreign_numbers`: a worked-out result; checked when ``task`` is given); or repeats
    judge-only text (:func:`repeats_text`: a rubric task's free-text reference, a criterion title
    the teacher read in a critique); or is not prose (:func:`not_prose`: brackets, JSON, symbols, under
    three words). A numbered list's markers ("1." "2.") are not numbers of the plan.

    Args:
        text: the plan.
        reference_answer: the verifiable answer; None: the task has none.
        judge_only: texts the solver must never see.
        task: the task text whose numbers a plan may name.

    Returns:
        The reason (a short phrase without parentheses), or None.
    """
    if not text:
        return "empty"
    body = _without_list_markers(text)

    def shown(token: str) -> bool:  # the plan states it, and the task does not already show it
        return contains_token(body, token) and not (task is not None and contains_token(task, token))

    if reference_answer:
        answer = reference_answer.strip()
        if shown(answer):
            return "contains the reference answer"
        magnitude = answer.lstrip("-−+").strip()
        if magnitude != answer and magnitude and shown(magnitude):
            return "contains the reference answer without its sign"
        if _spells(text, answer) and not (task is not None and _spells(task, answer)):
            return "spells out the reference answer"
    if _ANSWER_CLAIM.search(text):
        return "states a final answer"
    if wrong_sign(text, reference_answer):
        return "states the wrong sign of the result"
    if task is not None and (extra := foreign_numbers(text, task)):
        return f"states a number the task does not hold: {', '.join(dict.fromkeys(extra))}"
    if any(repeats_text(text, t) for t in judge_only if t):
        return "repeats the judge's reference or rubric"
    return not_prose(text)


_PLAN_REJECTED = re.compile(r"plan rejected \(([^():]*)")


def plan_rejection_reasons(record: str | None) -> list[str]:
    """The reasons of every refused plan attempt in a record (lines of ``episodes.hint_rejected``), in order, details left out.

    ``"plan rejected (states a number the task does not hold: 5): '…'; …"`` gives
    ``["states a number the task does not hold"]``: the format :func:`plan_hint` writes.
    """
    return [m.group(1).strip() for m in _PLAN_REJECTED.finditer(record or "")]


def _plan_request(question: str, reference_answer: str | None, judge_reference: str | None,
                  failed: Sequence[tuple[str, str]]) -> str:
    """The plan teacher's user turn: the task, the privileged references, up to 4 failed attempts (neutralised)."""
    lines = [f"Task: {_clip(question, 600)}"]
    if reference_answer:
        lines.append(f"Correct answer (do NOT write it): {reference_answer}")
    if judge_reference:
        lines.append(f"Reference answer, for you only (do NOT copy it): {_clip(judge_reference, 600)}")
    lines.append("Failed attempts:")
    # the attempts and critiques are model-written: neutralised before they enter the teacher's prompt
    lines += [f"- {_clip(neutralise_model_text(text), 200)!r} ({neutralise_model_text(critique, one_line=True)})"
              for text, critique in failed[:4]]
    lines.append("Write the plan now, without the answer.")
    return "\n".join(lines)


def plan_messages(question: str, failed: Sequence[FailedAttempt], reference_answer: str | None,
                  judge_reference: str | None = None, family: str | None = None) -> list[Message]:
    """The plan teacher's chat: :data:`PLAN_SYSTEM`, the worked plan for an arithmetic family, then this task.

    The worked plan (:data:`PLAN_EXAMPLE_REPLY`, shown for :data:`PLAN_EXAMPLE_FAMILIES` only)
    shows the form a plan takes: operations on the task's own numbers, every result left to the
    student, and the answer format.
    """
    msgs: list[Message] = [{"role": "system", "content": PLAN_SYSTEM}]
    if family is not None and family.split(":")[0] in PLAN_EXAMPLE_FAMILIES:
        msgs += [{"role": "user", "content": _plan_request(PLAN_EXAMPLE_QUESTION, PLAN_EXAMPLE_ANSWER, None, PLAN_EXAMPLE_FAILED)},
                 {"role": "assistant", "content": PLAN_EXAMPLE_REPLY}]
    msgs.append({"role": "user", "content": _plan_request(question, reference_answer, judge_reference,
                                                          [(a.completion, a.critique) for a in failed])})
    return msgs


def plan_hint(
    teacher: Policy,
    question: str,
    failed: Sequence[FailedAttempt],
    reference_answer: str | None,
    max_tokens: int = 96,
    temperature: float = 0.3,
    seed: int | None = None,
    attempts: int = PLAN_ATTEMPTS,
    judge_reference: str | None = None,
    judge_only: Sequence[str] = (),
    family: str | None = None,
) -> tuple[str, list[str]]:
    """The teacher's plan; regenerated (new seed) while :func:`plan_problem` refuses it.

    The teacher is privileged: it reads the verifiable answer, a rubric task's judge-only
    reference and every attempt's whole critique; the plan may repeat none of them, and may name
    no number the task does not hold.

    Args:
        teacher: the teacher's policy.
        question: the task text.
        failed: the group's failed rollouts (at most 4 are shown).
        reference_answer: the verifiable answer; None: the task has none.
        max_tokens, temperature, seed: sampling settings (try i uses seed + i).
        attempts: plans asked for at most.
        judge_reference: a rubric task's free-text reference, shown to the teacher only.
        judge_only: further texts the plan must not repeat (criterion titles in the critiques).
        family: the task's family (its spec's name part): arithmetic families get the worked plan.

    Returns:
        ``(text, rejected)``; ``text`` is "" when every attempt was refused. ``rejected`` holds one
        ``"plan rejected (REASON): 'PLAN'"`` per refused attempt.
    """
    msgs = plan_messages(question, failed, reference_answer, judge_reference, family)
    rejected = []
    for i in range(attempts):
        s = None if seed is None else seed + i
        text = _clip(teacher.sample(msgs, n=1, temperature=temperature, max_tokens=max_tokens, seed=s)[0].text, 600)
        problem = plan_problem(text, reference_answer, [judge_reference or "", *judge_only], task=question)
        if problem is None:
            return text, rejected
        rejected.append(f"plan rejected ({problem})" + (f": {text!r}" if text else ""))
    return "", rejected


def write_hint(
    teacher: Policy,
    modes: Sequence[str],
    question: str,
    failed: Sequence[FailedAttempt],
    reference_answer: str | None,
    max_tokens: int = 96,
    seed: int | None = None,
    judge_reference: str | None = None,
    judge_only: Sequence[str] = (),
    family: str | None = None,
) -> Hint:
    """Write a hint combining ``modes`` for one all-fail group.

    The verifiable answer and the judge-only reference arrive apart: the first may be given to
    the solver (``answer``), the second is privileged information for the plan's teacher only.

    Args:
        teacher: the teacher's policy (used by ``plan`` only).
        modes: a subset of :data:`HINT_MODES`, canonical order.
        question: the task text.
        failed: the group's failed rollouts.
        reference_answer: the task's verifiable answer (:func:`arena.tasks.verify.verifiable_answer`);
            None for a rubric-only task: its ``answer`` part is then rejected (:data:`NO_ANSWER_PART`).
        max_tokens: cap on a plan's length.
        seed: sampling seed for the plan.
        judge_reference: a rubric task's free-text reference (:func:`arena.tasks.verify.judge_reference`):
            shown to the plan's teacher, never written into the hint.
        judge_only: further texts no part may show (criterion titles the plan's teacher reads in critiques).
        family: the task's family, for the plan's worked example (:func:`plan_messages`).

    Returns:
        The :class:`Hint` (``rejected``: the parts and plan attempts refused on the way).

    Raises:
        HintModeError: a mode outside :data:`HINT_MODES`.
        HintRefused: no part could be written without leaking the answer; it carries the reasons.
    """
    parts, used, rejected = [], [], []
    for mode in modes:
        if mode == "plan":
            text, rej = plan_hint(teacher, question, failed, reference_answer, max_tokens=max_tokens, seed=seed,
                                  judge_reference=judge_reference, judge_only=judge_only, family=family)
        elif mode == "feedback":
            text, rej = feedback_hint(failed, reference_answer)
        elif mode == "answer":
            text, rej = (answer_hint(reference_answer), []) if reference_answer else ("", [NO_ANSWER_PART])
        else:
            raise HintModeError(f"unknown hint mode {mode!r}")
        rejected += rej
        if text:
            parts.append(text)
            used.append(mode)
    if not parts:
        raise HintRefused(rejected)
    return Hint("+".join(used), PART_SEPARATOR.join(parts), rejected)


def hint_parts(mode: str | None, text: str, keep: Collection[str]) -> str:
    """The parts of a stored hint whose mode is in ``keep``, in order (the others removed).

    Context distillation keeps only the parts that carry over to other tasks: a hint's
    ``answer`` part makes the teacher an oracle for its one task, and its ``feedback`` part
    names that task's wrong answers, which no prompt without the hint can know
    (:func:`arena.distill.objectives.opcd.build_opcd_dataset`).

    Args:
        mode: the stored hint's modes joined by ``+`` (``hints.mode``, e.g. ``"plan+feedback"``);
            None: unknown.
        text: the hint text; :func:`write_hint` separates its parts with a blank line (plan and
            answer parts hold no line break; feedback lines are separated by single ones).
        keep: the modes whose parts are kept (a subset of :data:`HINT_MODES`).

    Returns:
        The kept parts joined as :func:`write_hint` joins them; "" when none is kept, and when the
        parts cannot be told apart (mode unknown, or the count of parts differs from the count of
        modes), since the text then may hold a removed part anywhere.
    """
    if mode is None:
        return ""
    modes = mode.split("+")
    if set(modes) <= set(keep):
        return text
    parts = text.split(PART_SEPARATOR)
    if len(parts) != len(modes):
        return ""
    return PART_SEPARATOR.join(p for m, p in zip(modes, parts, strict=True) if m in keep)
