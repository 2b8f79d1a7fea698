"""Task sources and verifiers: reasoning-gym families and JSONL files.

A :class:`Task` is one prompt with a verifier. Two sources:

- **reasoning-gym** (procedural, verifiable tasks): a family spec such as
  ``"chain_sum:min_terms=2,max_terms=2"`` names a registered dataset
  (``reasoning_gym.factory.DATASETS``) and overrides fields of its config dataclass;
  :func:`make_family_tasks` draws disjoint train and held-out splits and :func:`score`
  calls the dataset's own ``score_answer``.
- **JSONL**: one ``{"question", "answer"}`` object per line, scored by exact match after
  normalisation or by numeric match (:func:`load_tasks_file`). A line may instead (or also)
  carry a RaR rubric, ``{"question", "rubric": [{"title", "description", "weight"}],
  "reference"?}``, graded by a judge model (:mod:`arena.episode.rewards`); its rubric, reference and
  whether it has a verifier are kept in ``metadata``.

The reference ``answer`` reaches the critic (and the teacher's hint step) only, never
the solver. User errors raise :class:`TaskError` with a one-line message.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
import math
import random
import threading
import typing
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from agents.roles.rubric import Criterion, check_rubric
from arena.tasks.extract import normalise_number, normalise_text
from lessons.outcomes import passes

log = logging.getLogger(__name__)

__all__ = [
    "FamilySpec",
    "Task",
    "TaskError",
    "TaskSplits",
    "answers_match",
    "available_families",
    "has_verifier",
    "load_tasks",
    "load_tasks_file",
    "make_family_tasks",
    "make_slot_tasks",
    "parse_family_spec",
    "score",
    "verifier_feedback",
]

Split = Literal["train", "heldout"]
Source = Literal["reasoning_gym", "jsonl", "proposed"]

# --- seeding of reasoning-gym draws ----------------------------------------------------
# Most reasoning-gym datasets build item ``idx`` from ``Random(dataset_seed + idx)``, so two
# datasets whose seeds differ by 1 share all but one item. Each (spec occurrence, split)
# therefore gets its own block of SEED_BLOCK per-item seeds:
#     dataset_seed = (seed % SEED_WRAP) * SESSION_STRIDE + (2 * occurrence + split) * SEED_BLOCK
# with split 0 = train, 1 = held-out, and at most SEED_BLOCK items drawn per block, so
# train and held-out never share a generator seed (question text is checked as well).
# Dataset seeds stay below 2**32 (some families seed numpy with them); session seeds
# wrap every SEED_WRAP.
SEED_BLOCK = 100_000  # per-item generator seeds reserved for one split of one family spec
SESSION_STRIDE = 1_000_000  # room for 5 occurrences of a family x 2 splits per session seed
SEED_WRAP = 4_000  # session seeds are taken modulo this (4_000 x 1e6 < 2**32)
RESERVED_OPTIONS = ("seed", "size")  # config fields the session sets, not the spec

# The rubric tasks shipped with the package (open-ended questions a small model can attempt, each
# with a RaR rubric; some also with a verifiable answer): `arena run --reward rubric-explicit` uses
# them when no --family or --tasks-file is given.
BUILTIN_RUBRIC_TASKS = Path(__file__).resolve().parent / "data" / "rubric_tasks.jsonl"


class TaskError(ValueError):
    """A task source the user configured cannot be used.

    The message is one line meant for stderr; the CLI prints it and exits with code 2.
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
        answer: the reference answer; reaches the critic only, never the solver.
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


# =======================================================================================
# reasoning-gym family specs


def _datasets() -> dict[str, tuple[type, type]]:
    """reasoning-gym's registry: name → (dataset class, config dataclass)."""
    import reasoning_gym  # noqa: F401  (registers every dataset on import)
    from reasoning_gym.factory import DATASETS

    return DATASETS


def available_families() -> list[str]:
    """Sorted names of the reasoning-gym task families (``reasoning_gym.factory.DATASETS``)."""
    return sorted(_datasets())


def _fmt(v: object) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def _parse_value(raw: str) -> object:
    """``"2"`` → 2, ``"0.5"`` → 0.5, ``"true"``/``"false"`` → bool, anything else → str."""
    low = raw.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        return int(raw)
    except ValueError:
        pass
    try:
        value = float(raw)
    except ValueError:
        return raw
    return value if math.isfinite(value) else raw


