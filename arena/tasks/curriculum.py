"""Difficulty ladders of reasoning-gym families, and the tasks drawn at a rung.

**Difficulty ladder** (:class:`DifficultyLadder`). reasoning-gym ships a curriculum for 102 of
its 106 families (``reasoning_gym.factory.create_curriculum``): attributes with ordered levels
(``ChainSumCurriculum``: ``num_terms`` 2..12 → ``min_terms``/``max_terms``, ``num_digits``
1..10 → ``min_digits``/``max_digits``). Rung 0 is the family spec exactly as given; its
attribute levels are the ones nearest the spec's effective config. One rung up raises one
attribute by one level, round-robin over the attributes (the one raised least so far first,
in the curriculum's attribute order), skipping a level whose config reasoning-gym rejects; a
rung down lowers them the same way. Levels become config ranges as in reasoning-gym's
``DefaultCurriculumContext`` in ``INCLUSIVE`` mode (from the lowest level up to the current
one), except that a lower bound the spec raised stays raised. So the default spec
``chain_sum:min_terms=2,max_terms=2,min_digits=1,max_digits=2`` has rung −1 = 2 terms of 1
digit, rung 1 = 2–3 terms of 1–2 digits, rung 2 = 2–3 terms of 1–3 digits, and so on.
Families without a curriculum have no difficulty knob and stay fixed (:data:`NO_KNOB`), as do
JSONL task files.

**Draws at a rung** (:func:`draw_at_rung`). Rung ``d`` of a split draws from its own slot
(:func:`step_slot`) of the split's seed block (:func:`arena.tasks.gym.make_slot_tasks`), so
the same tasks come back whenever the family is at rung ``d`` again, and a rung never shares
a generator seed with another rung or the other split. The self-play curriculum that moves
families along their ladders is :mod:`arena.session.curriculum`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from arena.tasks.gym import build_config, config_class, make_slot_tasks
from arena.tasks.model import FamilySpec, Split, Task, TaskError
from arena.tasks.seeds import SEED_BLOCK, max_draws

# reasoning-gym families without a registered curriculum, and why their difficulty stays fixed.
NO_KNOB: dict[str, str] = {
    "acre": "no difficulty setting (ACRE's config has only the train flag)",
    "composite": "a mixture of other families: give them as separate --family specs to adapt each",
    "gsm_symbolic": "reasoning-gym supports only difficulty=1.0",
    "list_functions": "no difficulty setting",
}

MAX_RUNGS = 64  # rungs explored in each direction of a ladder (chain_sum has 18 up, 1 down from the default)


@dataclass(frozen=True)
class Rung:
    """One difficulty of a family: curriculum levels and the config overrides they give."""

    step: int  # 0: the spec as given; > 0 harder; < 0 easier
    levels: dict[str, int]  # curriculum attribute -> level index
    overrides: dict[str, Any]  # the family config overrides to draw tasks with
    moves: dict[str, int] = field(default_factory=dict, compare=False)  # level changes per attribute from rung 0


class DifficultyLadder:
    """The rungs of one family spec's difficulty, built from its reasoning-gym curriculum.

    Args:
        spec: the family spec of the session (its rung 0).

    Attributes:
        has_knob: False for families without a curriculum (:data:`NO_KNOB`): only rung 0 exists.

    See the module docstring for how rungs are built. Rungs are computed lazily and cached.
    """

    def __init__(self, spec: FamilySpec) -> None:
        from reasoning_gym.coaching.attributes import RangeAttributeDefinition
        from reasoning_gym.factory import create_curriculum, has_curriculum

        self.spec = spec
        self.curriculum = create_curriculum(spec.name) if has_curriculum(spec.name) else None
        self.has_knob = self.curriculum is not None and bool(self.curriculum.attributes)
        self._cache: dict[int, Rung | None] = {}
        if not self.has_knob:
            self._cache[0] = Rung(0, {}, dict(spec.overrides))
            return
        config_cls = config_class(spec.name)
        defaults = {f.name: f.default for f in dataclasses.fields(config_cls) if f.default is not dataclasses.MISSING}
        effective = {**defaults, **spec.overrides}
        self.attrs = list(self.curriculum.attributes.values())
        fields: set[str] = set()
        for a in self.attrs:
            fields |= {a.lower_field_name, a.upper_field_name} if isinstance(a, RangeAttributeDefinition) else {a.field_name}
        self.fixed = {k: v for k, v in spec.overrides.items() if k not in fields}  # kept on every rung
        self.floors = {
            a.name: effective.get(a.lower_field_name) for a in self.attrs if isinstance(a, RangeAttributeDefinition)
        }
        start = {a.name: self._nearest_level(a, effective) for a in self.attrs}
        self._cache[0] = Rung(0, start, dict(spec.overrides), {a.name: 0 for a in self.attrs})

    # --------------------------------------------------------------------- levels <-> config

    def _value(self, attr: Any, level: int) -> Any:
        """The config value(s) of one attribute at ``level`` (INCLUSIVE range: ``[lo, hi]``)."""
        from reasoning_gym.coaching.base_curriculum import DefaultCurriculumContext, RangeAttributeMode

        self.curriculum.set_attr_level(attr.name, level)
        return DefaultCurriculumContext(mode=RangeAttributeMode.INCLUSIVE).get_attr_value(self.curriculum, attr)

    def _nearest_level(self, attr: Any, effective: Mapping[str, Any]) -> int:
        from reasoning_gym.coaching.attributes import RangeAttributeDefinition

        ranged = isinstance(attr, RangeAttributeDefinition)
        target = effective.get(attr.upper_field_name if ranged else attr.field_name)
        best, best_gap = attr.default_level, math.inf
        for level in range(len(attr.levels)):
            v = self._value(attr, level)
            v = _span(v)[1] if ranged else v
            if v == target:
                return level
            try:
                gap = abs(float(v) - float(target))  # type: ignore[arg-type]
            except (TypeError, ValueError):
                continue
            if gap < best_gap:
                best, best_gap = level, gap
        return best

    def overrides_at(self, levels: Mapping[str, int]) -> dict[str, Any]:
        """The config overrides at ``levels`` (attribute → level), with the spec's other overrides kept."""
        from reasoning_gym.coaching.attributes import RangeAttributeDefinition

        out: dict[str, Any] = dict(self.fixed)
        for a in self.attrs:
            v = self._value(a, levels[a.name])
            if isinstance(a, RangeAttributeDefinition):
                lo, hi = _span(v)
                floor = self.floors.get(a.name)
                try:
                    if floor is not None and floor > lo:
                        lo = min(floor, hi)
                except TypeError:
                    pass
                out[a.lower_field_name], out[a.upper_field_name] = lo, hi
            else:
                out[a.field_name] = v
        return out

    def _valid(self, overrides: dict[str, Any]) -> bool:
        try:
            build_config(FamilySpec(self.spec.name, overrides), seed=0, size=1)
        except TaskError:
            return False
        return True

    # --------------------------------------------------------------------- rungs

    def rung(self, step: int) -> Rung | None:
        """Rung ``step`` of the ladder, or None past its end (or for any step ≠ 0 without a knob)."""
        if step in self._cache:
            return self._cache[step]
        if not self.has_knob or abs(step) > MAX_RUNGS:
            return None
        direction = 1 if step > 0 else -1
        prev = self.rung(step - direction)
        result = None if prev is None else self._next(prev, direction, step)
        self._cache[step] = result
        return result

    def _next(self, prev: Rung, direction: int, step: int) -> Rung | None:
        levels, moves = dict(prev.levels), dict(prev.moves)
        prev_overrides = prev.overrides if prev.step != 0 else self.overrides_at(prev.levels)
        for _ in range(sum(len(a.levels) for a in self.attrs)):  # each pass moves one level, or stops
            order = sorted(range(len(self.attrs)), key=lambda i: (abs(moves[self.attrs[i].name]), i))
            for i in order:
                a = self.attrs[i]
                new = levels[a.name] + direction
                if not 0 <= new < len(a.levels):
                    continue
                trial = {**levels, a.name: new}
                overrides = self.overrides_at(trial)
                if not self._valid(overrides):
                    continue
                levels, moves = trial, {**moves, a.name: moves[a.name] + direction}
                break
            else:
                return None  # no attribute can move in this direction
            if overrides != prev_overrides:  # a level that changes nothing is passed over
                return Rung(step, levels, overrides, moves)
        return None


