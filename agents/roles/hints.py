"""Hints for groups that all failed: the teacher's guidance for a guided re-attempt.

When every rollout of a group fails there is nothing to compare and no policy gradient.
Guide (Nath et al., arXiv 2506.13923) and Agent-RLVR (arXiv 2506.11425) put guidance in
context and re-attempt; the guided successes are later trained as if the hint had been absent.
Three modes, combinable:

- ``plan``: the teacher writes a strategy, shown the reference answer (and a rubric task's
  judge-only reference) as privileged information but told not to state it (a plan that does,
  or repeats judge-only text, is rejected and regenerated);
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
# Written for the 1.5B teacher, which, told only "never write the answer", wrote it in 4 of 4 plans: the plan
# describes the steps in words with the task's own numbers and carries out no calculation, so it has no result to
# state; :func:`plan_problem` still screens every plan.
PLAN_SYSTEM = (
    "You are a teacher. A student failed a task several times. Write a short plan (at most 3 sentences) "
    "that tells the student HOW to solve it: the method, and the step the failed attempts got wrong. "
    "Describe the steps in words, using only the numbers that appear in the task: do not carry out any "
    "calculation and never write an intermediate or final result. You are shown the correct answer only so "
    "that your plan leads to it; NEVER write it."
)
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


def plan_problem(text: str, reference_answer: str | None, judge_only: Sequence[str] = ()) -> str | None:
    """Why a plan cannot be shown to the solver, or None when it can.

    A plan is refused when it is empty, contains the reference answer or its magnitude ("28" of
    "-28": the answer but for its sign), claims any final answer ("the answer is 8", an
    ``<answer>`` tag; right, it leaks; wrong, it misleads the guided re-attempt), or repeats
    judge-only text (:func:`repeats_text`: a rubric task's free-text reference, a criterion title
    the teacher read in a critique).

    Args:
        text: the plan.
        reference_answer: the verifiable answer; None: the task has none.
        judge_only: texts the solver must never see.
    """
    if not text:
        return "empty"
    if reference_answer:
        answer = reference_answer.strip()
        if contains_token(text, answer):
            return "contains the reference answer"
        magnitude = answer.lstrip("-−+").strip()
        if magnitude != answer and magnitude and contains_token(text, magnitude):
            return "contains the reference answer without its sign"
    if _ANSWER_CLAIM.search(text):
        return "states a final answer"
    if any(repeats_text(text, t) for t in judge_only if t):
        return "repeats the judge's reference or rubric"
    return None


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
) -> tuple[str, list[str]]:
    """The teacher's plan; regenerated (new seed) while :func:`plan_problem` refuses it.

    The teacher is privileged: it reads the verifiable answer, a rubric task's judge-only
    reference and every attempt's whole critique; the plan may repeat none of them.

    Args:
        teacher: the teacher's policy.
        question: the task text.
        failed: the group's failed rollouts (at most 4 are shown).
        reference_answer: the verifiable answer; None: the task has none.
        max_tokens, temperature, seed: sampling settings (try i uses seed + i).
        attempts: plans asked for at most.
        judge_reference: a rubric task's free-text reference, shown to the teacher only.
        judge_only: further texts the plan must not repeat (criterion titles in the critiques).

    Returns:
        ``(text, rejected)``; ``text`` is "" when every attempt leaked or was empty.
    """
    lines = [f"Task: {_clip(question, 600)}"]
    if reference_answer:
        lines.append(f"Correct answer (do NOT write it): {reference_answer}")
    if judge_reference:
        lines.append(f"Reference answer, for you only (do NOT copy it): {_clip(judge_reference, 600)}")
    lines.append("Failed attempts:")
    # the attempts and critiques are model-written: neutralised before they enter the teacher's prompt
    lines += [f"- {_clip(neutralise_model_text(a.completion), 200)!r} ({neutralise_model_text(a.critique, one_line=True)})"
              for a in failed[:4]]
    lines.append("Write the plan now, without the answer.")
    msgs: list[Message] = [{"role": "system", "content": PLAN_SYSTEM}, {"role": "user", "content": "\n".join(lines)}]
    rejected = []
    for i in range(attempts):
        s = None if seed is None else seed + i
        text = _clip(teacher.sample(msgs, n=1, temperature=temperature, max_tokens=max_tokens, seed=s)[0].text, 600)
        problem = plan_problem(text, reference_answer, [judge_reference or "", *judge_only])
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
) -> Hint | None:
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

    Returns:
        The :class:`Hint`, or None when no part could be written without leaking the answer.

    Raises:
        HintModeError: a mode outside :data:`HINT_MODES`.
    """
    parts, used, rejected = [], [], []
    for mode in modes:
        if mode == "plan":
            text, rej = plan_hint(teacher, question, failed, reference_answer, max_tokens=max_tokens, seed=seed,
                                  judge_reference=judge_reference, judge_only=judge_only)
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
        return None
    return Hint("+".join(used), PART_SEPARATOR.join(parts), rejected)


def hint_parts(mode: str | None, text: str, keep: Collection[str]) -> str:
    """The parts of a stored hint whose mode is in ``keep``, in order (the others removed).

    Context distillation keeps only the parts that carry over to other tasks: a hint's
    ``answer`` part makes the teacher an oracle for its one task, and its ``feedback`` part
    names that task's wrong answers, which no prompt without the hint can know
    (:func:`arena.distill.opcd.build_opcd_dataset`).

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