_TYPE_NAMES = {int: "an integer", float: "a number", bool: "true or false", str: "text"}


def _coerce(key: str, raw: str, value: object, annotation: object) -> object:
    """Check a parsed value against the config field's declared type and convert where lossless.

    Raises:
        TaskError: the value does not fit the declared type (``min_terms=true``, ``min_terms=2.5``).
    """
    args = typing.get_args(annotation)
    types = {t for t in (set(args) if args else {annotation}) if t is not type(None)}
    simple = types & set(_TYPE_NAMES)
    if not simple or types - set(_TYPE_NAMES):
        return value  # a type we do not check (lists, nested configs): reasoning-gym's validate() decides
    if str in types and not types & {int, float, bool}:
        return raw  # a str field given "12" keeps the string
    if isinstance(value, bool):
        if bool in types:
            return value
    elif isinstance(value, int):
        if int in types:
            return value
        if float in types:
            return float(value)
    elif isinstance(value, float):
        if float in types:
            return value
    elif str in types:
        return value
    expected = " or ".join(_TYPE_NAMES[t] for t in (int, float, bool, str) if t in types)
    raise TaskError(f"option {key!r} expects {expected}, got {raw!r}")


def parse_family_spec(spec: str) -> FamilySpec:
    """Parse and validate a family spec ``"name[:key=value,key=value...]"``.

    Values are read as int, float, ``true``/``false``, else str (a str-typed config field
    keeps the raw text). The overrides are checked against the family's config dataclass
    and its ``validate()`` (reasoning-gym).

    Args:
        spec: e.g. ``"chain_sum:min_terms=2,max_terms=2,min_digits=1,max_digits=1"``.

    Returns:
        The :class:`FamilySpec`.

    Raises:
        TaskError: malformed spec, unknown family (with close matches), unknown or
            reserved option (with the valid ones), or a configuration reasoning-gym rejects.
    """
    text = spec.strip()
    name, sep, rest = text.partition(":")
    name = name.strip()
    if not name:
        raise TaskError(f"malformed task family spec {spec!r}: expected NAME or NAME:key=value,...")
    raw_values: dict[str, str] = {}
    if sep and rest.strip():
        for item in rest.split(","):
            key, eq, raw = item.partition("=")
            key, raw = key.strip(), raw.strip()
            if not eq or not key:
                raise TaskError(
                    f"malformed task family spec {spec!r}: {item.strip()!r} is not key=value "
                    f"(e.g. {name}:min_terms=2,max_terms=2)"
                )
            if not raw:
                raise TaskError(f"malformed task family spec {spec!r}: option {key!r} has no value")
            if key in raw_values:
                raise TaskError(f"malformed task family spec {spec!r}: option {key!r} given twice")
            raw_values[key] = raw
    _config_cls(FamilySpec(name=name, overrides=dict.fromkeys(raw_values)))  # family, option names
    hints = _field_types(name)
    overrides = {k: _coerce(k, raw, _parse_value(raw), hints.get(k, object)) for k, raw in raw_values.items()}
    result = FamilySpec(name=name, overrides=overrides)
    _build_config(result, seed=0, size=1)  # reasoning-gym's own validate()
    return result


def _field_types(name: str) -> dict[str, object]:
    _, config_cls = _datasets()[name]
    try:
        return typing.get_type_hints(config_cls)
    except Exception:  # forward references we cannot resolve: keep the generic parse
        return {}


def _config_cls(spec: FamilySpec) -> type:
    """The config dataclass of ``spec.name``, after checking the family and option names."""
    datasets = _datasets()
    if spec.name not in datasets:
        close = difflib.get_close_matches(spec.name, list(datasets), n=3, cutoff=0.6)
        if close:
            raise TaskError(f"unknown task family {spec.name!r}; did you mean: {', '.join(close)}?")
        examples = ", ".join(sorted(datasets)[:5])
        raise TaskError(
            f"unknown task family {spec.name!r}; reasoning-gym has {len(datasets)} families "
            f"(e.g. {examples}, ...; see reasoning_gym.factory.DATASETS)"
        )
    _, config_cls = datasets[spec.name]
    valid = sorted(f.name for f in dataclasses.fields(config_cls) if f.name not in RESERVED_OPTIONS)
    for key in spec.overrides:
        if key in RESERVED_OPTIONS:
            raise TaskError(
                f"option {key!r} of task family {spec.name!r} is set by the session "
                f"(use the session seed and task counts); valid options: {', '.join(valid)}"
            )
        if key not in valid:
            close = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise TaskError(
                f"unknown option {key!r} for task family {spec.name!r}; {hint}"
                f"valid options: {', '.join(valid) or '(none)'}"
            )
    return config_cls


