"""Export and import lessons as JSONL: one lesson per line, with its counters and full history.

A line (``format`` ``"lesson-arena/lesson"``, ``version`` 1)::

    {"format": "lesson-arena/lesson", "version": 1, "id": "chain_sum-00012", "text": "...",
     "family": "chain_sum", "status": "active", "helpful": 3, "harmful": 0, "neutral": 1,
     "times_in_context": 7, "utility": 0.06, "utility_ci95": [-0.1, 0.2], "utility_n": 32,
     "created_at": "2026-11-30T01:02:03+00:00",
     "history": [{"op": "ADD", "before": null, "after": "...", "at": "...", "rationale": "...",
                  "episode": {"session": "run-...", "episode_key": "r001-..."}, "rollout_ids": [4, 5],
                  "target": null, "origin": null}, ...]}

Import validates every line first (pydantic) and writes nothing unless all are valid and the
live lessons fit the library budget; then everything goes in one transaction. It is
idempotent: a lesson already present (same id and creation time, or imported before from
that id and time) is skipped. Ids are kept where free; a taken id gets the next free id of
the scope and the original is recorded in the IMPORT event's origin. Event links to
episodes are kept when the target database has that session's episode (by session name
and episode key); otherwise the episode reference stays in the event's origin.
"""

from __future__ import annotations

import json
import math
import os
import stat
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from sqlalchemy import select

from lessons.db.schema import (
    LESSON_OPS,
    LESSON_STATUSES,
    LIVE_STATUSES,
    EpisodeRow,
    LessonEventRow,
    LessonRow,
    SessionRow,
)
from lessons.jsonl import InvalidJson, NotAnObject, UnreadableFile, read_json_objects
from lessons.library.curation import CurationError, Provenance
from lessons.library.store import LessonStore
from lessons.ops import check_scope, clean_lesson_text

FORMAT = "lesson-arena/lesson"
VERSION = 1
MAX_COUNT = 2**31 - 1  # counters are 32-bit integers in the database


class TransferError(ValueError):
    """A bad export file or an import that cannot be applied; one line, naming the line number."""


class EpisodeRef(BaseModel):
    model_config = ConfigDict(extra="ignore")
    session: str
    episode_key: str


class EventLine(BaseModel):
    model_config = ConfigDict(extra="ignore")
    op: str
    before: str | None = None
    after: str | None = None
    at: datetime
    rationale: str = ""
    episode: EpisodeRef | None = None
    rollout_ids: list[int] = Field(default_factory=list)
    target: str | None = None
    origin: dict[str, Any] | None = None

    @field_validator("op")
    @classmethod
    def _op(cls, v: str) -> str:
        if v not in LESSON_OPS:
            raise ValueError(f"op must be one of {', '.join(LESSON_OPS)}")
        return v


class LessonLine(BaseModel):
    """One exported lesson (the JSONL line schema)."""

    model_config = ConfigDict(extra="ignore")
    format: Literal["lesson-arena/lesson"] = FORMAT
    version: int = VERSION
    id: str = Field(min_length=1, max_length=150)
    text: str
    family: str = "global"
    status: str = "active"
    helpful: int = Field(default=0, ge=0, le=MAX_COUNT)
    harmful: int = Field(default=0, ge=0, le=MAX_COUNT)
    neutral: int = Field(default=0, ge=0, le=MAX_COUNT)
    times_in_context: int = Field(default=0, ge=0, le=MAX_COUNT)
    utility: float | None = Field(default=None, ge=-1.0, le=1.0, allow_inf_nan=False)
    utility_ci95: tuple[float, float] | None = None
    utility_n: int = Field(default=0, ge=0, le=MAX_COUNT)
    created_at: datetime
    history: list[EventLine] = Field(default_factory=list)

    @field_validator("text")
    @classmethod
    def _text(cls, v: str) -> str:
        return clean_lesson_text(v)

    @field_validator("family")
    @classmethod
    def _family(cls, v: str) -> str:
        return check_scope(v)

    @field_validator("utility_ci95")
    @classmethod
    def _ci(cls, v: tuple[float, float] | None) -> tuple[float, float] | None:
        if v is not None and not (all(math.isfinite(x) and -1.0 <= x <= 1.0 for x in v) and v[0] <= v[1]):
            raise ValueError("must be [lo, hi] with -1 <= lo <= hi <= 1")
        return v

    @model_validator(mode="after")
    def _utility_with_ci(self) -> "LessonLine":
        if (self.utility is None) != (self.utility_ci95 is None):
            raise ValueError("utility and utility_ci95 go together (both or neither)")
        return self

    @field_validator("status")
    @classmethod
    def _status(cls, v: str) -> str:
        if v not in LESSON_STATUSES:
            raise ValueError(f"status must be one of {', '.join(LESSON_STATUSES)}")
        return v

    @field_validator("version")
    @classmethod
    def _version(cls, v: int) -> int:
        if v > VERSION:
            raise ValueError(f"written by a newer version (format version {v} > {VERSION}); upgrade lesson-arena")
        return v

    @field_validator("created_at")
    @classmethod
    def _utc(cls, v: datetime) -> datetime:
        return v if v.tzinfo else v.replace(tzinfo=UTC)