def _span(v: Any) -> tuple[Any, Any]:
    """``(min, max)`` of a curriculum value that is a scalar or a list of values."""
    if isinstance(v, (list, tuple)):
        return min(v), max(v)
    return v, v


def step_slot(step: int) -> int:
    """The seed-block slot of rung ``step``'s draws: 0 → 0, 1 → 1, −1 → 2, 2 → 3, −2 → 4, ..."""
    return 2 * step - 1 if step > 0 else -2 * step


def step_tag(step: int) -> str:
    """The task-key tag of rung ``step``'s draws: ``"s+01-"``, ``"s-01-"`` ("" for rung 0)."""
    return "" if step == 0 else f"s{step:+03d}-"


def rung_at(ladder: DifficultyLadder | None, spec: FamilySpec | None, step: int) -> Rung | None:
    """Rung ``step`` of a family spec, or None where it does not exist.

    Args:
        ladder: the spec's ladder, or None (a JSONL family: only rung 0).
        spec: the family spec of the session, or None for a JSONL family.
        step: the rung; 0 is the spec as given (its own overrides, the ladder's rung-0 levels).

    Returns:
        The :class:`Rung`; None past the ladder's end or, without a ladder, for any step ≠ 0.
    """
    if step == 0:
        return Rung(0, ladder.rung(0).levels if ladder else {}, dict(spec.overrides) if spec else {})
    return ladder.rung(step) if ladder is not None else None


