"""``arena export rollouts``: a session's train groups as a parquet data set that TRL and verl read.

Rows are the rollouts distillation may train on (:meth:`lessons.library.adapters.AdapterStore.training_rollouts`:
never ungraded, never reward-hack flagged), one per rollout, in recording order. Two layouts:

- ``hf`` — the columns TRL's ``GRPOTrainer`` reads: ``prompt`` (the unguided chat, lessons
  included as the solver saw them, the hint never), and the columns its reward functions get:
  ``task`` (JSON: what :func:`arena.rewards.trl_reward` scores with), ``answer``, ``completion``
  (chat messages), ``token_ids``, ``logprobs`` (sampling log-probs under the sampling context,
  π_old), ``reward``, ``group_id`` / ``episode_id``, ``guided``, ``hint``, ``adapter_id``,
  ``rollout_id``, ``task_key``, ``family``, ``finish_reason``;
- ``verl`` — verl's RL data set: ``data_source``, ``prompt``, ``ability``,
  ``reward_model: {style: "rule", ground_truth}``, ``extra_info`` (the task JSON, the stored
  completion and its reward, group, guided flag, log-probs) and a top-level ``hint`` column as the
  Guide authors' verl fork reads it ("" when the group needed none).

``OUT/train.parquet`` and the sidecar ``OUT/arena_export.json`` (session, library, format, rows,
rollout ids, columns, the data file's size and SHA-256, time) are written, each to a temporary name
first and renamed into place — the data, then the sidecar. The sidecar is what makes an export
complete: an export in ``OUT`` (a sidecar) is never overwritten, while a data file without its
sidecar is what a failure or kill between the two renames leaves, and a retry replaces it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from lessons.db.engine import redact_credentials
from lessons.library.adapters import AdapterStore, TrainingRollout
from lessons.library.records import TaskInfo
from lessons.library.store import LessonStore

FORMATS = ("hf", "verl")
SIDECAR = "arena_export.json"
DATA_FILE = "train.parquet"


class ExportError(ValueError):
    """The export cannot be written (unknown session, nothing eligible, existing export, no datasets): one line."""


@dataclass(frozen=True)
class ExportInfo:
    """What ``arena export rollouts`` wrote."""

    path: Path  # OUT/train.parquet
    sidecar: Path  # OUT/arena_export.json
    rows: int
    groups: int
    guided: int


def task_json(t: TaskInfo) -> str:
    """The ``task`` column: the fields :func:`arena.rewards.task_from_json` rebuilds the task from."""
    return json.dumps({"task_key": t.task_key, "family": t.family, "split": t.split, "question": t.question,
                       "answer": t.answer, "source": t.source, "metadata": t.metadata}, sort_keys=True)


def _prompt(r: TrainingRollout) -> list[dict[str, str]]:
    """The unguided chat: a guided rollout's context without its hint (the policy trains under the context it will see)."""
    return [dict(m) for m in (r.unguided_messages if r.guided and r.unguided_messages else r.messages)]


def _group_id(r: TrainingRollout) -> str:
    return f"{r.session}/{r.episode_id}/{'guided' if r.guided else 'unguided'}"


def hf_row(r: TrainingRollout, t: TaskInfo) -> dict[str, Any]:
    """One rollout in the Hugging Face / TRL layout."""
    return {
        "prompt": _prompt(r), "completion": [{"role": "assistant", "content": r.completion}], "task": task_json(t),
        "answer": t.answer, "token_ids": r.token_ids, "logprobs": r.logprobs, "reward": r.reward,
        "group_id": _group_id(r), "episode_id": r.episode_id, "guided": r.guided, "hint": r.hint_text,
        "adapter_id": r.adapter_id, "rollout_id": r.rollout_id, "task_key": r.task_key, "family": r.family,
        "finish_reason": r.finish_reason,
    }


def verl_row(r: TrainingRollout, t: TaskInfo, index: int) -> dict[str, Any]:
    """One rollout in verl's RL data set layout."""
    return {
        "data_source": f"lesson_arena/{r.family}", "prompt": _prompt(r), "ability": "reasoning",
        "reward_model": {"style": "rule", "ground_truth": t.answer},
        "extra_info": {"index": index, "split": "train", "task": task_json(t), "task_key": r.task_key,
                       "group_id": _group_id(r), "rollout_id": r.rollout_id, "guided": r.guided,
                       "completion": r.completion, "reward": r.reward, "token_ids": r.token_ids, "logprobs": r.logprobs,
                       "adapter_id": r.adapter_id},
        "hint": r.hint_text or "",
    }


