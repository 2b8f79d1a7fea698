"""Rubrics as rewards: weighted criteria, their aggregation into a reward, and the judge calls.

Rubrics as Rewards (RaR, Gunjal et al., arXiv 2507.17746) turns a checklist of weighted,
self-contained criteria into a reward for tasks without a verifier. A criterion is
``{"title", "description", "weight"}`` as in the RaR data sets: the description starts
with its category — ``"Essential Criteria: …"``, ``"Important Criteria: …"``,
``"Optional Criteria: …"`` or ``"Pitfall Criteria: …"`` — positive categories weigh 1 to 5,
pitfalls −1 to −5. A pitfall's description names a *mistake*; the judge marks it ``met``
when the response makes that mistake, which subtracts its weight.

Two aggregations (RaR §3):

- **explicit** (:func:`explicit_reward`): the judge decides each criterion met / not met
  (one structured call per rollout with all criteria); reward =
  Σ_j w_j·c_j / Σ_{w_j>0} w_j, clipped to [0, 1]. A rubric with pitfalls only (no positive
  weight) has no denominator; its reward is then 1 − Σ_j |w_j|·c_j / Σ_j |w_j|, the share of
  pitfall weight avoided.
- **implicit** (:func:`implicit_reward`): the judge sees every criterion and gives one rating
  from 1 to 10, normalised to [0, 1] as (rating − 1) / 9.

Judge replies are untrusted: :func:`judge_explicit` and :func:`judge_implicit` parse them
with :func:`agents.parsing.parse_model` (fences stripped, JSON extracted, a truncated object
closed), repair broken JSON (:func:`repair_explicit`, :func:`repair_implicit`), accept yes/no
strings for booleans, reject replies that copy the worked example or the template, retry once
with the error shown, and return ``graded=False`` when the reply stays unusable, so a failed
grading is never scored 0.

The criterion model and its checks (:class:`Criterion`, :func:`check_rubric`,
:func:`criterion_category`) live in :mod:`lessons.criteria` and are re-exported here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agents.parsing import ParseError, parse_model, reply_constraints
from agents.policy import Message, Policy
from lessons.criteria import Criterion
from lessons.text import neutralise_model_text

# =======================================================================================
# aggregation


def explicit_reward(weights: Sequence[float], met: Sequence[bool]) -> float:
    """RaR explicit aggregation: Σ_j w_j·c_j / Σ_{w_j>0} w_j, clipped to [0, 1].

    Args:
        weights: w_j per criterion (positive, or negative for pitfalls), length J ≥ 1.
        met: c_j per criterion (True: the response meets it; for a pitfall: makes the mistake).

    Returns:
        The reward in [0, 1]. With no positive weight (a pitfalls-only rubric) the reward is
        1 − Σ_j |w_j|·c_j / Σ_j |w_j|.

    Raises:
        ValueError: lengths differ or there is no criterion.
    """
    if len(weights) != len(met):
        raise ValueError(f"{len(weights)} weights but {len(met)} verdicts")
    if not weights:
        raise ValueError("no criteria to aggregate")
    positive = sum(w for w in weights if w > 0)
    if positive <= 0:
        total = sum(abs(w) for w in weights)
        return 1.0 - sum(abs(w) for w, c in zip(weights, met) if c) / total
    raw = sum(w for w, c in zip(weights, met) if c) / positive
    return min(1.0, max(0.0, raw))


RATING_MIN, RATING_MAX = 1, 10


def implicit_reward(rating: float) -> float:
    """RaR implicit aggregation: a 1–10 judge rating normalised to [0, 1] as (rating − 1) / 9.

    Raises:
        ValueError: rating outside [1, 10].
    """
    if not RATING_MIN <= rating <= RATING_MAX:
        raise ValueError(f"rating must be in [{RATING_MIN}, {RATING_MAX}], got {rating}")
    return (rating - RATING_MIN) / (RATING_MAX - RATING_MIN)


# =======================================================================================
# judge output schemas (untrusted model text is validated against these)

_YES = {"true", "yes", "y", "met", "1", "pass", "satisfied"}
_NO = {"false", "no", "n", "not met", "unmet", "0", "fail", "not satisfied"}


def _as_bool(v: object) -> object:
    """Repair the usual ways small judges write a boolean ("yes", "Met", 1)."""
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)) and v in (0, 1):
        return bool(v)
    if isinstance(v, str):
        s = v.strip().lower().rstrip(".")
        if s in _YES:
            return True
        if s in _NO:
            return False
    return v


class CriterionVerdict(BaseModel):
    """The judge's decision on one criterion of one response.

    The verdict comes before its reason, also in the grammar a llama.cpp judge decodes under. The
    evidence first (reason, then met) was measured worse for the embedded 1.5B judge: accuracy
    0.625 against 0.792 on the 48 labelled fixtures, paired −0.167 [−0.285, −0.045], p = 0.021, all
    nine losses false passes (bench/RESULTS.md, session 24).
    """

    model_config = ConfigDict(extra="ignore")
    id: int = Field(description="the criterion's number as listed (1-based)")
    met: bool = Field(description="true if the response meets the criterion (for a Pitfall: makes the mistake)")
    reason: str = Field(default="", description="a few words of evidence from the response")

    @field_validator("met", mode="before")
    @classmethod
    def _met(cls, v: object) -> object:
        return _as_bool(v)

    @field_validator("reason", mode="before")
    @classmethod
    def _reason(cls, v: object) -> object:
        return "" if v is None else v


class ExplicitJudgement(BaseModel):
    """The judge's reply for explicit aggregation: one verdict per criterion."""

    model_config = ConfigDict(extra="ignore")
    verdicts: list[CriterionVerdict] = Field(description="one entry per criterion, ids 1..J")