def draw_at_rung(
    spec: FamilySpec,
    rung: Rung,
    split: Split,
    n: int,
    seed: int,
    *,
    label: str,
    occurrence: int,
    exclude: Collection[str],
) -> list[Task]:
    """Draw ``n`` generator tasks of one split at a rung ≠ 0, from the rung's slot of the seed block.

    Args:
        spec: the family spec of the session (its name; the overrides come from ``rung``).
        rung: the rung to draw at (``rung.step`` ≠ 0).
        split: ``"train"`` or ``"heldout"``.
        n: tasks to draw (≥ 1).
        seed: the session seed.
        label: the family's task-key label (``chain_sum``, ``chain_sum#2``), for messages.
        occurrence: index of the spec among specs of the same family.
        exclude: task identities (:func:`arena.tasks.identity.task_identity`) not to draw (not modified).

    Returns:
        The tasks, keys ``"{label}/{split}/{step_tag}{i:05d}"``, each with
        ``metadata["curriculum"] = {"step", "levels"}``.

    Raises:
        TaskError: the rung's slot is past the seed block, a bad configuration, a generator
            failure, or too few distinct questions.
    """
    step = rung.step
    if (step_slot(step) + 1) * max_draws(n) > SEED_BLOCK:
        raise TaskError(f"{label}: rung {step} is past the seed block")
    drawn = make_slot_tasks(
        FamilySpec(spec.name, rung.overrides), split, n, seed,
        occurrence=occurrence, slot=step_slot(step), tag=step_tag(step), exclude=set(exclude),
    )
    return [
        dataclasses.replace(t, metadata={**t.metadata, "curriculum": {"step": step, "levels": rung.levels}})
        for t in drawn
    ]
