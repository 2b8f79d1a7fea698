"""JSONL task files: one ``{"question", "answer"}`` object per line, or a RaR rubric task.

Each line is a :class:`TaskLine`: a verifier task (``"answer"``, scored by exact or numeric
match, :func:`arena.tasks.verify.answers_match`), a rubric task (``"rubric": [{"title",
"description", "weight"}]``, ``"reference"``?, graded by a judge model in
:mod:`arena.episode.rewards`), or both; its rubric, reference and whether it has a verifier
are kept in the task's ``metadata``. :func:`load_tasks_file` reads, validates, deduplicates
and splits a file; errors are one-line :class:`arena.tasks.model.TaskError`s naming the line.
Lines are told apart by task identity (:func:`arena.tasks.identity.task_identity`), not text, so
a question written twice in two spellings is one task and never lands in both splits.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from arena.tasks.identity import answer_identity, task_identity
from arena.tasks.model import Split, Task, TaskError
from lessons.answers import answer_text
from lessons.criteria import Criterion, check_rubric
from lessons.jsonl import InvalidJson, NotAnObject, UnreadableFile, read_json_objects

log = logging.getLogger(__name__)

# The rubric tasks shipped with the package (open-ended questions a small model can attempt, each
# with a RaR rubric; some also with a verifiable answer): `arena run --reward rubric-explicit` uses
# them when no --family or --tasks-file is given.
BUILTIN_RUBRIC_TASKS = Path(__file__).resolve().parent / "data" / "rubric_tasks.jsonl"


class TaskLine(BaseModel):
    """One line of a JSONL task file: a verifier task, a rubric task (RaR), or both. Unknown keys are kept in ``metadata``."""

    model_config = ConfigDict(extra="allow")
    question: str
    answer: str | None = None  # verifiable reference answer (exact / numeric match)
    family: str | None = None
    metadata: dict[str, Any] = {}
    rubric: list[Criterion] | None = None  # RaR criteria: {"title", "description", "weight"}
    reference: str | None = None  # free-text reference answer, shown to the rubric judge only
    requires_work: bool = False  # a bare answer without reasoning counts as a reward-hack pattern

    @field_validator("rubric")
    @classmethod
    def _rubric(cls, v: list[Criterion] | None) -> list[Criterion] | None:
        return check_rubric(v) if v is not None else None

    @model_validator(mode="after")
    def _answer_or_rubric(self) -> "TaskLine":
        if self.answer is None and self.rubric is None:
            raise ValueError('a line needs an "answer" (verifier) or a "rubric" (judge), or both')
        return self

    @field_validator("question", mode="before")
    @classmethod
    def _question_text(cls, v: object) -> object:
        if isinstance(v, str) and not v.strip():
            raise ValueError("must not be empty")
        return v

    @field_validator("answer", mode="before")
    @classmethod
    def _answer_text(cls, v: object) -> object:
        return answer_text(v)

    @field_validator("family")
    @classmethod
    def _family_name(cls, v: str | None) -> str | None:
        if v is not None and (not v.strip() or "/" in v):
            raise ValueError("must be a non-empty name without '/'")
        return v.strip() if v is not None else None


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    msg = str(err["msg"]).removeprefix("Value error, ")
    return f"field {loc!r}: {msg}" if loc else msg


def _read_lines(path: Path) -> list[tuple[int, TaskLine]]:
    """Parse and validate every non-blank line; the first bad line raises TaskError."""
    rows: list[tuple[int, TaskLine]] = []
    try:
        for lineno, obj in read_json_objects(path):
            try:
                rows.append((lineno, TaskLine.model_validate(obj)))
            except ValidationError as e:
                raise TaskError(f"{path}:{lineno}: {_first_error(e)}") from None
    except UnreadableFile as e:
        if isinstance(e.cause, UnicodeDecodeError):
            raise TaskError(f"cannot read task file {path}: not UTF-8 text ({e.cause.reason} at byte {e.cause.start})") from None
        raise TaskError(f"cannot read task file {path}: {e.cause.strerror or e.cause}") from None
    except InvalidJson as e:
        raise TaskError(f"{path}:{e.lineno}: invalid JSON: {e.cause.msg} (column {e.cause.colno})") from None
    except NotAnObject as e:
        raise TaskError(f'{path}:{e.lineno}: expected a JSON object {{"question": ..., "answer": ...}}, got {type(e.value).__name__}') from None
    if not rows:
        raise TaskError(f'task file {path} is empty: expected one {{"question": ..., "answer": ...}} object per line')
    return rows


def load_tasks_file(
    path: str | Path, n_train: int, n_heldout: int, seed: int
) -> tuple[list[Task], list[Task]]:
    """Load a JSONL task file and split it into train and held-out tasks.

    Each non-blank line is ``{"question": str, "answer": str | number}`` with optional
    ``"family"`` (default: the file stem) and ``"metadata"`` (object); other keys are kept in
    the metadata. Lines are deduplicated by task identity (:func:`arena.tasks.identity.task_identity`:
    the question as a verifier reads it, so ``"12+5 ="`` repeats ``"12 + 5 ="``; first one kept), shuffled
    with ``seed``; held-out is the first ``n_heldout``, train the next ``n_train`` (fewer if
    the file is short, but at least one of each).

    Args:
        path: the JSONL file.
        n_train: wanted train tasks (≥ 1).
        n_heldout: wanted held-out tasks (≥ 1).
        seed: shuffling seed.

    Returns:
        ``(train, heldout)`` lists of :class:`Task` with ``source="jsonl"``.

    Raises:
        TaskError: unreadable or missing file (``cannot read task file PATH: ...``), empty
            file, a bad line (``PATH:LINE: what is wrong``), or fewer than 2 distinct questions.
    """
    path = Path(path)
    if n_train < 1 or n_heldout < 1:
        raise TaskError(f"need at least 1 train and 1 held-out task (got {n_train} and {n_heldout})")
    rows = _read_lines(path)
    unique: dict[str, tuple[int, TaskLine]] = {}
    for lineno, row in rows:
        key = task_identity(row.question)
        if key in unique:
            if answer_identity(unique[key][1].answer or "") != answer_identity(row.answer or ""):
                log.warning("%s:%d repeats the question of line %d with another answer; ignored", path, lineno, unique[key][0])
            continue
        unique[key] = (lineno, row)
    items = list(unique.values())
    if len(items) < 2:
        raise TaskError(
            f"task file {path} has {len(items)} distinct question(s); need at least 2 "
            "(one train and one held-out)"
        )
    random.Random(seed).shuffle(items)
    n_h = min(n_heldout, len(items) - 1)
    chosen: dict[Split, list[tuple[int, TaskLine]]] = {
        "heldout": items[:n_h],
        "train": items[n_h : n_h + n_train],
    }
    if len(items) < n_train + n_heldout:
        log.info("%s: %d distinct questions for %d train + %d held-out; using %d + %d",
                 path, len(items), n_train, n_heldout, len(chosen["train"]), n_h)
    out: dict[Split, list[Task]] = {"train": [], "heldout": []}
    for split in ("train", "heldout"):
        counters: dict[str, int] = {}
        for lineno, row in chosen[split]:  # type: ignore[index]
            family = row.family or path.stem
            i = counters.get(family, 0)
            counters[family] = i + 1
            metadata = dict(row.metadata)
            metadata.update(row.model_extra or {})
            metadata.update(source_file=str(path), source_line=lineno)
            if row.rubric is not None:
                metadata.update(
                    rubric=[c.model_dump() for c in row.rubric], reference=row.reference,
                    verifiable=row.answer is not None, requires_work=row.requires_work,
                )
            out[split].append(  # type: ignore[index]
                Task(
                    task_key=f"{family}/{split}/{i:05d}",
                    family=family,
                    split=split,  # type: ignore[arg-type]
                    question=row.question,
                    answer=row.answer if row.answer is not None else (row.reference or ""),
                    source="jsonl",
                    metadata=metadata,
                )
            )
    return out["train"], out["heldout"]
