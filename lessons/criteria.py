"""RaR rubric criteria: the :class:`Criterion` model, its category, and the whole-rubric check.

Rubrics as Rewards (RaR, Gunjal et al., arXiv 2507.17746): a criterion is
``{"title", "description", "weight"}``; the description starts with its category —
``"Essential Criteria: …"``, ``"Important Criteria: …"``, ``"Optional Criteria: …"`` or
``"Pitfall Criteria: …"`` — positive categories weigh 1 to 5, pitfalls −1 to −5.

Shared by the rubric judge (:mod:`agents.roles.rubric`), the JSONL task files that carry
rubrics (:mod:`arena.tasks.jsonl`) and the online rubrics of a session, so it lives in
``lessons``, which every other package may import.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Category = Literal["essential", "important", "optional", "pitfall"]

CATEGORIES: tuple[Category, ...] = ("essential", "important", "optional", "pitfall")

MAX_WEIGHT = 5.0  # |weight| of one criterion (RaR: essential 5, important 3-4, optional 1-2, pitfall -1/-2)
MAX_CRITERIA = 30  # per rubric; more would not fit a small judge's context
TITLE_MAX_CHARS = 120
DESCRIPTION_MAX_CHARS = 600

_CATEGORY = re.compile(r"^\s*(essential|important|optional|pitfall)(?:\s+criteri(?:a|on))?\s*:\s*", re.I)


def criterion_category(description: str) -> Category | None:
    """The category a RaR description starts with (``"Pitfall Criteria: …"`` → ``"pitfall"``), or None.

    Args:
        description: the criterion's description.

    Returns:
        One of :data:`CATEGORIES`, or None when the description does not start with one
        followed by a colon.
    """
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