def _build_config(spec: FamilySpec, *, seed: int, size: int) -> object:
    """Instantiate and validate the family's config; reasoning-gym's errors → TaskError."""
    config_cls = _config_cls(spec)
    try:
        config = config_cls(**spec.overrides, seed=seed, size=size)
        if hasattr(config, "validate"):
            config.validate()
    except (AssertionError, ValueError, TypeError) as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise TaskError(f"invalid configuration for task family '{spec}': {reason}") from None
    return config


def _make_dataset(spec: FamilySpec, *, seed: int, size: int) -> Any:
    """A reasoning-gym ``ProceduralDataset`` for ``spec`` with the given seed and size."""
    dataset_cls, _ = _datasets()[spec.name]
    config = _build_config(spec, seed=seed, size=size)
    try:
        return dataset_cls(config=config)
    except (AssertionError, ValueError, TypeError) as e:
        raise TaskError(f"invalid configuration for task family '{spec}': {e}") from None


def dataset_seed(seed: int, split: Split, occurrence: int = 0) -> int:
    """The reasoning-gym dataset seed for one split of one family spec (see SEED_BLOCK)."""
    block = 2 * occurrence + (0 if split == "train" else 1)
    if not 0 <= block < SESSION_STRIDE // SEED_BLOCK:
        raise TaskError(
            f"a task family may be given at most {SESSION_STRIDE // SEED_BLOCK // 2} times"
        )
    return (seed % SEED_WRAP) * SESSION_STRIDE + block * SEED_BLOCK


def _max_draws(n: int) -> int:
    """How many items to try for n distinct questions before giving up."""
    return min(SEED_BLOCK, 10 * n + 50)


def make_family_tasks(
    spec: FamilySpec,
    n_train: int,
    n_heldout: int,
    seed: int,
    *,
    occurrence: int = 0,
    exclude: Collection[str] = (),
) -> tuple[list[Task], list[Task]]:
    """Draw train and held-out tasks from one reasoning-gym family.

    Train and held-out come from disjoint reasoning-gym seeds,
    ``dataset_seed(seed, "train")`` and ``dataset_seed(seed, "heldout")`` (blocks of
    :data:`SEED_BLOCK` per-item seeds, since items are generated from ``dataset_seed + idx``).
    Questions are then deduplicated by normalised text within each split, and a held-out
    question that also appears in train is dropped and another one drawn (at most
    ``10 n + 50`` draws per split).

    Args:
        spec: the family and config overrides (see :func:`parse_family_spec`).
        n_train: number of train tasks (≥ 1).
        n_heldout: number of held-out tasks (≥ 1).
        seed: the session seed; same seed → same tasks.
        occurrence: index of this spec among specs of the same family in a session, so
            repeats get their own seed blocks and task keys (``chain_sum#2/...``).
        exclude: normalised questions (:func:`arena.tasks.extract.normalise_text`) that neither
            split may contain (questions already used by other sources).

    Returns:
        ``(train, heldout)`` lists of :class:`Task` with ``source="reasoning_gym"``.

    Raises:
        TaskError: bad counts, a configuration reasoning-gym rejects, a generator failure,
            or a family that cannot yield enough distinct questions.
    """
    if n_train < 1 or n_heldout < 1:
        raise TaskError(f"need at least 1 train and 1 held-out task per family (got {n_train} and {n_heldout})")
    _config_cls(spec)
    label = spec.name if occurrence == 0 else f"{spec.name}#{occurrence + 1}"
    seen = set(exclude)
    train = _draw(spec, "train", n_train, seed, occurrence, label, seen)
    heldout = _draw(spec, "heldout", n_heldout, seed, occurrence, label, seen)
    return train, heldout


