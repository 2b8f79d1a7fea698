"""Self-play curriculum: keep each task family at the solver's frontier, and let a proposer write new tasks there.

A group teaches most when the solver sometimes solves its task: an all-fail group teaches
nothing without a hint and an all-pass group nothing at all (Training-Free GRPO, arXiv
2510.08191, keeps only mixed groups; Guide, arXiv 2506.13923, filters groups by accuracy).
With ``--curriculum frontier`` the session therefore moves each family's difficulty after
every round so that its train pass@1 stays inside a target band (``--target-pass 0.3:0.7``):
above the band one rung up, below it one rung down, inside it stay (band control, as in
reasoning-gym's own ``coaching`` experiments, which adjust curriculum levels on accuracy).

**Difficulty ladder** (:class:`arena.tasks.curriculum.DifficultyLadder`): each family spec's
rungs come from its reasoning-gym curriculum, rung 0 being the spec as given; families without
a curriculum (:data:`arena.tasks.curriculum.NO_KNOB`) and JSONL task files stay fixed;
proposals still apply to them.

**Tasks per round.** Round 1 uses the session's train tasks (rung 0). A family at rung ``d``
trains on ``--train-tasks`` generator tasks drawn at that rung from their own slot of the
train seed block (:func:`arena.tasks.curriculum.draw_at_rung`, the same tasks whenever the family is at
rung ``d`` again) plus the accepted proposals made at that rung. Held-out tasks are drawn
once, before anything runs, at rung 0 and never change; at the end, held-out pass@1 is also
measured on a second held-out set drawn at each family's final rung from the held-out seed
block (never a train question), so both the starting and the final difficulty are reported.

**Proposals** (:mod:`agents.roles.proposer`): after each round, for up to ``--proposals`` groups per
family whose pass@1 was at or below the band's lower edge (barely solved first, then failed),
the proposer writes a variant task with a justified reference answer. It enters the pool only
if checkable (the family's verifier, else agreement of independent samples); every proposal is
stored in ``task_proposals`` with its verdict and reason, every task with its origin
(``generator``, ``file``, ``proposer`` + parent).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agents.policy import EndpointFault, Policy
from arena.tasks.curriculum import DifficultyLadder, Rung, draw_at_rung, rung_at, step_tag
from arena.tasks.extract import extract_answer
from arena.tasks.identity import task_identity
from arena.tasks.model import FamilySpec, Task, TaskError, TaskSplits, VerifierError
from arena.tasks.seeds import episode_seed
from arena.tasks.verify import answers_match, score
from lessons.library.curriculum import CurriculumRecords, CurriculumStep, ProposalRecord, StoredTask
from lessons.library.store import LessonStore
from lessons.outcomes import count_passes

Action = Literal["up", "down", "stay", "at_max", "at_min", "fixed", "no_data"]


# =======================================================================================
# band control


def band_action(pass_rate: float, band: tuple[float, float]) -> Literal["up", "down", "stay"]:
    """Which way to move a family's difficulty so that its train pass@1 returns to the band.

    Args:
        pass_rate: the family's train pass@1 over its recent groups, in [0, 1].
        band: ``(lo, hi)``, the target band (inclusive), ``0 <= lo < hi <= 1``.

    Returns:
        ``"up"`` (harder) above ``hi``, ``"down"`` (easier) below ``lo``, else ``"stay"``.
    """
    lo, hi = band
    if pass_rate > hi:
        return "up"
    if pass_rate < lo:
        return "down"
    return "stay"


# =======================================================================================
# the session's curriculum


@dataclass
class CurriculumSettings:
    """The curriculum slice of the session config."""

    mode: Literal["fixed", "frontier"] = "fixed"  # fixed: difficulty never moves; frontier: band control
    band: tuple[float, float] = (0.3, 0.7)  # target band of train pass@1 per family and round
    proposals: int = 0  # proposed tasks per family per round (frontier only)
    samples: int = 4  # independent samples confirming a proposal without a verifier
    agreement: float = 0.75  # share of them that must agree with the proposed reference
    train_tasks: int = 4  # generator tasks per family per rung
    heldout_tasks: int = 32  # held-out tasks per family (the final-difficulty set too)
    seed: int = 0
    success_threshold: float = 1.0  # reward at which a rollout passes
    teacher_max_tokens: int = 192  # proposer reply cap, tokens
    max_tokens: int = 96  # confirmation samples' cap, tokens


@dataclass
class _Unit:
    """One family spec of the session (a task-key label): its ladder, start tasks and state."""

    label: str
    spec: FamilySpec | None  # None: a JSONL family
    occurrence: int
    ladder: DifficultyLadder | None
    start_train: list[Task]
    heldout: list[Task]


def _label(task_key: str) -> str:
    return task_key.split("/", 1)[0]


def _occurrence(label: str) -> int:
    _, sep, n = label.partition("#")
    return int(n) - 1 if sep and n.isdigit() else 0


def known_tasks(tasks: Iterable[Any]) -> dict[str, tuple[str, str]]:
    """Task identity → ``(task_key, split)`` of ``tasks`` (objects with ``task_key``, ``split``, ``question``).

    The proposer's ``known_questions`` (:func:`agents.roles.proposer.check_proposal`). Keys are
    :func:`arena.tasks.identity.task_identity`, so a task written differently is still known; where
    tasks share a key, a held-out one wins, so the proposal is refused as held-out, not as a duplicate.
    """
    known: dict[str, tuple[str, str]] = {}
    for t in tasks:
        key = task_identity(t.question)
        if key not in known or t.split == "heldout":
            known[key] = (t.task_key, t.split)
    return known


def _from_stored(t: StoredTask) -> Task:
    return Task(t.task_key, t.family, t.split, t.question, t.answer, t.source, dict(t.metadata))  # type: ignore[arg-type]


class SessionCurriculum:
    """Chooses each round's train tasks, moves difficulty after it, and runs the proposer.

    Args:
        settings: the curriculum settings.
        store: the lesson store (the curriculum's rows go through :class:`CurriculumRecords`).
        session_id: the session.
        splits: the session's tasks as drawn before anything ran (held-out stays these).
        tasks: task key → task, shared with the episode graph; new tasks are added to it.
        proposer: the policy writing proposals (None: no proposals).
        confirm: the policy whose independent samples confirm references without a verifier.
        fits: raises :class:`arena.config.ConfigError` for tasks too long for the solver.

    Everything is recorded before it is used, so a resumed session picks up the same rungs,
    tasks and proposals.
    """

    def __init__(
        self,
        settings: CurriculumSettings,
        store: LessonStore,
        session_id: int,
        splits: TaskSplits,
        tasks: MutableMapping[str, Task],
        proposer: Policy | None = None,
        confirm: Any = None,
        fits: Any = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.records = CurriculumRecords(store)
        self.session_id = session_id
        self.tasks = tasks
        self.proposer = proposer
        self.confirm = confirm
        self.fits = fits or (lambda tasks: None)
        self.units: dict[str, _Unit] = {}
        for t in splits.train:
            label = _label(t.task_key)
            if label not in self.units:
                spec = FamilySpec(t.family, dict(t.metadata.get("overrides") or {})) if t.source == "reasoning_gym" else None
                ladder = DifficultyLadder(spec) if spec is not None and settings.mode == "frontier" else None
                self.units[label] = _Unit(label, spec, _occurrence(label), ladder, [], [])
            self.units[label].start_train.append(t)
        for t in splits.heldout:
            if _label(t.task_key) in self.units:
                self.units[_label(t.task_key)].heldout.append(t)
        self.stored: dict[str, StoredTask] = {t.task_key: t for t in self.records.session_tasks(session_id)}
        # task identities (arena.tasks.identity) of every task of the session: no draw repeats one
        self.seen: set[str] = {task_identity(t.question) for t in [*splits.train, *splits.heldout]}
        self.seen |= {task_identity(t.question) for t in self.stored.values()}
        self.steps: dict[tuple[int, str], CurriculumStep] = {
            (s.round, s.family): s for s in self.records.steps(session_id)
        }

    @staticmethod
    def added_task_keys(store: LessonStore, session_id: int) -> set[str]:
        """Keys of the tasks a session added as it ran (harder/easier rungs, final held-out, proposals).

        The runner's resume check compares only the session's initial tasks with a fresh draw.
        """
        return {
            t.task_key for t in CurriculumRecords(store).session_tasks(session_id)
            if t.origin == "proposer" or "curriculum" in t.metadata
        }

    # --------------------------------------------------------------------- helpers

    def _register(self, tasks: Iterable[Task]) -> None:
        for t in tasks:
            self.tasks[t.task_key] = t
            self.seen.add(task_identity(t.question))

    def _rung(self, unit: _Unit, step: int) -> Rung | None:
        return rung_at(unit.ladder, unit.spec, step)

    def _drawn(self, unit: _Unit, split: str, step: int, n: int) -> list[Task]:
        """Generator tasks of ``unit`` at rung ``step`` (stored ones on resume, else drawn and stored).

        Raises:
            TaskError: the rung does not exist, does not fit the seed block or yields too few tasks.
            arena.config.ConfigError: its tasks are too long for the solver.
        """
        if step == 0:  # the session's own draw, made before anything ran
            return list(unit.start_train if split == "train" else unit.heldout)
        prefix = f"{unit.label}/{split}/{step_tag(step)}"
        stored = sorted((t for k, t in self.stored.items() if k.startswith(prefix) and t.origin == "generator"),
                        key=lambda t: t.task_key)
        if stored:
            return [_from_stored(t) for t in stored]
        rung = self._rung(unit, step)
        if rung is None or unit.spec is None:
            raise TaskError(f"{unit.label} has no rung {step}")
        drawn = draw_at_rung(
            unit.spec, rung, split, n, self.settings.seed,  # type: ignore[arg-type]
            label=unit.label, occurrence=unit.occurrence, exclude=self.seen,
        )
        self.fits(drawn)
        # disjoint by construction: the next draw (this rung's held-out set after its train set) excludes these
        self.seen |= {task_identity(t.question) for t in drawn}
        self.records.add_tasks(self.session_id, drawn)
        self.stored.update(
            {t.task_key: StoredTask(t.task_key, t.family, t.split, t.question, t.answer, t.source, t.metadata, "generator", None)
             for t in drawn}
        )
        return drawn

    def _train_at(self, unit: _Unit, step: int) -> list[Task]:
        tasks = self._drawn(unit, "train", step, self.settings.train_tasks)
        proposed = sorted(
            (t for t in self.stored.values()
             if t.origin == "proposer" and _label(t.task_key) == unit.label
             and (t.metadata.get("curriculum") or {}).get("step", 0) == step),
            key=lambda t: t.task_key,
        )
        return [*tasks, *(_from_stored(t) for t in proposed)]

    # --------------------------------------------------------------------- rounds

    def tasks_for_round(self, rnd: int) -> list[Task]:
        """The train tasks of round ``rnd``, family by family; records each family's rung for the round."""
        out: list[Task] = []
        for label, unit in self.units.items():
            step = self._round_step(rnd, label)
            rung = self._rung(unit, step)
            row = self.records.start_step(
                self.session_id, rnd, label, step, rung.levels if rung else {}, rung.overrides if rung else {}
            )
            self.steps[(rnd, label)] = row
            tasks = self._train_at(unit, row.step)
            self._register(tasks)
            out += tasks
        return out

    def _round_step(self, rnd: int, label: str) -> int:
        if (rnd, label) in self.steps:
            return self.steps[(rnd, label)].step
        prev = self.steps.get((rnd - 1, label))
        if prev is None:
            return 0
        return prev.next_step if prev.next_step is not None else prev.step

    def end_round(self, rnd: int) -> dict[str, CurriculumStep]:
        """After round ``rnd``: each family's pass rate, the band decision, then proposals.

        Returns:
            label → the completed :class:`CurriculumStep` of this round.
        """
        outcomes = [g for g in self.store.group_outcomes(self.session_id) if g.round == rnd]
        done: dict[str, CurriculumStep] = {}
        for label, unit in self.units.items():
            row = self.steps[(rnd, label)]
            groups = [g for g in outcomes if _label(g.task_key) == label]
            if row.action is None:
                row = self._decide(unit, row, groups)
            if not row.proposals_done and self.settings.mode == "frontier" and self.settings.proposals > 0 and self.proposer:
                try:
                    self._propose(unit, row, groups)
                except EndpointFault:  # the proposer's endpoint failed: no proposals this round, the session goes on
                    pass
                row = dataclasses.replace(row, proposals_done=True)
            self.steps[(rnd, label)] = row
            done[label] = row
        return done

    def _decide(self, unit: _Unit, row: CurriculumStep, groups: Sequence[Any]) -> CurriculumStep:
        thr = self.settings.success_threshold
        rewards = [r for g in groups for r in g.unguided]
        rate = count_passes(rewards, thr) / len(rewards) if rewards else None
        action: Action
        next_step = row.step
        if rate is None:
            action = "no_data"
        elif self.settings.mode != "frontier" or unit.ladder is None or not unit.ladder.has_knob:
            action = "fixed"
        else:
            want = band_action(rate, self.settings.band)
            action = want
            if want != "stay":
                target = row.step + (1 if want == "up" else -1)
                if self._available(unit, target):
                    next_step = target
                else:
                    action = "at_max" if want == "up" else "at_min"
        return self.records.finish_step(
            self.session_id, row.round, row.family, len(groups), None if rate is None else round(rate, 6), action, next_step
        )

    def _available(self, unit: _Unit, step: int) -> bool:
        """Whether rung ``step`` exists and yields train and held-out tasks that fit the solver.

        Draws and stores both sets on success, so that a family can only move to a rung whose
        final-difficulty held-out set can be measured too.
        """
        from arena.config import ConfigError

        if self._rung(unit, step) is None:
            return False
        try:
            self._drawn(unit, "train", step, self.settings.train_tasks)
            self._drawn(unit, "heldout", step, self.settings.heldout_tasks)
        except (TaskError, ConfigError):
            return False
        return True

    # --------------------------------------------------------------------- proposals

    def _propose(self, unit: _Unit, row: CurriculumStep, groups: Sequence[Any]) -> None:
        from agents.roles.proposer import REFERENCE_CHECKERS, ParentView, ProposalResult, check_proposal, propose_task
        from arena.config import ConfigError

        s = self.settings
        thr = s.success_threshold
        rated = []
        for g in groups:
            rate = count_passes(g.unguided, thr) / len(g.unguided) if g.unguided else 0.0
            if rate <= s.band[0] and g.task_key in self.tasks:
                rated.append((rate, g.task_key))
        # barely solved first (closest to the band), then failed; ties in round order
        rated.sort(key=lambda x: -x[0])
        known = known_tasks([*self.stored.values(), *self.tasks.values()])
        records: list[ProposalRecord] = []
        for i, (rate, parent_key) in enumerate(rated[: s.proposals]):
            parent = self.tasks[parent_key]
            view = ParentView(parent.family, parent.question, parent.answer, rate, len(groups[0].unguided) if groups else 0)
            seed = episode_seed(s.seed, f"propose-r{row.round:03d}-{parent_key}")
            proposal, error, raw = propose_task(self.proposer, view, max_tokens=s.teacher_max_tokens, seed=seed)
            name = self.proposer.name
            if proposal is None:
                records.append(ProposalRecord(parent_key, name, "rejected", None, None, None, "unparsable",
                                              f"no valid reply: {error}", None, {}, raw))
                continue
            checker = REFERENCE_CHECKERS.get(parent.family) if parent.source == "reasoning_gym" else None
            overrides = dict(parent.metadata.get("overrides") or {})

            def verify(proposed: str, computed: str, family: str = parent.family, ov: dict = overrides) -> float:
                probe = Task("probe", family, "train", "", computed, "reasoning_gym", {"overrides": ov})
                try:
                    return score(probe, proposed)
                except VerifierError:  # an answer the family's verifier cannot score is not confirmed
                    return 0.0

            result: ProposalResult = check_proposal(
                proposal, view, known, task_identity, checker=checker, verify=verify if checker else None,
                confirm=self.confirm, answers_match=answers_match, extract=extract_answer, samples=s.samples,
                agreement=s.agreement, max_tokens=s.max_tokens, seed=seed + 1,
            )
            task = None
            if result.accepted:
                task = Task(
                    task_key=f"{unit.label}/train/p{row.round:03d}-{i:02d}",
                    family=parent.family,
                    split="train",
                    question=proposal.question,
                    answer=proposal.answer,
                    source="reasoning_gym" if result.check == "verifier" else "proposed",
                    metadata={"overrides": overrides, "curriculum": {"step": row.step}, "parent": parent_key,
                              "justification": proposal.justification},
                )
                try:
                    self.fits([task])
                except ConfigError as e:
                    result = ProposalResult(proposal, False, "too_long", str(e), result.check, result.check_detail)
                    task = None
            if task is not None:
                known.setdefault(task_identity(task.question), (task.task_key, "train"))
            records.append(
                ProposalRecord(
                    parent_key, name, "accepted" if task is not None else "rejected", proposal.question,
                    proposal.answer, proposal.justification, result.reason_code, result.reason, result.check,
                    result.check_detail, raw, task,
                )
            )
        self.records.record_proposals(self.session_id, row.round, row.family, records)
        for r in records:
            if r.task is not None:
                t = r.task
                self.stored[t.task_key] = StoredTask(t.task_key, t.family, t.split, t.question, t.answer, t.source,
                                                     dict(t.metadata), "proposer", r.parent_key)
                self.seen.add(task_identity(t.question))

    # --------------------------------------------------------------------- final difficulty

    def final_steps(self) -> dict[str, int]:
        """label → the rung of the family's last recorded round (0 before any round)."""
        out: dict[str, int] = {label: 0 for label in self.units}
        for (rnd, label), row in sorted(self.steps.items()):
            out[label] = row.step
        return out

    def final_heldout(self) -> list[Task] | None:
        """Held-out tasks at each family's final rung, or None when every family ended at rung 0.

        A family at rung 0 (or without a knob) keeps its starting held-out tasks; another draws
        ``heldout_tasks`` from its rung's slot of the held-out seed block, excluding every
        question of the session (stored, so a resume evaluates the same tasks).
        """
        steps = self.final_steps()
        if all(v == 0 for v in steps.values()):
            return None
        out: list[Task] = []
        for label, unit in self.units.items():
            out += self._drawn(unit, "heldout", steps[label], self.settings.heldout_tasks)
        return out


# =======================================================================================
# summary


class DifficultyStep(BaseModel):
    """One family's difficulty in one round and the band decision after it (``difficulty`` of ``arena run --json``)."""

    model_config = ConfigDict(extra="forbid")

    round: int = Field(description="The round, from 1.")
    step: int = Field(description="Rung of the family's difficulty ladder in that round; 0 is the spec as given, "
                                  "negative below it.")
    levels: dict[str, int] = Field(description="Curriculum attribute (reasoning-gym's, e.g. num_digits) → its level "
                                               "at this rung; {} for a family without a curriculum.")
    # the family's own config keys (reasoning-gym's, any JSON value): an open set, so a dict
    config: dict[str, Any] = Field(description="The family config overrides at this rung ({} for a JSONL family).")
    groups: int | None = Field(description="Groups of the family trained in the round; null until the round ends.")
    train_pass_rate: float | None = Field(description="Their mean unguided train pass@1, in [0, 1]; null until the "
                                                      "round ends.")
    action: str | None = Field(description="The band decision after the round: up, down, stay, at_max, at_min, fixed "
                                           "or no_data; null until the round ends.")


class DifficultyEnd(BaseModel):
    """A family's rung at the first or last round (``difficulty_start`` / ``difficulty_final``)."""

    model_config = ConfigDict(extra="forbid")

    step: int = Field(description="Rung of the family's difficulty ladder; 0 is the spec as given.")
    config: dict[str, Any] = Field(description="The family config overrides at that rung.")


class CurriculumSummary(BaseModel):
    """The curriculum's part of the session summary: difficulty per family and round, and the proposals.

    Its keys stand at the top level of ``arena run --json`` (:class:`arena.session.summary.SessionSummary`
    flattens it). The dicts are keyed by the family spec's task-key label (``chain_sum``,
    ``chain_sum#2``, a JSONL family): the session's own families, an open set.
    """

    model_config = ConfigDict(extra="forbid")

    difficulty: dict[str, list[DifficultyStep]] = Field(
        description="Family label → one entry per round: its rung, levels, config and band decision.")
    difficulty_start: dict[str, DifficultyEnd] = Field(description="Family label → its rung in the first round.")
    difficulty_final: dict[str, DifficultyEnd] = Field(description="Family label → its rung in the last round.")
    proposed_tasks: int = Field(description="Tasks the proposer wrote (accepted or not).")
    accepted_tasks: int = Field(description="Proposed tasks that passed their check and joined the train pool.")
    proposal_rejections: dict[str, int] = Field(description="Rejected proposals by reason code (e.g. no_agreement, "
                                                            "unjustified; unknown when none was stored), in the "
                                                            "order first met.")


def curriculum_summary(store: LessonStore, session_id: int) -> CurriculumSummary:
    """The curriculum's part of the session summary, from stored rows.

    Args:
        store: the library.
        session_id: the session's id.

    Returns:
        :class:`CurriculumSummary`: per family label one :class:`DifficultyStep` per round, the
        first and last rung, the proposals made and accepted, rejections by reason code.
    """
    records = CurriculumRecords(store)
    difficulty: dict[str, list[DifficultyStep]] = {}
    for s in records.steps(session_id):
        difficulty.setdefault(s.family, []).append(DifficultyStep(
            round=s.round, step=s.step, levels=s.levels, config=s.config, groups=s.groups,
            train_pass_rate=s.pass_rate, action=s.action,
        ))
    proposals = records.proposals(session_id)
    rejections: dict[str, int] = {}
    for p in proposals:
        if p.status == "rejected":
            rejections[p.reason_code or "unknown"] = rejections.get(p.reason_code or "unknown", 0) + 1
    return CurriculumSummary(
        difficulty=difficulty,
        difficulty_start={f: DifficultyEnd(step=r[0].step, config=r[0].config) for f, r in difficulty.items()},
        difficulty_final={f: DifficultyEnd(step=r[-1].step, config=r[-1].config) for f, r in difficulty.items()},
        proposed_tasks=len(proposals),
        accepted_tasks=sum(p.status == "accepted" for p in proposals),
        proposal_rejections=rejections,
    )
