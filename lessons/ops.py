"""Curation ops: the structured output of the teacher's ``reflect`` step.

The teacher proposes ops as JSON; these pydantic models are the contract its (untrusted)
output is validated against, and what :mod:`lessons.library.curation` applies (through
:meth:`lessons.library.store.LessonStore.record_episode`). The op set follows ACE's incremental
delta updates and ExpeL's insight operations (ADD / EDIT / UPVOTE / DOWNVOTE), with MERGE
(n lessons into one) and RETIRE to keep the library bounded; UPVOTE / DOWNVOTE are the
``helpful`` / ``harmful`` tags on lessons that were in context.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from lessons.text import neutralise_lesson

LESSON_MAX_CHARS = 400  # a lesson is one or two sentences; longer text is rejected, not truncated
GLOBAL_SCOPE = "global"

Tag = Literal["helpful", "harmful", "neutral"]


def clean_lesson_text(v: str) -> str:
    """Neutralised (:func:`lessons.text.neutralise_lesson`: one line, no section tags, no
    forged chat turns), 8 to :data:`LESSON_MAX_CHARS` characters.

    Raises:
        ValueError: too short or too long (longer text is rejected, not truncated).
    """
    v = neutralise_lesson(v or "")
    if len(v) < 8:
        raise ValueError("lesson text must be at least 8 characters")
    if len(v) > LESSON_MAX_CHARS:
        raise ValueError(f"lesson text must be at most {LESSON_MAX_CHARS} characters")
    return v


def _keep_raw_text(data: object) -> object:
    """Copy an op's ``text`` as the model wrote it into ``raw_text`` before it is cleaned.

    Cleaning collapses whitespace, and whitespace is where a grammar-constrained teacher leaves its
    holes: the reply grammar allows no digit in a lesson, so the 1.5B teacher writes
    ``"Think of  and  which"`` where it meant two numbers, or pads a cut sentence with spaces to the
    length limit (``"we need to first understand that      …"``). The screen
    (:func:`agents.roles.teacher.screen_reflection`) reads ``raw_text`` for both. It is always
    overwritten from ``text``: a reply cannot set it.
    """
    if isinstance(data, dict) and "text" in data:
        return {**data, "raw_text": data["text"] if isinstance(data["text"], str) else ""}
    return data


class _TextOp(BaseModel):
    """An op that carries lesson text: cleaned ``text`` and, for the screen, the model's ``raw_text``."""

    model_config = ConfigDict(extra="ignore")
    raw_text: str = Field(default="", exclude=True, repr=False,
                          description="the text before cleaning (whitespace kept); not stored, set from text")

    _raw = model_validator(mode="before")(_keep_raw_text)


_SCOPE = re.compile(r"[a-z0-9][a-z0-9_.\-]{0,79}")


def check_scope(scope: str) -> str:
    """:func:`normalise_scope`, then require a task family name (``chain_sum``) or ``global``.

    Raises:
        ValueError: not ``[a-z0-9][a-z0-9_.-]*`` of at most 80 characters (e.g.
            ``chain_sum:min_terms=2``, which is a family *spec* of ``arena run``, not a name).
    """
    s = normalise_scope(scope)
    if not _SCOPE.fullmatch(s):
        hint = f"; use the family name {s.split(':')[0]!r} without overrides" if ":" in s else ""
        raise ValueError(
            f"family must be a task family name (letters, digits, _ . -; at most 80 characters) or 'global', got {scope!r}{hint}"
        )
    return s


def normalise_scope(scope: str) -> str:
    """Lower-case, trim, spaces to ``_``; an empty scope or ``"all"``/``"any"`` means :data:`GLOBAL_SCOPE`.

    Task families are normalised the same way when lessons are retrieved, so a JSONL family
    ``"Word Problems"`` and its lessons' scope ``word_problems`` meet.
    """
    s = re.sub(r"\s+", "_", (scope or "").strip().lower())
    return GLOBAL_SCOPE if s in {"", "all", "any", "general", GLOBAL_SCOPE} else s