def make_slot_tasks(
    spec: FamilySpec,
    split: Split,
    n: int,
    seed: int,
    *,
    occurrence: int,
    slot: int,
    tag: str,
    exclude: set[str],
) -> list[Task]:
    """Draw ``n`` more tasks of one split from another slot of its seed block (the curriculum's draws).

    Slot 0 is what :func:`make_family_tasks` draws; slot ``s`` uses the per-item generator seeds
    ``dataset_seed(seed, split, occurrence) + s * (10 n + 50) + idx``, so draws of different
    slots never share a generator seed, and never one of the other split.

    Args:
        spec: the family and the overrides to draw with (e.g. a harder rung of its ladder).
        split: ``"train"`` or ``"heldout"``.
        n: tasks to draw (≥ 1).
        seed: the session seed.
        occurrence: index of the spec among specs of the same family (see :func:`make_family_tasks`).
        slot: ≥ 1; ``(slot + 1) * (10 n + 50)`` must fit in :data:`SEED_BLOCK`.
        tag: inserted before the index in task keys: ``"{label}/{split}/{tag}{i:05d}"``.
        exclude: normalised questions not to draw (updated with the drawn ones).

    Raises:
        TaskError: the slot does not fit in the seed block, a bad configuration, a generator
            failure, or too few distinct questions.
    """
    size = _max_draws(n)
    if slot < 1 or (slot + 1) * size > SEED_BLOCK:
        raise TaskError(f"cannot draw slot {slot} of {n} tasks: the seed block holds {SEED_BLOCK // size - 1} slots")
    label = spec.name if occurrence == 0 else f"{spec.name}#{occurrence + 1}"
    return _draw(spec, split, n, seed, occurrence, label, exclude, offset=slot * size, tag=tag)


def _draw(
    spec: FamilySpec,
    split: Split,
    n: int,
    seed: int,
    occurrence: int,
    label: str,
    seen: set[str],
    offset: int = 0,
    tag: str = "",
) -> list[Task]:
    """n tasks of one split whose normalised question is not in ``seen`` (updated)."""
    ds_seed = dataset_seed(seed, split, occurrence) + offset
    size = _max_draws(n)
    dataset = _make_dataset(spec, seed=ds_seed, size=size)
    _remember(spec, ds_seed, size, dataset)
    tasks: list[Task] = []
    for idx in range(size):
        try:
            entry = dataset[idx]
        except Exception as e:  # a generator bug: one line, not a traceback
            raise TaskError(f"reasoning-gym failed to generate '{spec}' item {idx}: {type(e).__name__}: {e}") from None
        key = normalise_text(str(entry["question"]))
        if key in seen:
            continue
        seen.add(key)
        tasks.append(
            Task(
                task_key=f"{label}/{split}/{tag}{len(tasks):05d}",
                family=spec.name,
                split=split,
                question=str(entry["question"]),
                answer=str(entry["answer"]),
                source="reasoning_gym",
                metadata={
                    "overrides": dict(spec.overrides),
                    "dataset_seed": ds_seed,
                    "dataset_size": size,
                    "index": idx,
                    "rg_metadata": _json_safe(entry.get("metadata", {})),
                },
                entry=entry,
            )
        )
        if len(tasks) == n:
            return tasks
    what = "held-out questions not in train" if split == "heldout" else "train questions"
    raise TaskError(
        f"task family '{spec}' yielded only {len(tasks)} distinct {what} of {n} requested "
        f"in {size} draws; ask for fewer tasks or a harder difficulty"
    )


# --- dataset cache for score() ---------------------------------------------------------
# score_answer is a method of the dataset instance; building one can be costly (some
# families load data), so instances are cached by (family, overrides[, seed, size]).
_DATASETS_LOCK = threading.Lock()
_DATASET_CACHE: dict[tuple, Any] = {}


def _json_safe(obj: Any) -> Any:
    """A JSON-serialisable copy (tuples → lists, other objects → str) for storage."""
    return json.loads(json.dumps(obj, default=str))


def _remember(spec: FamilySpec, ds_seed: int, size: int, dataset: Any) -> None:
    with _DATASETS_LOCK:
        _DATASET_CACHE.setdefault(spec.cache_key, dataset)
        _DATASET_CACHE[(spec.cache_key, ds_seed, size)] = dataset


def _cached_dataset(spec: FamilySpec, ds_seed: int | None = None, size: int | None = None) -> Any:
    key: tuple = spec.cache_key if ds_seed is None else (spec.cache_key, ds_seed, size)
    with _DATASETS_LOCK:
        ds = _DATASET_CACHE.get(key)
    if ds is None:
        ds = _make_dataset(spec, seed=ds_seed if ds_seed is not None else 0, size=size or 1)
        with _DATASETS_LOCK:
            ds = _DATASET_CACHE.setdefault(key, ds)
    return ds


