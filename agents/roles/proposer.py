"""The proposer role: writes a new task near one the solver failed or barely solved, with a justified reference answer.

Self-play curricula let the learner's own side write its next tasks (Absolute Zero, arXiv
2505.03335, proposes and verifies tasks with an executor; R-Zero, arXiv 2508.05004, keeps
questions whose answer several samples agree on). Here the proposer (the teacher's model, or
its own ``--proposer``) sees a parent task with its reference answer and how the group did on
it, and writes a variant: a question of the same kind, a step-by-step justification and the
reference answer. The reply is untrusted model output: it is parsed with
:func:`agents.parsing.parse_with_retry` into :class:`ProposedTask` (pydantic), and
:func:`check_proposal` admits it to the pool only if its answer is *checkable*:

- ``verifier``: the family has a reference checker (:data:`REFERENCE_CHECKERS`, e.g.
  ``chain_sum``): the question must parse in the family's own question format, its answer is
  computed exactly, and the family's reasoning-gym ``score_answer`` must give the proposed
  reference full reward against it;
- ``agreement``: otherwise a second policy (the critic's model, else the teacher's) answers the
  question ``m`` times without seeing the proposed reference, and at least a share ``agreement``
  of the extracted answers must match it (exact or numeric match).

Every proposal, accepted or not, comes back as a :class:`ProposalResult` with a reason code and
a one-line reason, for the ``task_proposals`` table.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agents.parsing import sample_and_parse
from agents.policy import Message, Policy
from agents.roles.solver import solver_messages
from lessons.answers import answer_text
from lessons.text import contains_token, neutralise_model_text

# Must make the proposer write ONE variant of the task (same kind, same answer format), derive
# its answer, and reply with only the JSON object.
PROPOSER_SYSTEM = """You write practice tasks for a student. You are shown a task the student failed or barely solved, with its reference answer.
Write ONE new task of the same kind and about the same difficulty: a variant, not a copy. Change the numbers or details, keep the wording and the answer format.
Work out the new task's answer step by step in "justification", then give the final answer alone in "answer".
Reply with ONE JSON object and nothing else:
{"question": "<the new task, worded like the original>", "justification": "<step-by-step derivation that ends with the answer>", "answer": "<the final answer only>"}"""

# Shown on a retry: the validation error of the previous reply.
PROPOSER_RETRY = "Your reply could not be used: {error}. Reply again with ONLY the JSON object described above."

# The local model is steered into the schema by starting its reply (prefill).
PROPOSER_PREFILL = '{"question": "'

# One worked example (a few-shot pair) so small proposers follow the format; a reply that
# copies its question is rejected.
EXAMPLE_QUESTION = "State the final answer to the following arithmetic problem: 31 - 48 ="
EXAMPLE_ANSWER = "-17"
EXAMPLE_REPLY = {
    "question": "State the final answer to the following arithmetic problem: 27 - 54 =",
    "justification": "54 - 27 = 27, and 27 is smaller than 54, so 27 - 54 = -27.",
    "answer": "-27",
}

MAX_QUESTION_CHARS = 2000  # a proposed question longer than this is refused by validation
MAX_ANSWER_CHARS = 200  # likewise the reference answer


class ProposedTask(BaseModel):
    """The proposer's reply: a new task, the derivation of its answer, and the answer.

    Each field is neutralised (:func:`lessons.text.neutralise_model_text`: no chat-control token
    survives) and stripped; one left empty is a validation error.
    """

    model_config = ConfigDict(extra="ignore")

    question: str = Field(
        min_length=1, max_length=MAX_QUESTION_CHARS, description="the new task, worded like the parent task"
    )
    justification: str = Field(
        min_length=1, max_length=4000, description="a step-by-step derivation that ends with the answer"
    )
    answer: str = Field(min_length=1, max_length=MAX_ANSWER_CHARS, description="the reference answer alone")

    @field_validator("answer", mode="before")
    @classmethod
    def _answer_text(cls, v: object) -> object:
        return answer_text(v, allow_empty=True)  # a blank answer is refused by _strip below

    @field_validator("question", "justification", "answer")
    @classmethod
    def _strip(cls, v: str) -> str:
        # an accepted proposal's question becomes a task every role's prompt shows (the solver's,
        # the critic's, the teacher's, the judge's), and its answer the judge's reference and the
        # answer hint: model text, neutralised where it enters (lessons.text.neutralise_model_text)
        v = neutralise_model_text(v)
        if not v:
            raise ValueError("must not be empty")
        return v


# --------------------------------------------------------------------------- reference checkers

# A reference checker computes a family question's answer exactly from its text, or says why
# it cannot (the question is not in the family's format). Returned: (answer, None) or (None, why).
ReferenceChecker = Callable[[str], tuple[str | None, str | None]]

CHAIN_SUM_PREFIX = "State the final answer to the following arithmetic problem:"
_CHAIN_SUM = re.compile(r"^" + re.escape(CHAIN_SUM_PREFIX) + r"\s*(?P<first>-?\d+)(?P<rest>(?:\s*[+-]\s*-?\d+)*)\s*=\s*$")
_CHAIN_SUM_TERM = re.compile(r"\s*([+-])\s*(-?\d+)")
CHAIN_SUM_MAX_TERMS = 12  # reasoning-gym's ChainSumCurriculum tops out at 12 terms of 10 digits
CHAIN_SUM_MAX_DIGITS = 10


def chain_sum_reference(question: str) -> tuple[str | None, str | None]:
    """The exact answer of a reasoning-gym ``chain_sum`` question, parsed from its text.

    The question must have chain_sum's own form, ``"State the final answer to the following
    arithmetic problem: 31 - 48 + 7 ="`` (integers joined by ``+`` / ``-``), with at most
    :data:`CHAIN_SUM_MAX_TERMS` terms of at most :data:`CHAIN_SUM_MAX_DIGITS` digits (the top
    of reasoning-gym's ``ChainSumCurriculum``).

    Returns:
        ``(answer, None)`` with the integer result as text, or ``(None, why)``.
    """
    m = _CHAIN_SUM.match(" ".join(question.split()))
    if m is None:
        return None, f"not a chain_sum question ('{CHAIN_SUM_PREFIX} <integers joined by + and -> =')"
    terms = [int(m.group("first"))]
    for op, num in _CHAIN_SUM_TERM.findall(m.group("rest")):
        terms.append(int(num) if op == "+" else -int(num))
    if len(terms) > CHAIN_SUM_MAX_TERMS:
        return None, f"{len(terms)} terms; chain_sum has at most {CHAIN_SUM_MAX_TERMS}"
    if any(len(str(abs(t))) > CHAIN_SUM_MAX_DIGITS for t in terms):
        return None, f"a term has more than {CHAIN_SUM_MAX_DIGITS} digits"
    return str(sum(terms)), None


# family -> exact answer of a question in that family's format. reasoning-gym families not
# listed here are checked by agreement (their generators cannot verify a foreign question).
REFERENCE_CHECKERS: dict[str, ReferenceChecker] = {"chain_sum": chain_sum_reference}


# --------------------------------------------------------------------------- results


@dataclass
class ProposalResult:
    """One proposal and its verdict.

    Attributes:
        proposal: the validated reply, or None when no reply validated.
        accepted: whether the task enters the pool.
        reason_code: for rejections: ``unparsable``, ``copies_parent``, ``copies_example``,
            ``duplicate``, ``heldout``, ``unjustified``, ``not_checkable``,
            ``verifier_disagrees``, ``no_agreement``, ``too_long``.
        reason: one line saying why (rejections), None when accepted.
        check: ``"verifier"`` or ``"agreement"`` when a check ran.
        check_detail: what the check saw (the computed answer; or the samples' answers and count).
        raw: every raw reply of the proposer.
    """

    proposal: ProposedTask | None
    accepted: bool
    reason_code: str | None = None
    reason: str | None = None
    check: str | None = None
    check_detail: dict[str, Any] = field(default_factory=dict)
    raw: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ParentView:
    """What the proposer sees of the parent task: its text, reference answer and how the group did."""

    family: str
    question: str
    answer: str
    pass_rate: float  # share of the group's unguided rollouts that succeeded
    rollouts: int  # group size


def proposer_messages(parent: ParentView) -> list[Message]:
    """The proposer's chat: system prompt, the worked example (user/assistant), then the parent."""

    def view(family: str, question: str, answer: str, outcome: str) -> str:
        return (
            f"Task family: {family}\nTask: {question}\nReference answer: {answer}\n"
            f"How the student did: {outcome}\nWrite the JSON object for ONE new task now."
        )

    solved = round(parent.pass_rate * parent.rollouts)
    outcome = f"solved {solved} of {parent.rollouts} attempts"
    return [
        {"role": "system", "content": PROPOSER_SYSTEM},
        {"role": "user", "content": view("chain_sum", EXAMPLE_QUESTION, EXAMPLE_ANSWER, "solved 1 of 8 attempts")},
        {"role": "assistant", "content": json.dumps(EXAMPLE_REPLY)},
        {"role": "user", "content": view(parent.family, parent.question, parent.answer, outcome)},
    ]


def propose_task(
    proposer: Policy,
    parent: ParentView,
    temperature: float = 0.7,
    max_tokens: int = 192,
    seed: int | None = None,
) -> tuple[ProposedTask | None, str | None, list[str]]:
    """Ask the proposer for one variant of ``parent``; parse and validate the reply (one retry).

    Args:
        proposer: the proposer's policy.
        parent: the failed or barely-solved task.
        temperature, max_tokens, seed: sampling settings; a retry uses ``seed + 1``.

    Returns:
        ``(proposal, error, raw)``: the validated :class:`ProposedTask` or None with the last
        validation error, and every raw reply. Never raises on bad model output.
    """
    base = proposer_messages(parent)
    outcome = sample_and_parse(
        proposer, base, ProposedTask, PROPOSER_RETRY, temperature, max_tokens, seed, prefill=PROPOSER_PREFILL,
        json_schema=ProposedTask.model_json_schema(),
    )
    return outcome.value, outcome.error, outcome.raw


def check_proposal(
    proposal: ProposedTask,
    parent: ParentView,
    known_questions: Mapping[str, tuple[str, str]],
    identity: Callable[[str], str],
    *,
    checker: ReferenceChecker | None,
    verify: Callable[[str, str], float] | None,
    confirm: Policy | None,
    answers_match: Callable[[str, str], bool],
    extract: Callable[[str], str | None],
    samples: int = 4,
    agreement: float = 0.75,
    temperature: float = 0.7,
    max_tokens: int = 96,
    seed: int | None = None,
) -> ProposalResult:
    """Decide whether a proposed task is checkable and new; say why not.

    Checks, in order: not a held-out task of the session (``known_questions``: task identity →
    ``(task_key, split)``; refused with code ``heldout`` before any other check, so proposals never
    leak into evaluation); not the parent's question or the worked example's; not another task
    already in the session (``duplicate``); the
    justification arrives at the answer (it contains the answer as a token); then the answer
    check — the family's ``checker`` and ``verify`` (reasoning-gym ``score_answer`` of the
    proposed reference against the computed answer must be 1), else ``samples`` answers of
    ``confirm`` to the bare question (solver prompt, no reference shown), of which at least
    ``ceil(agreement * samples)`` must match the proposed reference.

    Args:
        proposal: the validated reply.
        parent: the parent task.
        known_questions: every task of the session, keyed by ``identity`` of its question; where a
            train and a held-out task share a key, the held-out one.
        identity: question → the task's identity for held-out isolation, as the session's verifiers
            read it (:func:`arena.tasks.identity.task_identity`: NFKC text without spacing, case or
            trailing punctuation; a chain_sum question as its signed terms), so that a held-out task
            written differently (``"12+5 ="`` for ``"12 + 5 ="``) is still refused. Never plain
            text comparison: a verifier that accepts any spacing makes every spelling the same task.
        checker: the family's reference checker, or None.
        verify: ``(proposed_answer, computed_answer) -> reward`` with the family's verifier; required with ``checker``.
        confirm: the policy that answers independently (agreement path); None rejects as not checkable.
        answers_match: exact-or-numeric match of two answers (agreement path).
        extract: completion text → extracted answer.
        samples: independent samples for agreement (≥ 1).
        agreement: share of them that must match, in (0, 1].
        temperature, max_tokens, seed: sampling settings of the independent samples.

    Returns:
        A :class:`ProposalResult` (``raw`` left empty for the caller to fill).

    Raises:
        ValueError: ``checker`` without ``verify``, ``samples`` < 1 or ``agreement`` outside (0, 1].
    """
    if checker is not None and verify is None:
        raise ValueError("a reference checker needs the family's verifier (verify=...)")
    if samples < 1 or not 0.0 < agreement <= 1.0:
        raise ValueError(f"samples must be >= 1 and agreement in (0, 1], got {samples} and {agreement}")

    def reject(code: str, why: str, check: str | None = None, detail: dict | None = None) -> ProposalResult:
        return ProposalResult(proposal, False, code, why, check, detail or {})

    key = identity(proposal.question)
    if key in known_questions and known_questions[key][1] == "heldout":  # before anything else: never trained on
        return reject("heldout", f"the question is held-out task {known_questions[key][0]}")
    if key == identity(parent.question):
        return reject("copies_parent", "the question is the parent task's question")
    if key == identity(EXAMPLE_REPLY["question"]) or key == identity(EXAMPLE_QUESTION):
        return reject("copies_example", "the question copies the worked example")
    if key in known_questions:
        return reject("duplicate", f"the question duplicates task {known_questions[key][0]}")
    if not contains_token(proposal.justification, proposal.answer):
        return reject("unjustified", f"the justification does not arrive at the answer {proposal.answer!r}")
    if checker is not None:
        computed, why = checker(proposal.question)
        if computed is None:
            return reject("not_checkable", f"not checkable by the {parent.family} verifier: {why}", "verifier")
        reward = verify(proposal.answer, computed)  # type: ignore[misc]
        detail = {"computed_answer": computed, "reward": reward}
        if reward < 1.0:
            return reject(
                "verifier_disagrees",
                f"the reference answer {proposal.answer!r} disagrees with the {parent.family} verifier",
                "verifier",
                detail,
            )
        return ProposalResult(proposal, True, check="verifier", check_detail=detail)
    if confirm is None:
        return reject("not_checkable", f"no verifier for {parent.family} and no policy to confirm the answer")
    outs = confirm.sample(
        solver_messages(proposal.question), n=samples, temperature=temperature, max_tokens=max_tokens, seed=seed
    )
    answers = [extract(c.text) for c in outs]
    agree = sum(a is not None and answers_match(a, proposal.answer) for a in answers)
    need = math.ceil(agreement * samples - 1e-9)
    detail = {"answers": answers, "agree": agree, "samples": samples, "needed": need}
    if agree < need:
        return reject(
            "no_agreement",
            f"only {agree} of {samples} independent samples agree with the reference answer {proposal.answer!r} "
            f"(need {need})",
            "agreement",
            detail,
        )
    return ProposalResult(proposal, True, check="agreement", check_detail=detail)

