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
with :func:`agents.parsing.parse_with_retry` (fences stripped, JSON extracted, a truncated
object closed, yes/no strings accepted for booleans, one retry with the error shown) and
return ``graded=False`` when the reply stays unusable, so a failed grading is never scored 0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agents.parsing import parse_with_retry
from agents.policy import Message, Policy

Category = Literal["essential", "important", "optional", "pitfall"]

MAX_WEIGHT = 5.0  # |weight| of one criterion (RaR: essential 5, important 3-4, optional 1-2, pitfall -1/-2)
MAX_CRITERIA = 30  # per rubric; more would not fit a small judge's context
TITLE_MAX_CHARS = 120
DESCRIPTION_MAX_CHARS = 600

_CATEGORY = re.compile(r"^\s*(essential|important|optional|pitfall)(?:\s+criteri(?:a|on))?\s*:\s*", re.I)


def criterion_category(description: str) -> Category | None:
    """The category a RaR description starts with (``"Pitfall Criteria: …"`` → ``"pitfall"``), or None."""
    m = _CATEGORY.match(description)
    return m.group(1).lower() if m else None  # type: ignore[return-value]


def criterion_body(description: str) -> str:
    """The description without its category prefix."""
    return _CATEGORY.sub("", description, count=1).strip()


class Criterion(BaseModel):
    """One rubric criterion, as in the RaR data sets.

    Raises (pydantic ``ValidationError``): empty title, a description that does not start with
    a category, a zero weight, |weight| > 5, a positive weight on a pitfall or a negative one
    on another category.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    title: str = Field(description="a short name of the criterion, e.g. 'Names the process'")
    description: str = Field(
        description="starts with its category: 'Essential Criteria: …', 'Important Criteria: …', "
        "'Optional Criteria: …' or 'Pitfall Criteria: …' (a pitfall names a mistake)"
    )
    weight: float = Field(description="1 to 5 for essential/important/optional criteria, -1 to -5 for pitfalls")

    @field_validator("title")
    @classmethod
    def _title(cls, v: str) -> str:
        v = " ".join(v.split())
        if not v:
            raise ValueError("must not be empty")
        if len(v) > TITLE_MAX_CHARS:
            raise ValueError(f"is longer than {TITLE_MAX_CHARS} characters")
        return v

    @field_validator("description")
    @classmethod
    def _description(cls, v: str) -> str:
        v = " ".join(v.split())
        if criterion_category(v) is None:
            raise ValueError(
                "must start with its category: 'Essential Criteria:', 'Important Criteria:', "
                "'Optional Criteria:' or 'Pitfall Criteria:'"
            )
        if not criterion_body(v):
            raise ValueError("has a category but no text after it")
        if len(v) > DESCRIPTION_MAX_CHARS:
            raise ValueError(f"is longer than {DESCRIPTION_MAX_CHARS} characters")
        return v

    @field_validator("weight", mode="before")
    @classmethod
    def _weight_number(cls, v: object) -> object:
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError("must be a number")
        return v

    @model_validator(mode="after")
    def _weight_matches_category(self) -> Criterion:
        w = self.weight
        if not 1.0 <= abs(w) <= MAX_WEIGHT:  # also refuses NaN
            raise ValueError(f"weight must be in [1, 5] or [-5, -1], got {w:g}")
        if self.category == "pitfall" and w > 0:
            raise ValueError(f"a Pitfall criterion needs a negative weight (-1 to -5), got {w:g}")
        if self.category != "pitfall" and w < 0:
            raise ValueError(f"a negative weight ({w:g}) needs a 'Pitfall Criteria:' description")
        return self

    @property
    def category(self) -> Category:
        """``essential`` | ``important`` | ``optional`` | ``pitfall``."""
        cat = criterion_category(self.description)
        assert cat is not None  # checked by the validator
        return cat


def check_rubric(criteria: Sequence[Criterion]) -> list[Criterion]:
    """Check a whole rubric: 1 to :data:`MAX_CRITERIA` criteria with distinct titles.

    Raises:
        ValueError: empty, too long, or two criteria with the same title (case-insensitive).
    """
    items = list(criteria)
    if not items:
        raise ValueError("a rubric needs at least one criterion")
    if len(items) > MAX_CRITERIA:
        raise ValueError(f"a rubric has at most {MAX_CRITERIA} criteria, got {len(items)}")
    seen: dict[str, int] = {}
    for i, c in enumerate(items):
        key = c.title.lower()
        if key in seen:
            raise ValueError(f"criteria {seen[key]} and {i} have the same title {c.title!r}")
        seen[key] = i
    return items


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
    """The judge's decision on one criterion of one response."""

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
For EACH criterion decide whether the response meets it. For a criterion marked Pitfall, "met": true means the response MAKES that mistake.
Reply with ONE JSON object and nothing else:
{"verdicts": [{"id": 1, "met": true, "reason": "<few words>"}, {"id": 2, "met": false, "reason": "<few words>"}]}"""

# Must make the judge weigh all criteria into one 1–10 rating and answer with JSON only.
IMPLICIT_SYSTEM = """You are a strict grader. You get a question, a student's response and a list of weighted criteria.
Weigh all criteria (Pitfall criteria are mistakes that lower the rating) and rate the response from 1 (fails) to 10 (meets every criterion).
Reply with ONE JSON object and nothing else:
{"rating": <1-10>, "critique": "<one sentence: the main weakness>"}"""

JUDGE_RETRY = "Your reply could not be used: {error}. Reply again with ONLY the JSON object described above."

EXPLICIT_PREFILL = '{"verdicts": [{"id": 1, "met": '
IMPLICIT_PREFILL = '{"rating": '

RESPONSE_MAX_CHARS = 1500  # of the response shown to the judge
REFERENCE_MAX_CHARS = 600


def _clip(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def judge_user_message(
    question: str, response: str, criteria: Sequence[Criterion], reference: str | None = None, weights: bool = False
) -> str:
    """The judge's view of one rollout: question, optional reference, numbered criteria, the response."""
    lines = [f"Question: {_clip(question, 800)}"]
    if reference:
        lines.append(f"Reference answer (for the grader only): {_clip(reference, REFERENCE_MAX_CHARS)}")
    lines.append("Criteria:")
    for i, c in enumerate(criteria, 1):
        w = f" (weight {c.weight:g})" if weights else ""
        lines.append(f"{i}. {c.title}{w}: {c.description}")
    lines.append(f"Student response:\n{_clip(response, RESPONSE_MAX_CHARS) or '(empty)'}")
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