class ImplicitJudgement(BaseModel):
    """The judge's reply for implicit aggregation: one holistic 1–10 rating."""

    model_config = ConfigDict(extra="ignore")
    rating: float = Field(ge=RATING_MIN, le=RATING_MAX, description="1 (fails the rubric) to 10 (meets every criterion)")
    critique: str = Field(default="", description="one sentence: the main weakness")

    @field_validator("rating", mode="before")
    @classmethod
    def _rating(cls, v: object) -> object:
        if isinstance(v, str):  # "7", "7/10"
            m = re.match(r"\s*(\d+(?:\.\d+)?)\s*(?:/\s*10)?\s*$", v)
            if m:
                return float(m.group(1))
        return v

    @field_validator("critique", mode="before")
    @classmethod
    def _critique(cls, v: object) -> object:
        return "" if v is None else v


# =======================================================================================
# prompts

# Must make the judge decide every criterion independently and answer with JSON only.
EXPLICIT_SYSTEM = """You are a strict grader. You get a question, a student's response and a numbered list of criteria.
For EACH criterion decide whether the response meets it ("yes" or "no"). For a criterion marked Pitfall, "met": "yes" means the response MAKES that mistake.
Reply with ONE JSON object with one verdict per criterion, ids 1 to N, and nothing else:
{"verdicts": [{"id": 1, "met": "yes", "reason": "few words"}, {"id": 2, "met": "no", "reason": "few words"}]}"""

# Must make the judge weigh all criteria into one 1–10 rating and answer with JSON only.
IMPLICIT_SYSTEM = """You are a strict grader. You get a question, a student's response and a list of weighted criteria.
Weigh all criteria (Pitfall criteria are mistakes that lower the rating) and rate the response with ONE whole number from 1 (fails) to 10 (meets every criterion).
Reply with ONE JSON object and nothing else:
{"rating": 5, "critique": "one sentence: the main weakness"}"""

JUDGE_RETRY = "Your reply could not be used: {error}. Reply again with ONLY the JSON object described above."

EXPLICIT_PREFILL = '{"verdicts": [{"id": 1, "met": "'
IMPLICIT_PREFILL = '{"rating": '