def _iso(dt: datetime) -> str:
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).isoformat()


def export_lines(store: LessonStore) -> Iterator[str]:
    """One JSON line per lesson (oldest first) with its whole history."""
    with store.read() as s:  # one read transaction for a consistent export
        lessons = s.scalars(select(LessonRow).order_by(LessonRow.id)).all()
        ids = {row.id: row.lesson_id for row in lessons}
        episodes = {
            eid: {"session": name, "episode_key": key}
            for eid, key, name in s.execute(
                select(EpisodeRow.id, EpisodeRow.episode_key, SessionRow.name).join(SessionRow, EpisodeRow.session_id == SessionRow.id)
            )
        }
        for row in lessons:
            history = [
                {
                    "op": ev.op,
                    "before": ev.before,
                    "after": ev.after,
                    "at": _iso(ev.created_at),
                    "rationale": ev.rationale,
                    "episode": episodes.get(ev.episode_id) if ev.episode_id is not None else None,
                    "rollout_ids": list(ev.rollout_ids or []),
                    "target": ids.get(ev.target_lesson_id) if ev.target_lesson_id is not None else None,
                    "origin": ev.origin,
                }
                for ev in row.events
            ]
            ci = [row.utility_lo, row.utility_hi] if row.utility_lo is not None and row.utility_hi is not None else None
            yield json.dumps(
                {
                    "format": FORMAT,
                    "version": VERSION,
                    "id": row.lesson_id,
                    "text": row.text,
                    "family": row.scope,
                    "status": row.status,
                    "helpful": row.helpful,
                    "harmful": row.harmful,
                    "neutral": row.neutral,
                    "times_in_context": row.times_in_context,
                    "utility": row.utility,
                    "utility_ci95": ci,
                    "utility_n": row.utility_n,
                    "created_at": _iso(row.created_at),
                    "history": history,
                },
                ensure_ascii=False,
            )


def export_lessons(store: LessonStore, path: str | os.PathLike[str]) -> int:
    """Write every lesson to ``path`` (JSONL; ``-``: stdout). Returns the count.

    A regular file is written to a temp file and renamed (never half-written); a device,
    pipe or symlink is written through.

    Raises:
        TransferError: the file cannot be written.
    """
    lines = list(export_lines(store))  # read everything first: a failed read writes nothing
    text = "".join(line + "\n" for line in lines)
    if os.fspath(path) == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return len(lines)
    path = Path(path)
    if not path.name:
        raise TransferError(f"not a file name: {os.fspath(path)!r}")
    try:
        st = os.stat(path) if path.exists() else None
        if st is not None and (not stat.S_ISREG(st.st_mode) or path.is_symlink()):
            with open(path, "w", encoding="utf-8") as f:  # a device, pipe or link: write through it
                f.write(text)
            return len(lines)
        tmp = path.with_name(f".{path.name}.tmp")  # a regular file: replaced atomically, never half-written
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()
    except OSError as e:
        raise TransferError(f"cannot write {os.fspath(path)}: {e.strerror or e}") from None
    return len(lines)


def read_lines(path: str | os.PathLike[str]) -> list[LessonLine]:
    """Parse and validate an export file; every line must be valid.

    Raises:
        TransferError: unreadable file, or a line that is not JSON or not a lesson (the
            message names the file, the line number and the field).
    """
    out: list[LessonLine] = []
    seen: dict[str, int] = {}
    try:
        for no, obj in read_json_objects(path):
            try:
                rec = LessonLine.model_validate(obj)
            except ValidationError as e:
                err = e.errors()[0]
                where = ".".join(str(x) for x in err["loc"]) or "line"
                raise TransferError(f"{path}:{no}: {where}: {err['msg'].removeprefix('Value error, ')}") from None
            if rec.id in seen:
                raise TransferError(f"{path}:{no}: lesson id {rec.id!r} already appears on line {seen[rec.id]}")
            seen[rec.id] = no
            out.append(rec)
    except UnreadableFile as e:
        raise TransferError(f"cannot read {path}: {e.cause}") from None
    except InvalidJson as e:
        raise TransferError(f"{path}:{e.lineno}: not JSON ({e.cause.msg} at column {e.cause.colno})") from None
    except NotAnObject as e:
        raise TransferError(f"{path}:{e.lineno}: expected a JSON object, got {type(e.value).__name__}") from None
    return out