def _ask(judge: Policy, base: list[Message], prefill: str, max_tokens: int, seed: int | None):
    replies: list[str] = []
    use_prefill = prefill if getattr(judge, "supports_prefill", False) else ""

    def ask(error: str | None) -> str:
        msgs = list(base)
        if error is not None and replies:
            msgs += [{"role": "assistant", "content": replies[-1]}, {"role": "user", "content": JUDGE_RETRY.format(error=error)}]
        kwargs = {"prefill": use_prefill} if use_prefill else {}
        attempt_seed = None if seed is None else seed + len(replies)
        out = judge.sample(msgs, n=1, temperature=0.0 if not replies else 0.3, max_tokens=max_tokens, seed=attempt_seed, **kwargs)[0]
        replies.append(use_prefill + out.text)
        return replies[-1]

    return ask


def _check_ids(j: ExplicitJudgement, n: int) -> tuple[list[bool], list[str]] | str:
    """Verdicts in rubric order, or a one-line error naming missing / unknown ids."""
    by_id: dict[int, CriterionVerdict] = {}
    for v in j.verdicts:
        if not 1 <= v.id <= n:
            return f"criterion id {v.id} does not exist (ids are 1..{n})"
        by_id.setdefault(v.id, v)  # a repeated id: the first verdict counts
    missing = [i for i in range(1, n + 1) if i not in by_id]
    if missing:
        return f"no verdict for criteria {missing}; give one entry for every id 1..{n}"
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

    Args:
        judge: the judge's policy (local or OpenAI-compatible).
        question: the task text.
        response: the rollout's completion.
        criteria: the rubric (J criteria).
        reference: optional reference answer, shown to the judge only.
        max_tokens: judge reply cap, tokens (≈ 20 per criterion).
        seed: sampling seed of the first attempt (a retry uses seed + 1).
        retries: extra attempts after the first when the reply is malformed or incomplete.

    Returns:
        A :class:`JudgeResult`; ``graded=False`` (reward None) when every attempt failed.
        Never raises on bad model output.
    """
    n = len(criteria)
    base = [
        {"role": "system", "content": EXPLICIT_SYSTEM},
        {"role": "user", "content": judge_user_message(question, response, criteria, reference)},
    ]
    ask = _ask(judge, base, EXPLICIT_PREFILL, max_tokens, seed)
    raw: list[str] = []
    error = None
    for _ in range(1 + retries):
        outcome = parse_with_retry(lambda e: ask(e if e is not None else error), ExplicitJudgement, retries=0)
        raw += outcome.raw
        if outcome.value is None:
            error = outcome.error
            continue
        checked = _check_ids(outcome.value, n)
        if isinstance(checked, str):
            error = checked
            continue
        met, reasons = checked
        reward = explicit_reward([c.weight for c in criteria], met)
        return JudgeResult(True, reward, met=met, reasons=reasons, critique=explicit_critique(criteria, met), raw=raw)
    return JudgeResult(False, None, critique=f"ungraded: judge reply unusable ({error})", raw=raw, error=error)


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

    Args: as :func:`judge_explicit`.

    Returns:
        A :class:`JudgeResult` with ``rating`` and ``reward = (rating − 1) / 9``; ``graded=False``
        when every attempt failed. Never raises on bad model output.
    """
    base = [
        {"role": "system", "content": IMPLICIT_SYSTEM},
        {"role": "user", "content": judge_user_message(question, response, criteria, reference, weights=True)},
    ]
    ask = _ask(judge, base, IMPLICIT_PREFILL, max_tokens, seed)
    outcome = parse_with_retry(ask, ImplicitJudgement, retries=retries)
    if outcome.value is None:
        return JudgeResult(False, None, critique=f"ungraded: judge reply unusable ({outcome.error})", raw=outcome.raw, error=outcome.error)
    j = outcome.value
    critique = " ".join(j.critique.split())[:200] or f"rated {j.rating:g}/10"
    return JudgeResult(True, implicit_reward(j.rating), rating=j.rating, critique=critique, raw=outcome.raw)


def rubric_to_json(criteria: Sequence[Criterion]) -> list[dict]:
    """The rubric as a list of ``{"title", "description", "weight"}`` dicts (the file format)."""
    return [json.loads(c.model_dump_json()) for c in criteria]