def _task_spec(task: Task) -> FamilySpec:
    overrides = task.metadata.get("overrides") or {}
    return FamilySpec(name=task.family, overrides=dict(overrides))


def _entry_of(task: Task) -> dict[str, Any]:
    """The reasoning-gym entry: the stored one, else regenerated, else rebuilt from fields."""
    if task.entry is not None:
        return task.entry
    spec = _task_spec(task)
    md = task.metadata
    if all(k in md for k in ("dataset_seed", "dataset_size", "index")):
        try:
            ds = _cached_dataset(spec, int(md["dataset_seed"]), int(md["dataset_size"]))
            entry = ds[int(md["index"])]
            if normalise_text(str(entry["question"])) == normalise_text(task.question):
                return entry
        except TaskError:
            raise
        except Exception as e:  # regenerate failed (another reasoning-gym version?): fall back
            log.debug("cannot regenerate entry of %s: %s", task.task_key, e)
    return {"question": task.question, "answer": task.answer, "metadata": md.get("rg_metadata", {})}


# =======================================================================================
# verifiers


def _clamp(x: float) -> float:
    x = float(x)
    return 0.0 if math.isnan(x) else max(0.0, min(1.0, x))


def answers_match(extracted: str, reference: str) -> bool:
    """Exact match after normalisation, or numeric match (``|a - b| <= 1e-6 * max(1, |b|)``): the JSONL verifier."""
    return _jsonl_match(extracted, reference)


def _jsonl_match(extracted: str, reference: str) -> bool:
    if normalise_text(extracted) == normalise_text(reference):
        return True
    a, b = normalise_number(extracted), normalise_number(reference)
    return a is not None and b is not None and abs(a - b) <= 1e-6 * max(1.0, abs(b))


def score(task: Task, extracted: str | None) -> float:
    """The verifier reward of an extracted answer, in [0, 1].

    - reasoning-gym tasks: the family dataset's ``score_answer(answer, entry)``
      (reasoning-gym; may give partial credit), with dataset instances cached per
      family and overrides; a missing ``entry`` is regenerated from the task metadata.
    - JSONL and ``"proposed"`` tasks: 1.0 on an exact match after normalisation (strip, case-fold, collapse
      whitespace) or a numeric match (``|a - b| <= 1e-6 * max(1, |b|)``), else 0.0.

    Args:
        task: the task (its reference ``answer`` is used here, never shown to the solver).
        extracted: the answer from :func:`arena.tasks.extract.extract_answer`, or None.

    Returns:
        The reward in [0, 1]; 0.0 for ``None`` or an empty answer.

    Raises:
        TaskError: a reasoning-gym task whose family is not registered, or a rubric task
            without a verifiable ``answer``.
    """
    if not has_verifier(task):
        raise TaskError(f"task {task.task_key} has no verifier (its file line gives a rubric but no \"answer\"); grade it with --reward rubric-explicit")
    if extracted is None or not extracted.strip():
        return 0.0
    if task.source in ("jsonl", "proposed"):
        return 1.0 if _jsonl_match(extracted, task.answer) else 0.0
    entry = _entry_of(task)
    dataset = _cached_dataset(_task_spec(task))
    try:
        reward = dataset.score_answer(answer=extracted, entry=entry)
    except Exception as e:  # a verifier crash on odd input scores 0, it must not end a session
        log.warning("score_answer of %s raised %s: %s; reward 0", task.family, type(e).__name__, e)
        return 0.0
    try:
        return _clamp(reward)
    except (TypeError, ValueError):
        return 0.0


def has_verifier(task: Task) -> bool:
    """Whether ``task`` has a verifiable reference answer (every task except rubric-only JSONL lines)."""
    return bool(task.metadata.get("verifiable", True))


def verifier_feedback(task: Task, extracted: str | None) -> str:
    """A one-line critique of an extracted answer that never reveals the reference.

    Examples: ``"no answer found: end with <answer>…</answer>"``,
    ``"answer '12' is incorrect"``, ``"answer '12' is correct"``,
    ``"answer '12' is partially correct (reward 0.50)"``.

    Args:
        task: the task being graded.
        extracted: the answer from :func:`arena.tasks.extract.extract_answer`, or None.
    """
    if extracted is None or not extracted.strip():
        return "no answer found: end with <answer>…</answer>"
    shown = " ".join(extracted.split())
    if len(shown) > 80:
        shown = shown[:77] + "..."
    reward = score(task, extracted)
    if passes(reward):
        return f"answer {shown!r} is correct"
    if reward <= 0.0:
        return f"answer {shown!r} is incorrect"
    return f"answer {shown!r} is partially correct (reward {reward:.2f})"