def export_rollouts(store: LessonStore, db: str, session: str, fmt: str, out: Path) -> ExportInfo:
    """Write the session's eligible train rollouts as ``OUT/train.parquet`` in layout ``fmt``, with its sidecar.

    Args:
        store: the open library.
        db: its path or URL (recorded in the sidecar).
        session: the session's name.
        fmt: one of :data:`FORMATS`.
        out: the output directory (created when missing; must not hold an export already: a
            sidecar; a data file without one, left by an interrupted export, is replaced).

    Returns:
        The :class:`ExportInfo`.

    Raises:
        ExportError: unknown format or session, no eligible rollout, an export already in ``out``,
            ``out`` not creatable or not writable (then neither file is left in place), or the
            ``datasets`` package missing.
    """
    if fmt not in FORMATS:
        raise ExportError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if store.get_session(session) is None:
        raise ExportError(f"no session named {session!r} in {db}")
    rollouts = AdapterStore(store).training_rollouts(session)
    if not rollouts:
        raise ExportError(f"session {session!r} has no train rollout to export (none recorded, or none may be trained on: ungraded, oversized, flagged)")
    tasks = {t.task_key: t for t in store.stored_tasks(session, "train")}
    rows = [hf_row(r, tasks[r.task_key]) if fmt == "hf" else verl_row(r, tasks[r.task_key], i)
            for i, r in enumerate(rollouts)]
    try:
        import datasets
        from datasets import Dataset
    except ImportError:
        raise ExportError("arena export needs the `datasets` package: pip install -e '.[test]' (or pip install datasets)") from None
    path, sidecar = out / DATA_FILE, out / SIDECAR
    if sidecar.exists():
        raise ExportError(f"{out} already holds an export ({SIDECAR}); choose another OUT or remove it")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ExportError(f"cannot create {out}: {e.strerror or e}") from None
    info = ExportInfo(path, sidecar, len(rows), len({_group_id(r) for r in rollouts}), sum(r.guided for r in rollouts))
    meta = {"format": fmt, "session": session, "db": redact_credentials(db), "rows": info.rows, "groups": info.groups, "guided": info.guided,
            "rollout_ids": [r.rollout_id for r in rollouts], "columns": list(rows[0]),
            "reward_function": "arena.rewards.trl_reward" if fmt == "hf" else "arena.rewards.compute_score",
            "created_at": datetime.now(UTC).isoformat()}
    bars_were_on = not datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()  # one line says what was written; a bar for a one-batch write is noise
    try:
        _write_into_place(path, lambda tmp: Dataset.from_list(rows).to_parquet(str(tmp)))
        meta["data_bytes"], meta["data_sha256"] = path.stat().st_size, _sha256(path)
        _write_into_place(sidecar, lambda tmp: tmp.write_text(json.dumps(meta, indent=1) + "\n"))
    except BaseException as e:  # a full disk, a read-only OUT, Ctrl-C: nothing that looks like an export is left
        with contextlib.suppress(OSError):  # on a read-only OUT the clean-up fails too, and there is nothing to clean
            path.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise ExportError(f"cannot write the export to {out}: {e.strerror or e}") from None
        raise
    finally:
        if bars_were_on:
            datasets.enable_progress_bars()
    return info


def _write_into_place(target: Path, write: Callable[[Path], object]) -> None:
    """``write`` a temporary file beside ``target``, then rename it to ``target`` (atomic on one filesystem).

    The file gets the mode an ordinary new file gets (``0666`` less the umask), not mkstemp's
    ``0600``: an export is meant to be read by the trainer, often another user's job. The temporary
    file is removed when ``write`` or the rename fails; a kill can leave it behind under a hidden
    name (``.train.parquet.*.tmp``), which blocks nothing.
    """
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, target)
    finally:
        with contextlib.suppress(OSError):  # a clean-up that fails must not hide why the write failed
            tmp.unlink(missing_ok=True)


def _sha256(path: Path) -> str:
    """The SHA-256 of a file, hex."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