class AddOp(_TextOp):
    """Add a new lesson: short, general advice, reusable on other tasks of its scope."""

    model_config = ConfigDict(extra="ignore")
    op: Literal["ADD"] = "ADD"
    text: str = Field(description="the lesson: one or two imperative sentences, general, no task-specific numbers")
    scope: str = Field(default=GLOBAL_SCOPE, description="a task family name, or 'global' for every family")
    rationale: str = Field(default="", description="why the group's rollouts support this lesson")

    @field_validator("text")
    @classmethod
    def _text_ok(cls, v: str) -> str:
        return clean_lesson_text(v)

    @field_validator("scope")
    @classmethod
    def _scope_ok(cls, v: str) -> str:
        return normalise_scope(v)


class EditOp(_TextOp):
    """Rewrite one lesson that was in context (its id stays; the old text stays in the history)."""

    model_config = ConfigDict(extra="ignore")
    op: Literal["EDIT"] = "EDIT"
    lesson_id: str = Field(description="id of a lesson shown in context")
    text: str = Field(description="the improved lesson text")
    rationale: str = Field(default="", description="why the rollouts call for the change")

    @field_validator("text")
    @classmethod
    def _text_ok(cls, v: str) -> str:
        return clean_lesson_text(v)


class MergeOp(_TextOp):
    """Merge two or more lessons into one new lesson; the sources are retired, pointing at it."""

    model_config = ConfigDict(extra="ignore")
    op: Literal["MERGE"] = "MERGE"
    lesson_ids: list[str] = Field(min_length=2, description="ids of the lessons to merge (at least 2)")
    text: str = Field(description="one lesson that says what the merged lessons said")
    rationale: str = Field(default="", description="why they are one lesson")

    @field_validator("text")
    @classmethod
    def _text_ok(cls, v: str) -> str:
        return clean_lesson_text(v)

    @field_validator("lesson_ids")
    @classmethod
    def _distinct(cls, v: list[str]) -> list[str]:
        v = list(dict.fromkeys(x.strip() for x in v))
        if len(v) < 2:
            raise ValueError("a merge needs at least 2 distinct lesson ids")
        return v


class RetireOp(BaseModel):
    """Retire one lesson: it leaves every prompt, and stays in the database and the history."""

    model_config = ConfigDict(extra="ignore")
    op: Literal["RETIRE"] = "RETIRE"
    lesson_id: str = Field(description="id of a lesson shown in context")
    why: str = Field(min_length=3, description="the reason, e.g. 'misleads on negative numbers'")


class LessonTag(BaseModel):
    """The teacher's verdict on one lesson that was in the solver's context."""

    model_config = ConfigDict(extra="ignore")
    lesson_id: str = Field(description="id of a lesson shown in context, e.g. 'chain_sum-00003'")
    tag: Tag = Field(description="helpful: the lesson helped the rollouts; harmful: it misled them; neutral")

    @field_validator("tag", mode="before")
    @classmethod
    def _lower(cls, v: object) -> object:
        return v.strip().lower() if isinstance(v, str) else v


class Reflection(BaseModel):
    """What the teacher returns from ``reflect``: new lessons and tags for the lessons shown."""

    model_config = ConfigDict(extra="ignore")
    analysis: str = Field(default="", description="one or two sentences: what separated the successes from the failures")
    add: list[AddOp] = Field(default_factory=list, description="new lessons (at most 2)")
    edit: list[EditOp] = Field(default_factory=list, description="rewrites of lessons that were in context")
    merge: list[MergeOp] = Field(default_factory=list, description="lessons in context that say the same thing")
    retire: list[RetireOp] = Field(default_factory=list, description="lessons in context that mislead")
    tags: list[LessonTag] = Field(default_factory=list, description="one tag per lesson that was in context")