# =======================================================================================
# JSONL task files


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
        if isinstance(v, bool) or v is None:
            raise ValueError("must be a string or a number")
        if isinstance(v, (int, float)):
            if isinstance(v, float) and not math.isfinite(v):
                raise ValueError("must be a finite number")
            return str(v)
        if isinstance(v, str) and not v.strip():
            raise ValueError("must not be empty")
        return v

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
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise TaskError(f"cannot read task file {path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise TaskError(f"cannot read task file {path}: {e.strerror or e}") from None
    rows: list[tuple[int, TaskLine]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise TaskError(f"{where}: invalid JSON: {e.msg} (column {e.colno})") from None
        if not isinstance(obj, dict):
            raise TaskError(f'{where}: expected a JSON object {{"question": ..., "answer": ...}}, got {type(obj).__name__}')
        try:
            rows.append((lineno, TaskLine.model_validate(obj)))
        except ValidationError as e:
            raise TaskError(f"{where}: {_first_error(e)}") from None
    if not rows:
        raise TaskError(f'task file {path} is empty: expected one {{"question": ..., "answer": ...}} object per line')
    return rows


def load_tasks_file(
    path: str | Path, n_train: int, n_heldout: int, seed: int
) -> tuple[list[Task], list[Task]]:
    """Load a JSONL task file and split it into train and held-out tasks.

    Each non-blank line is ``{"question": str, "answer": str | number}`` with optional
    ``"family"`` (default: the file stem) and ``"metadata"`` (object); other keys are kept in
    the metadata. Lines are deduplicated by normalised question (first one kept), shuffled
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
        key = normalise_text(row.question)
        if key in unique:
            if normalise_text(unique[key][1].answer or "") != normalise_text(row.answer or ""):
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


# =======================================================================================
# all sources together


def load_tasks(
    families: list[str],
    tasks_file: Path | None,
    n_train: int,
    n_heldout: int,
    seed: int,
) -> TaskSplits:
    """Build the session's tasks from reasoning-gym family specs and/or a JSONL file.

    Each family spec contributes ``n_train`` train and ``n_heldout`` held-out tasks (so
    totals scale with the number of families); the task file contributes its own split
    (:func:`load_tasks_file`). No question appears twice across sources or splits: file
    questions are read first and excluded from the families' draws.

    Args:
        families: family specs, e.g. ``["chain_sum:min_terms=2,max_terms=2", "letter_counting"]``.
        tasks_file: a JSONL task file, or None.
        n_train: train tasks per source (≥ 1).
        n_heldout: held-out tasks per source (≥ 1).
        seed: the session seed.

    Returns:
        :class:`TaskSplits`, family tasks first (in the order given), then file tasks.

    Raises:
        TaskError: no source, or any error of :func:`parse_family_spec`,
            :func:`make_family_tasks` or :func:`load_tasks_file`.
    """
    if not families and tasks_file is None:
        raise TaskError("no tasks: give at least one task family (e.g. chain_sum) or a JSONL tasks file")
    specs = [parse_family_spec(s) for s in families]
    file_train: list[Task] = []
    file_heldout: list[Task] = []
    if tasks_file is not None:
        file_train, file_heldout = load_tasks_file(tasks_file, n_train, n_heldout, seed)
    clash = {t.family for t in file_train + file_heldout} & {spec.name for spec in specs}
    if clash:
        raise TaskError(
            f"task family {sorted(clash)[0]!r} comes both from reasoning-gym and from {tasks_file}; "
            'rename the "family" in the file'
        )
    used = {normalise_text(t.question) for t in file_train + file_heldout}
    train: list[Task] = []
    heldout: list[Task] = []
    occurrences: dict[str, int] = {}
    for spec in specs:
        occ = occurrences.get(spec.name, 0)
        occurrences[spec.name] = occ + 1
        tr, ho = make_family_tasks(spec, n_train, n_heldout, seed, occurrence=occ, exclude=used)
        used |= {normalise_text(t.question) for t in tr + ho}
        train += tr
        heldout += ho
    return TaskSplits(train=train + file_train, heldout=heldout + file_heldout)
