"""reasoning-gym task families: family specs, drawing train and held-out tasks, and their scoring.

A family spec such as ``"chain_sum:min_terms=2,max_terms=2"`` names a registered dataset
(``reasoning_gym.factory.DATASETS``) and overrides fields of its config dataclass
(:func:`parse_family_spec`); :func:`make_family_tasks` draws disjoint train and held-out
splits from disjoint seed blocks (:mod:`arena.tasks.seeds`), and :func:`gym_score` calls the
dataset's own ``score_answer``. Dataset instances are cached per family and overrides.
User errors raise :class:`arena.tasks.model.TaskError` with a one-line message.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import logging
import math
import threading
import typing
from collections.abc import Collection
from typing import Any

from arena.tasks.extract import normalise_text
from arena.tasks.identity import task_identity
from arena.tasks.model import FamilySpec, Split, Task, TaskError, VerifierError
from arena.tasks.seeds import SEED_BLOCK, dataset_seed, max_draws

log = logging.getLogger(__name__)

RESERVED_OPTIONS = ("seed", "size")  # config fields the session sets, not the spec


def _datasets() -> dict[str, tuple[type, type]]:
    """reasoning-gym's registry: name → (dataset class, config dataclass)."""
    import reasoning_gym  # noqa: F401  (registers every dataset on import)
    from reasoning_gym.factory import DATASETS

    return DATASETS


def available_families() -> list[str]:
    """Sorted names of the reasoning-gym task families (``reasoning_gym.factory.DATASETS``)."""
    return sorted(_datasets())


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
    build_config(result, seed=0, size=1)  # reasoning-gym's own validate()
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


def build_config(spec: FamilySpec, *, seed: int, size: int) -> object:
    """Instantiate and validate the family's config dataclass (reasoning-gym's ``validate()``).

    Args:
        spec: the family and its overrides.
        seed: the dataset seed.
        size: the dataset size (items).

    Returns:
        The config instance.

    Raises:
        TaskError: unknown family or option, or a configuration reasoning-gym rejects.
    """
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
    config = build_config(spec, seed=seed, size=size)
    try:
        return dataset_cls(config=config)
    except (AssertionError, ValueError, TypeError) as e:
        raise TaskError(f"invalid configuration for task family '{spec}': {e}") from None


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
    Questions are then deduplicated by task identity (:func:`arena.tasks.identity.task_identity`,
    the question as its verifier reads it, not its text) within each split, and a held-out
    question that is also a train task in any spelling is dropped and another one drawn (at most
    ``10 n + 50`` draws per split).

    Args:
        spec: the family and config overrides (see :func:`parse_family_spec`).
        n_train: number of train tasks (≥ 1).
        n_heldout: number of held-out tasks (≥ 1).
        seed: the session seed; same seed → same tasks.
        occurrence: index of this spec among specs of the same family in a session, so
            repeats get their own seed blocks and task keys (``chain_sum#2/...``).
        exclude: task identities (:func:`arena.tasks.identity.task_identity`) that neither
            split may contain (tasks already used by other sources).

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
        exclude: task identities not to draw (updated with the drawn ones).

    Raises:
        TaskError: the slot does not fit in the seed block, a bad configuration, a generator
            failure, or too few distinct questions.
    """
    size = max_draws(n)
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
    """n tasks of one split whose task identity is not in ``seen`` (updated)."""
    ds_seed = dataset_seed(seed, split, occurrence) + offset
    size = max_draws(n)
    dataset = _make_dataset(spec, seed=ds_seed, size=size)
    _remember(spec, ds_seed, size, dataset)
    tasks: list[Task] = []
    for idx in range(size):
        try:
            entry = dataset[idx]
        except Exception as e:  # a generator bug: one line, not a traceback
            raise TaskError(f"reasoning-gym failed to generate '{spec}' item {idx}: {type(e).__name__}: {e}") from None
        key = task_identity(str(entry["question"]))
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


def config_class(name: str) -> type:
    """The config dataclass of the registered reasoning-gym family ``name`` (no checks: a known name)."""
    _, config_cls = _datasets()[name]
    return config_cls


def _clamp(x: float) -> float:
    x = float(x)
    return 0.0 if math.isnan(x) else max(0.0, min(1.0, x))


def gym_score(task: Task, extracted: str) -> float:
    """The reward of a reasoning-gym task: its family dataset's ``score_answer(answer, entry)``.

    May give partial credit. The dataset instance is cached per family and overrides; a
    missing ``entry`` is regenerated from the task metadata (or rebuilt from its fields).

    Args:
        task: a task with ``source="reasoning_gym"``.
        extracted: the solver's extracted answer (not empty).

    Returns:
        The reward clamped to [0, 1].

    Raises:
        TaskError: the task's family is not registered.
        VerifierError: ``score_answer`` raised or returned something that is not a number in
            [0, 1] (a verifier crash on odd input): the caller records the rollout as ungraded
            with this reason — a crash is not a score of 0.
    """
    entry = _entry_of(task)
    dataset = _cached_dataset(_task_spec(task))
    try:
        reward = dataset.score_answer(answer=extracted, entry=entry)
    except Exception as e:  # noqa: BLE001 - any crash of third-party verifier code on odd input
        raise VerifierError(f"the {task.family} verifier raised {type(e).__name__} on answer {extracted[:40]!r}: "
                            f"{' '.join(str(e).split())[:120]}") from e
    try:
        return _clamp(reward)
    except (TypeError, ValueError):
        raise VerifierError(f"the {task.family} verifier returned {reward!r:.40} for answer {extracted[:40]!r}, "
                            "not a number") from None