def import_lessons(store: LessonStore, path: str | os.PathLike[str]) -> dict[str, Any]:
    """Import an export file into ``store``: all lines or none (see the module docstring).

    Returns:
        ``{"imported": [new ids], "skipped": [ids already present], "renamed": {old: new}}``.

    Raises:
        TransferError: a bad line, or the live lessons would pass the library budget.
    """
    records = read_lines(path)
    source = os.path.basename(os.fspath(path))
    imported: list[str] = []
    skipped: list[str] = []
    renamed: dict[str, str] = {}
    try:
        with store.curate() as c:
            s = c.s
            prior = {
                (o.get("original_id"), o.get("original_created_at"))
                for o in s.scalars(select(LessonEventRow.origin).where(LessonEventRow.op == "IMPORT"))
                if o
            }
            episodes = {
                (name, key): eid
                for eid, key, name in s.execute(
                    select(EpisodeRow.id, EpisodeRow.episode_key, SessionRow.name).join(SessionRow, EpisodeRow.session_id == SessionRow.id)
                )
            }
            new_rows: dict[str, LessonRow] = {}  # exported id -> row in this database
            pending_targets: list[tuple[LessonEventRow, str]] = []
            for rec in records:
                key = (rec.id, _iso(rec.created_at))
                existing = s.scalar(select(LessonRow).where(LessonRow.lesson_id == rec.id))
                if key in prior or (existing is not None and _iso(existing.created_at) == key[1]):
                    skipped.append(rec.id)
                    continue
                new_id = rec.id if existing is None else c.next_lesson_id(rec.family)
                if new_id != rec.id:
                    renamed[rec.id] = new_id
                row = LessonRow(
                    lesson_id=new_id,
                    text=rec.text,
                    scope=rec.family,
                    status=rec.status,
                    helpful=rec.helpful,
                    harmful=rec.harmful,
                    neutral=rec.neutral,
                    times_in_context=rec.times_in_context,
                    tokens=c.count_tokens(rec.text),
                    utility=rec.utility,
                    utility_lo=rec.utility_ci95[0] if rec.utility_ci95 else None,
                    utility_hi=rec.utility_ci95[1] if rec.utility_ci95 else None,
                    utility_n=rec.utility_n,
                    rank_score=0.0,
                    created_at=rec.created_at,
                    updated_at=c.now,
                )
                if rec.status in LIVE_STATUSES:
                    c.make_room(row.tokens, Provenance(origin={"by": "import", "file": source}))
                s.add(row)
                s.flush()
                c.rerank(row)
                new_rows[rec.id] = row
                for ev in rec.history:
                    eid = episodes.get((ev.episode.session, ev.episode.episode_key)) if ev.episode else None
                    origin = dict(ev.origin or {})
                    if ev.episode and eid is None:
                        origin["episode"] = ev.episode.model_dump()
                    event = LessonEventRow(
                        lesson_id=row.id,
                        op=ev.op,
                        before=ev.before,
                        after=ev.after,
                        rationale=ev.rationale,
                        episode_id=eid,
                        rollout_ids=list(ev.rollout_ids) if eid is not None else [],
                        origin=origin or None,
                        created_at=ev.at if ev.at.tzinfo else ev.at.replace(tzinfo=UTC),
                    )
                    s.add(event)
                    if ev.target:
                        pending_targets.append((event, ev.target))
                origin = {"by": "import", "file": source, "original_id": rec.id, "original_created_at": key[1]}
                s.add(
                    LessonEventRow(
                        lesson_id=row.id,
                        op="IMPORT",
                        before=None,
                        after=rec.text,
                        rationale=f"imported from {source}" + (f" (was {rec.id})" if new_id != rec.id else ""),
                        rollout_ids=[],
                        origin=origin,
                        created_at=c.now,
                    )
                )
                imported.append(new_id)
            s.flush()
            for event, target in pending_targets:
                row = new_rows.get(target) or s.scalar(select(LessonRow).where(LessonRow.lesson_id == renamed.get(target, target)))
                event.target_lesson_id = row.id if row is not None else None
    except CurationError as e:
        raise TransferError(f"import of {path} rejected, nothing imported: {e}") from None
    return {"imported": imported, "skipped": skipped, "renamed": renamed}
