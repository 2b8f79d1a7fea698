"""The category of a rubric criterion, read from its description (Rubrics as Rewards).

A RaR criterion's description starts with its category (Gunjal et al., arXiv 2507.17746):
``"Essential Criteria: …"``, ``"Important Criteria: …"``, ``"Optional Criteria: …"`` or
``"Pitfall Criteria: …"`` (``Criterion``/``Criteria`` optional, any case). One parser for
the judge role (:mod:`agents.roles.rubric`, which validates criteria with it) and the rubric
store (:mod:`lessons.library.rubrics`, which stores each criterion's category).
"""

from __future__ import annotations

import re
from typing import Literal

Category = Literal["essential", "important", "optional", "pitfall"]

CATEGORIES: tuple[Category, ...] = ("essential", "important", "optional", "pitfall")

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
    """The description without its category prefix (unchanged when it has none)."""
    return _CATEGORY.sub("", description, count=1).strip()