# One worked example (a few-shot pair) so small judges follow the format; its criterion count (4)
# differs from most rubrics so a copied reply fails the id check instead of passing silently.
EXAMPLE_QUESTION = "Why do leaves change colour in autumn?"
EXAMPLE_RESPONSE = "In autumn the green chlorophyll breaks down, so the yellow and orange pigments that were hidden become visible."
EXAMPLE_CRITERIA = (
    ("Chlorophyll breaks down", "Essential Criteria: Says that the green chlorophyll breaks down.", 5),
    ("Other pigments show", "Important Criteria: Says that yellow or orange pigments become visible.", 3),
    ("Shorter days", "Optional Criteria: Mentions shorter days or less sunlight as the trigger.", 1),
    ("Frost paints leaves", "Pitfall Criteria: Claims that frost paints the leaves.", -2),
)
EXAMPLE_EXPLICIT = {"verdicts": [
    {"id": 1, "met": "yes", "reason": "says chlorophyll breaks down"},
    {"id": 2, "met": "yes", "reason": "yellow and orange pigments"},
    {"id": 3, "met": "no", "reason": "no mention of days"},
    {"id": 4, "met": "no", "reason": "no frost claim"},
]}
EXAMPLE_IMPLICIT = {"rating": 8, "critique": "It does not say what triggers the change."}

RESPONSE_MAX_CHARS = 1500  # of the response shown to the judge
REFERENCE_MAX_CHARS = 600


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def judge_user_message(
    question: str, response: str, criteria: Sequence[Criterion], reference: str | None = None, weights: bool = False
) -> str:
    """The judge's view of one rollout: question, optional reference, numbered criteria, the response.

    The response (the solver's) and the criteria (a rubric file's, or the teacher's online
    proposals) are neutralised (:func:`lessons.text.neutralise_model_text`): a literal
    ``<|im_start|>`` in either cannot open a turn of the judge's chat.

    Args:
        question: the task text.
        response: the rollout's completion.
        criteria: the rubric.
        reference: the reference answer, shown to the judge only, if any.
        weights: list each criterion's weight (implicit grading).

    Returns:
        The user turn's text.
    """
    lines = [f"Question: {_clip(question, 800)}"]
    if reference:
        lines.append(f"Reference answer (for the grader only): {_clip(reference, REFERENCE_MAX_CHARS)}")
    lines.append("Criteria:")
    for i, c in enumerate(criteria, 1):
        w = f" (weight {c.weight:g})" if weights else ""
        title, description = neutralise_model_text(c.title, one_line=True), neutralise_model_text(c.description, one_line=True)
        lines.append(f"{i}. {title}{w}: {description}")
    lines.append(f"Student response:\n{_clip(neutralise_model_text(response), RESPONSE_MAX_CHARS) or '(empty)'}")
    lines.append("Write the JSON object now.")
    return "\n".join(lines)


# =======================================================================================
# judge calls


@dataclass
class JudgeResult:
    """The outcome of judging one rollout.

    Attributes:
        graded: False when the judge's reply stayed unusable after the retry (``reward`` is then None).
        reward: in [0, 1], or None when ungraded.
        met: per criterion (explicit; same order as the rubric), else None.
        reasons: the judge's evidence per criterion (explicit), else None.
        rating: the 1–10 rating (implicit), else None.
        critique: one line for the teacher and the user.
        raw: every raw judge reply; error: why grading failed, if it did.
    """

    graded: bool
    reward: float | None
    met: list[bool] | None = None
    reasons: list[str] | None = None
    rating: float | None = None
    critique: str = ""
    raw: list[str] = field(default_factory=list)
    error: str | None = None


def _example_criteria() -> list[Criterion]:
    return [Criterion(title=t, description=d, weight=w) for t, d, w in EXAMPLE_CRITERIA]


def _judge_messages(system: str, example_reply: dict | None, user: str, weights: bool) -> list[Message]:
    if example_reply is None:
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]
    example = judge_user_message(EXAMPLE_QUESTION, EXAMPLE_RESPONSE, _example_criteria(), weights=weights)
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": example},
        {"role": "assistant", "content": json.dumps(example_reply)},
        {"role": "user", "content": user},
    ]


_VERDICT = re.compile(r'"id"\s*:\s*"?(\d+)"?\s*,\s*"met"\s*:\s*("[^"]*"|true|false|True|False|[01])', re.I)
_RATING = re.compile(r'"rating"\s*:\s*"?(\d+(?:\.\d+)?)(?:\s*/\s*10)?"?\s*[,}]')


