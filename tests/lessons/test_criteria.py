"""lessons.criteria: the one parser of a RaR criterion's category (judge role and rubric store)."""

import re

import pytest

from lessons.criteria import CATEGORIES, Criterion, criterion_body, criterion_category


@pytest.mark.parametrize(
    "description, category",
    [
        ("Essential Criteria: Names the process.", "essential"),
        ("important criterion: b", "important"),
        ("  OPTIONAL: mentions units", "optional"),
        ("Pitfall: b", "pitfall"),
        ("Says sunlight is scattered.", None),  # no category
        ("Essentially: no", None),
    ],
)
def test_criterion_category(description, category):
    assert criterion_category(description) == category
    assert category is None or category in CATEGORIES


def test_criterion_body_strips_the_prefix_only():
    assert criterion_body("Pitfall Criteria: Claims the sky is green.") == "Claims the sky is green."
    assert criterion_body("Says sunlight is scattered.") == "Says sunlight is scattered."


def test_judge_role_and_rubric_store_share_the_parser():
    from agents.roles import rubric as role
    from lessons.library import rubrics as store

    assert role.Criterion is Criterion  # the judge validates criteria with the shared model, which parses here
    assert not any(isinstance(v, re.Pattern) and "pitfall" in v.pattern for v in vars(role).values())  # no own parser
    assert store.criterion_category is criterion_category
