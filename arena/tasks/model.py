"""The task model: :class:`Task`, :class:`FamilySpec`, :class:`TaskSplits` and :class:`TaskError`.

A :class:`Task` is one prompt with a verifier; the sources that make tasks are
:mod:`arena.tasks.gym` (reasoning-gym families) and :mod:`arena.tasks.jsonl` (JSONL files),
the verifiers are in :mod:`arena.tasks.verify`. The reference ``answer`` reaches the verifier, the
teacher's hint step and the proposer; the solver reads it only in a guided re-attempt's ``answer``
hint, which a rubric-only task never gets (docs/architecture.md, "Who sees what").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Split = Literal["train", "heldout"]
Source = Literal["reasoning_gym", "jsonl", "proposed"]


class TaskError(ValueError):
    """A task source the user configured cannot be used.

    The message is one line meant for stderr; the CLI prints it and exits with code 2.
    """


class VerifierError(RuntimeError):
    """A task's verifier crashed on an answer (third-party code on odd input); one line naming family and answer.

    Not a user error and not a score: the rollout it grades is recorded as ungraded with the reason.
    """


@dataclass(frozen=True)
class Task:
    """One prompt with a verifier.

    Attributes:
        task_key: stable identifier, ``"{family}/{split}/{index:05d}"`` (e.g.
            ``"chain_sum/train/00003"``); a family spec given twice gets ``"chain_sum#2/..."``.
        family: reasoning-gym dataset name, or the JSONL ``family`` (default: file stem).
        split: ``"train"`` (the loop learns on it) or ``"heldout"`` (evaluation only).
        question: the prompt shown to the solver.
        answer: the reference answer (:func:`arena.tasks.verify.verifiable_answer`); for a rubric-only
            JSONL line, its free-text ``reference`` (the judge's only: :func:`arena.tasks.verify.judge_reference`).
        source: ``"reasoning_gym"`` (the family's ``score_answer``), ``"jsonl"`` or ``"proposed"``
            (a proposer-written task confirmed by agreement: exact/numeric match, as JSONL).
        metadata: for reasoning-gym, ``overrides``, ``dataset_seed``, ``dataset_size``,
            ``index`` (enough to regenerate ``entry``) and ``rg_metadata`` (the entry's
            own metadata, made JSON-safe); for JSONL, the line's metadata plus ``source_file``/``source_line``.
        entry: the raw reasoning-gym entry dict passed to ``score_answer``; ``None`` for
            JSONL tasks or tasks rebuilt from storage (it is then regenerated).
    """

    task_key: str
    family: str
    split: Split
    question: str
    answer: str
    source: Source
    metadata: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    entry: dict[str, Any] | None = field(default=None, hash=False, compare=False, repr=False)


@dataclass(frozen=True)
class FamilySpec:
    """A reasoning-gym family and overrides of its config dataclass.

    Attributes:
        name: registered dataset name (``reasoning_gym.factory.DATASETS``), e.g. ``"chain_sum"``.
        overrides: config field → value, e.g. ``{"min_terms": 2, "max_terms": 2}``.
    """

    name: str
    overrides: dict[str, object] = field(default_factory=dict, hash=False)

    def __str__(self) -> str:
        if not self.overrides:
            return self.name
        return self.name + ":" + ",".join(f"{k}={_fmt(v)}" for k, v in self.overrides.items())

    @property
    def cache_key(self) -> tuple:
        """Hashable identity of (family, overrides), used to cache dataset instances."""
        return (self.name, tuple(sorted((k, repr(v)) for k, v in self.overrides.items())))


@dataclass
class TaskSplits:
    """The tasks of a session: ``train`` (learned on) and ``heldout`` (evaluated on)."""

    train: list[Task]
    heldout: list[Task]

    @property
    def families(self) -> list[str]:
        """Sorted distinct family names over both splits."""
        return sorted({t.family for t in self.train} | {t.family for t in self.heldout})


def _fmt(v: object) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)