def repair_explicit(text: str) -> dict | None:
    """Recover ``{"verdicts": [...]}`` from a reply whose JSON is broken (e.g. ``}}}`` for ``}]}``).

    Reads each ``"id": N, "met": X`` pair in order; None when there is none.
    """
    pairs = _VERDICT.findall(text)
    if not pairs:
        return None
    return {"verdicts": [{"id": int(i), "met": m.strip('"')} for i, m in pairs]}


def repair_implicit(text: str) -> dict | None:
    """Recover ``{"rating": r}`` from a broken reply when a rating is followed by ``,`` or ``}``; else None."""
    m = _RATING.search(text)
    return {"rating": float(m.group(1))} if m else None


def _judge_loop(
    judge: Policy, messages: list[Message], prefill: str, schema: type[BaseModel], repair, check, max_tokens: int,
    seed: int | None, retries: int,
):
    """Ask, parse (repairing broken JSON), check; retry with the error shown. Returns (value, raw, error)."""
    # a judge that decodes under a JSON schema (llama.cpp's grammar) gets the schema instead of a prefill
    use_prefill, json_schema = reply_constraints(judge, prefill, schema.model_json_schema())
    raw: list[str] = []
    error: str | None = None
    for attempt in range(1 + retries):
        msgs = list(messages)
        if error is not None and raw:
            msgs += [{"role": "assistant", "content": neutralise_model_text(raw[-1])},
                     {"role": "user", "content": JUDGE_RETRY.format(error=error)}]
        kwargs: dict = {"prefill": use_prefill} if use_prefill else {}
        if json_schema is not None:
            kwargs["json_schema"] = json_schema
        # the first attempt is greedy; a retry samples (a greedy retry tends to repeat the same reply)
        out = judge.sample(msgs, n=1, temperature=0.0 if attempt == 0 else 0.7, max_tokens=max_tokens,
                           seed=None if seed is None else seed + attempt, **kwargs)[0]
        text = use_prefill + out.text
        raw.append(text)
        try:
            value = parse_model(text, schema)
        except ParseError as e:
            fixed = repair(text)
            if fixed is None:
                error = str(e)
                continue
            try:
                value = schema.model_validate(fixed)
            except ValidationError:
                error = str(e)
                continue
        problem = check(value)
        if problem is None:
            return value, raw, None
        error = problem
    return None, raw, error


_COPIED = "the reply copies the worked example instead of judging this response"


def _check_ids(j: ExplicitJudgement, n: int) -> str | None:
    """None when the verdicts cover ids 1..n exactly, else a one-line error naming missing / unknown ids."""
    example_reasons = [v["reason"] for v in EXAMPLE_EXPLICIT["verdicts"]]
    if [v.reason for v in j.verdicts[: len(example_reasons)]] == example_reasons[: len(j.verdicts)]:
        return _COPIED
    ids = {v.id for v in j.verdicts}
    missing = [i for i in range(1, n + 1) if i not in ids]
    if missing:
        return f"no verdict for criteria {missing}; give one entry for every id 1..{n}"
    return None


def _in_order(j: ExplicitJudgement, n: int) -> tuple[list[bool], list[str]]:
    """Verdicts of ids 1..n in order; verdicts for ids outside 1..n (no such criterion) are dropped."""
    by_id: dict[int, CriterionVerdict] = {}
    for v in j.verdicts:
        by_id.setdefault(v.id, v)  # a repeated id: the first verdict counts
    return [by_id[i].met for i in range(1, n + 1)], [" ".join(by_id[i].reason.split())[:160] for i in range(1, n + 1)]


def judge_explicit(
    judge: Policy,
    question: str,
    response: str,
    criteria: Sequence[Criterion],
    reference: str | None = None,
    max_tokens: int = 256,
    seed: int | None = None,
    retries: int = 1,
) -> JudgeResult:
    """Explicit RaR grading of one rollout: one judge call, a met/not-met verdict per criterion.

    The chat is the system prompt, one worked example and this rollout; the local backend's
    reply is started with ``{"verdicts": [{"id": 1, "met": `` (prefill). A reply that is not valid
    JSON is repaired (:func:`repair_explicit`) before it counts as failed; a reply whose ids do
    not cover 1..J is retried with the error shown.

    Args:
        judge: the judge's policy (local or OpenAI-compatible).
        question: the task text.
        response: the rollout's completion.
        criteria: the rubric (J criteria).
        reference: optional reference answer, shown to the judge only.
        max_tokens: judge reply cap, tokens (≈ 20 per criterion).
        seed: sampling seed (attempt i uses seed + i).
        retries: extra attempts after the first when the reply is malformed or incomplete.

    Returns:
        A :class:`JudgeResult`; ``graded=False`` (reward None) when every attempt failed.
        Never raises on bad model output.
    """
    n = len(criteria)
    messages = _judge_messages(EXPLICIT_SYSTEM, EXAMPLE_EXPLICIT, judge_user_message(question, response, criteria, reference), False)
    value, raw, error = _judge_loop(judge, messages, EXPLICIT_PREFILL, ExplicitJudgement, repair_explicit,
                                    lambda j: _check_ids(j, n), max_tokens, seed, retries)
    if value is None:
        return JudgeResult(False, None, critique=f"ungraded: judge reply unusable ({error})", raw=raw, error=error)
    met, reasons = _in_order(value, n)
    reward = explicit_reward([c.weight for c in criteria], met)
    return JudgeResult(True, reward, met=met, reasons=reasons, critique=explicit_critique(criteria, met), raw=raw)


def explicit_critique(criteria: Sequence[Criterion], met: Sequence[bool]) -> str:
    """One line naming the failed criteria: positives not met, pitfalls made."""
    missed = [c.title for c, m in zip(criteria, met) if c.weight > 0 and not m]
    made = [c.title for c, m in zip(criteria, met) if c.weight < 0 and m]
    parts = []
    if missed:
        parts.append("missed: " + "; ".join(missed))
    if made:
        parts.append("pitfalls: " + "; ".join(made))
    return " | ".join(parts) if parts else "meets every criterion"


def failed_criteria(criteria: Sequence[Criterion], met: Sequence[bool]) -> list[str]:
    """Titles of the criteria a response failed: positive ones not met, pitfalls it made (marked)."""
    return [c.title if c.weight > 0 else f"pitfall: {c.title}" for c, m in zip(criteria, met) if (c.weight > 0) != bool(m)]


def _check_implicit(j: ImplicitJudgement) -> str | None:
    """A critique that echoes the reply template (or the example) means the judge did not judge."""
    low = j.critique.lower()
    if j.critique == EXAMPLE_IMPLICIT["critique"] or "one sentence" in low or "main weakness" in low:
        return "the reply echoes the template instead of judging this response"
    return None


def judge_implicit(
    judge: Policy,
    question: str,
    response: str,
    criteria: Sequence[Criterion],
    reference: str | None = None,
    max_tokens: int = 96,
    seed: int | None = None,
    retries: int = 1,
) -> JudgeResult:
    """Implicit RaR grading of one rollout: the judge sees every weighted criterion and rates 1–10.

    Args: as :func:`judge_explicit` (prefill ``{"rating": ``; repair :func:`repair_implicit`).

    Returns:
        A :class:`JudgeResult` with ``rating`` and ``reward = (rating − 1) / 9``; ``graded=False``
        when every attempt failed. Never raises on bad model output.
    """
    messages = _judge_messages(IMPLICIT_SYSTEM, None, judge_user_message(question, response, criteria, reference, weights=True), True)
    value, raw, error = _judge_loop(judge, messages, IMPLICIT_PREFILL, ImplicitJudgement, repair_implicit,
                                    _check_implicit,
                                    max_tokens, seed, retries)
    if value is None:
        return JudgeResult(False, None, critique=f"ungraded: judge reply unusable ({error})", raw=raw, error=error)
    critique = " ".join(value.critique.split())[:200] or f"rated {value.rating:g}/10"
    return JudgeResult(True, implicit_reward(value.rating), rating=value.rating, critique=critique, raw=raw)


def rubric_to_json(criteria: Sequence[Criterion]) -> list[dict]:
    """The rubric as a list of ``{"title", "description", "weight"}`` dicts (the file format)."""
    return [json.loads(c.model_dump_json()) for c in criteria]
