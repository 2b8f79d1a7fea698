"""The session summary (``arena run --json``) as typed models, built from stored rows (a resumed session reports all).

:func:`build_summary` assembles a :class:`SessionSummary` from the parts below: held-out
evaluations as recorded (:func:`stored_eval_summary`, :class:`EvalFigure`), per-round statistics
(:func:`rounds_summary`, :class:`RoundFigures`), paired comparisons (:class:`PairedComparison`),
the wake–sleep cycles (:func:`cycles_summary`, :class:`CycleSummary`), hint rescue rates
(:func:`hint_summary`, :class:`HintSummary`), rubric-reward figures (:func:`rubric_summary`,
:class:`RubricSummary`) and the curriculum's part
(:class:`arena.session.curriculum.CurriculumSummary`); the runner adds what only the running
process knows (:class:`RunSummary`: the OnlineRubrics updates of :func:`online_rubrics_summary`,
the wall time, :class:`RoleSpeed` per role).

The JSON is the CLI's contract: :meth:`SessionSummary.to_json` prints exactly what ``--json``
printed when the summary was a dict (same keys, order, rounding, ``null``\\ s; pinned by
``tests/arena/test_summary_json.py``). The hint, rubric and curriculum parts are nested models
here and flat keys there; :meth:`SessionSummary.model_json_schema` describes the flat JSON, and
:func:`summary_fields_markdown` renders it for the docs.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from agents.roles.hints import plan_rejection_reasons
from arena.config import SessionConfig
from arena.evaluation import paired
from arena.session.curriculum import CurriculumSummary, curriculum_summary
from arena.session.cycles import HeldoutEvals, cycle_adapters, cycle_rounds
from arena.session.utility import utility_skip_reason
from arena.stats import mean_pass_at_k
from lessons.library.rubrics import RubricStore
from lessons.library.store import EvaluationInfo, LessonStore
from lessons.outcomes import (
    EVAL_NAMES,
    HELDOUT_AFTER,
    HELDOUT_AFTER_NO_LESSONS,
    HELDOUT_BEFORE,
    HELDOUT_FINAL_DIFFICULTY,
    HELDOUT_FINAL_DIFFICULTY_NO_LESSONS,
    eval_name,
    passes,
)

# extra: a key the model does not know is an error, not silently dropped; the serialisation schema (what --json
# holds) requires a field with a default too, since it is always written
_STRICT = ConfigDict(extra="forbid", json_schema_serialization_defaults_required=True)


class EvalFigure(BaseModel):
    """Held-out pass@1 of one evaluation with its 95% Wilson interval (:func:`arena.evaluation.wilson_summary`)."""

    model_config = _STRICT

    pass_at_1: float | None = Field(description="Share of the graded held-out tasks passed (greedy decoding), in "
                                                "[0, 1], rounded to 4 places; null when no task was graded (n = 0).")
    n: int = Field(description="Held-out tasks graded.")
    ci95: tuple[float, float] = Field(description="95% Wilson interval of pass@1, [lo, hi], rounded to 4 places "
                                                  "([0.0, 1.0] when n = 0).")


class PairedComparison(BaseModel):
    """Evaluation A vs B on the same tasks (:func:`arena.stats.paired_comparison`: Newcombe interval, McNemar p)."""

    model_config = _STRICT

    n: int = Field(description="Tasks paired (the same tasks, in the same order, under A and B).")
    a_pass_at_1: float = Field(description="pass@1 of A, in [0, 1], rounded to 4 places.")
    b_pass_at_1: float = Field(description="pass@1 of B, in [0, 1], rounded to 4 places.")
    diff: float = Field(description="pass@1 of A minus pass@1 of B, in [-1, 1], rounded to 4 places.")
    ci95: tuple[float, float] = Field(description="95% interval of diff, [lo, hi] (Newcombe 1998, method 10), "
                                                  "rounded to 4 places.")
    a_only: int = Field(description="Tasks A passes and B fails (a discordant count).")
    b_only: int = Field(description="Tasks B passes and A fails (a discordant count).")
    p_value: float = Field(description="Exact two-sided McNemar p-value, 6 significant digits.")


class RoundFigures(BaseModel):
    """One round's sampled train figures: episodes, mean reward, pass@1 and pass@k over its groups."""

    model_config = _STRICT

    round: int = Field(description="The round, from 1.")
    episodes: int = Field(description="Episodes of the round with at least one graded unguided reward.")
    mean_reward: float = Field(description="Mean reward over the round's graded unguided rollouts, in [0, 1], "
                                           "rounded to 4 places; 0.0 when none.")
    pass_at_1: float = Field(description="Mean sampled pass@1 over the round's groups, rounded to 4 places.")
    k: int = Field(exclude=True, description="k of pass_at_k: the group size (--rollouts); not a key of its own.")
    pass_at_k: float = Field(description="Mean sampled pass@k over the round's groups with at least k graded "
                                         "rollouts (unbiased estimator), rounded to 4 places; its key is named after "
                                         "k = --rollouts (pass_at_8), one key pass_at_1 when k = 1.")

    def pass_rates(self) -> dict[str, float]:
        """``{"pass_at_1": …, "pass_at_{k}": …}`` in that order (one key when k = 1), as ``--json`` names them."""
        return {"pass_at_1": self.pass_at_1, f"pass_at_{self.k}": self.pass_at_k}

    # The pass@k key is named after k (``pass_at_8`` with --rollouts 8), as it always was in --json: a name no
    # fixed field can carry, so the serialiser writes it (k = 1: the one key pass_at_1) and _read_k reads it back.
    # No return annotation: the JSON schema stays the fields' (the hook below renames the key there).
    @model_serializer(mode="wrap")
    def _name_pass_at_k(self, handler: SerializerFunctionWrapHandler):
        out: dict[str, Any] = {}
        for key, value in handler(self).items():
            out[f"pass_at_{self.k}" if key == "pass_at_k" else key] = value
        return out

    @model_validator(mode="before")
    @classmethod
    def _read_k(cls, data: Any) -> Any:
        """Read the JSON layout too: the one ``pass_at_{k}`` key other than pass_at_1 gives k and pass@k."""
        if not isinstance(data, dict) or "k" in data:
            return data
        named = [key for key in data if key.startswith("pass_at_") and key[8:].isdigit() and key != "pass_at_1"]
        if len(named) > 1:
            raise ValueError(f"a round has one pass@k figure, got {', '.join(named)}")
        out = dict(data)
        key = named[0] if named else "pass_at_1"  # k = 1: pass@k is pass@1, one key
        out.update(k=int(key.removeprefix("pass_at_")), pass_at_k=out.pop(key) if named else out.get(key))
        return out

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        """The schema of the JSON: no ``k``, and ``pass_at_k`` as the pattern ``pass_at_<k>`` (title ``pass_at_{k}``)."""
        schema = handler(core_schema)
        s = handler.resolve_ref_schema(schema)
        s["properties"].pop("k", None)
        pass_at_k = {**s["properties"].pop("pass_at_k"), "title": "pass_at_{k}"}
        s["patternProperties"] = {r"^pass_at_[0-9]+$": pass_at_k}  # named after k = --rollouts
        s["required"] = [r for r in s.get("required", []) if r not in ("k", "pass_at_k")]
        return schema


class CycleSummary(BaseModel):
    """One finished wake–sleep cycle: its adapter, held-out pass@1 with and without lessons, train pass rates."""

    model_config = _STRICT

    cycle: int = Field(description="The cycle, from 1.")
    adapter_id: str | None = Field(description="The adapter its sleep registered (adapter-0001); null for a cycle "
                                               "without a sleep, or whose sleep was refused.")
    examples: int | None = Field(description="Training examples of the sleep (0 without a sleep; null when its "
                                              "record does not say).")
    # the sleep's data report (arena.distill.pipeline.screen_data): its keys depend on the objective
    data: dict[str, Any] = Field(description="The sleep's data report (examples by kind, screened rollouts, task "
                                             "coverage …; keys depend on the objective); {} without a sleep.")
    heldout: EvalFigure | None = Field(description="Held-out pass@1 after the cycle, with active lessons; null when "
                                                   "not measured.")
    heldout_no_lessons: EvalFigure | None = Field(description="Held-out pass@1 after the cycle, no lessons in the "
                                                              "prompt; null when not measured.")
    train_pass_at_1: float = Field(description="Sampled pass@1 over the cycle's unguided train groups, rounded to 4 "
                                               "places.")
    train_pass_at_k: float = Field(description="Sampled pass@k (k = --rollouts) over the same groups, rounded to 4 "
                                               "places.")
    vs_before: PairedComparison | None = Field(description="heldout vs heldout_before, paired; null when either is "
                                                           "missing or they name different tasks.")
    lessons_vs_no_lessons: PairedComparison | None = Field(description="heldout vs heldout_no_lessons, paired; null "
                                                                       "when either is missing.")
    sleep_refused: str | None = Field(default=None, description="Why the cycle's sleep was refused (too few "
                                                                "examples), one line; null when it ran or none was "
                                                                "due.")


class HintSummary(BaseModel):
    """How often guidance rescues a task (Guide / Agent-RLVR measures), and why hints were refused."""

    model_config = _STRICT

    all_fail_groups: int = Field(description="Groups whose best unguided reward is below --success-threshold.")
    guided_groups: int = Field(description="Groups re-attempted with a hint.")
    guided_success_rate: float = Field(description="Share of guided groups with at least one guided success, "
                                                   "rounded to 4 places; 0.0 when there are none.")
    all_fail_rescued: float | None = Field(description="Share of all-fail groups with a guided success (Guide's "
                                                       "rescue rate; a hint that could not be written counts as a "
                                                       "failure), rounded to 4 places; null when no group failed.")
    hints_refused: int = Field(description="All-fail groups left unguided because every hint part was refused "
                                           "(it leaked: agents.roles.hints.HintRefused).")
    plan_rejections: dict[str, int] = Field(description="Refused plan attempts by reason "
                                                        "(agents.roles.hints.plan_rejection_reasons), most first.")
    pass_at_k_unguided: float = Field(description="Share of groups with an unguided success (pass@k at n = k), "
                                                  "rounded to 4 places; 0.0 with no group.")
    pass_at_k_with_hints: float = Field(description="Share of groups solved unguided or, after all failed, guided, "
                                                    "rounded to 4 places; 0.0 with no group.")


class CalibrationFigures(BaseModel):
    """Judge vs verifier on the rubric rollouts of one family (:func:`arena.episode.calibration.calibration_report`)."""

    model_config = _STRICT

    n: int = Field(description="Graded rubric rollouts whose task has a verifier.")
    accuracy: float = Field(description="Share where the judge's pass (reward ≥ 0.5) agrees with the verifier's, "
                                        "rounded to 4 places.")
    ece: float = Field(description="Expected calibration error of the judge's reward against the verifier, 10 bins, "
                                   "rounded to 4 places.")
    judge_pass_rate: float = Field(description="Share the judge passes, rounded to 4 places.")
    verifier_pass_rate: float = Field(description="Share the verifier passes, rounded to 4 places.")


class RubricSummary(BaseModel):
    """Rubric-reward figures of a session: grading counts, hack flags, critic calibration, held-out mean rewards."""

    model_config = _STRICT

    graded_rollouts: int = Field(description="Rollouts the judge graded.")
    ungraded_rollouts: int = Field(description="Rollouts left without a reward (the judge's reply could not be "
                                               "read, or an endpoint fault).")
    flagged_rollouts: int = Field(description="Rollouts with at least one reward-hack flag.")
    hack_flags: dict[str, int] = Field(description="Reward-hack flag → rollouts flagged with it, flags sorted.")
    rubric_versions_added: int = Field(description="Rubric versions written online (OnlineRubrics) in this session.")
    critic_calibration: dict[str, CalibrationFigures] = Field(
        description="Family → judge-vs-verifier figures on tasks with a verifier, families sorted, then all "
                    "(pooled); {} when no task has one.")
    heldout_mean_reward: dict[str, float | None] = Field(
        description="Evaluation name (heldout_before, heldout_cycle1 …) → mean judged reward of its graded tasks, "
                    "rounded to 4 places; null when none was graded.")


class OnlineRubricUpdates(BaseModel):
    """What the OnlineRubrics updates of the run did (``--online-rubrics N``)."""

    model_config = _STRICT

    tasks: int = Field(description="Task updates attempted (one per task per update).")
    versions_added: int = Field(description="New rubric versions written.")
    criteria_rejected: int = Field(description="Proposed criteria rejected (duplicates, malformed, over the limit).")
    criteria_over_limit: int = Field(description="Of the rejected: dropped because the rubric had its maximum "
                                                 "number of criteria.")
    failed: list[str] = Field(description="The first 10 failed updates, as 'task_key: error'.")


class RoleSpeed(BaseModel):
    """One role's model over this process's run: calls, tokens, busy seconds, tokens/s, share of the wall time."""

    model_config = _STRICT

    model: str = Field(description="The model's name (local:…, openai:…, the embedded teacher's name).")
    calls: int = Field(description="Generation calls.")
    prompt_tokens: int = Field(description="Prompt tokens of those calls.")
    completion_tokens: int = Field(description="Tokens generated.")
    seconds: float = Field(description="Seconds during which at least one call was running, rounded to 2 places.")
    tokens_per_s: float | None = Field(description="completion_tokens / seconds, rounded to 2 places; null before "
                                                   "the first timed call.")
    share_of_wall: float | None = Field(description="seconds / wall_time_s, rounded to 3 places; null when the "
                                                    "wall time is 0.")


class SessionSummary(BaseModel):
    """A session's figures from its stored rows (:func:`build_summary`); :class:`RunSummary` adds the run's own.

    ``hints``, ``rubric`` and ``curriculum`` are parts whose keys stand at the top level of the JSON
    (as they always did in ``arena run --json``): :attr:`FLATTENED` names them. The serialiser
    writes their keys in their place (a part that is None writes none: the rubric figures of a
    verifier session are absent, not null), :meth:`model_validate` reads the flat JSON back into
    the parts, and the JSON schema lists their keys at the top level.
    """

    model_config = _STRICT

    FLATTENED: ClassVar[dict[str, type[BaseModel]]] = {
        "hints": HintSummary, "rubric": RubricSummary, "curriculum": CurriculumSummary}
    OMITTED_WHEN_NULL: ClassVar[tuple[str, ...]] = ()  # fields whose key is absent from the JSON when None

    session: str = Field(description="The session's name.")
    episodes: int = Field(description="Episodes stored (one per task per round).")
    rollouts: int = Field(description="Rollouts stored, guided re-attempts included.")
    mean_reward: float = Field(description="Mean reward over the graded unguided rollouts, in [0, 1], rounded to 4 "
                                           "places; 0.0 when none.")
    lessons_added: int = Field(description="Lessons this session's teacher added (ADD events).")
    lessons_active: int = Field(description="Active lessons in the whole library (all sessions).")
    lessons_candidate: int = Field(description="Candidate lessons in the whole library.")
    lessons_retired: int = Field(description="Retired lessons in the whole library.")
    library_tokens_used: int = Field(description="Tokens of all live lessons (solver tokenizer).")
    library_tokens: int = Field(description="Token budget of all live lessons (--library-tokens).")
    utility_checks: int = Field(description="Utility A/B checks of lessons run (with vs without, --utility-every).")
    utility_skipped: str | None = Field(description="Why the utility A/B leaves some families' lessons unmeasured "
                                                    "(rubric-only families), one line; null when none is.")
    reflections_failed: int = Field(description="Episodes stored with a reflection error (the teacher's reply "
                                                "could not be used).")
    curation_rejected: int = Field(description="Teacher ops the curator refused.")
    faults: dict[str, int] = Field(description="Endpoint faults by kind (agents.policy.FAULT_KINDS), kinds sorted: "
                                               "rollouts that failed or were cut, held-out tasks that failed; {} if "
                                               "none.")
    heldout_before: EvalFigure | None = Field(description="Held-out pass@1 before the first round, with the "
                                                          "lessons the library had.")
    heldout_after: EvalFigure | None = Field(description="Held-out pass@1 after the session, with active lessons.")
    heldout_after_no_lessons: EvalFigure | None = Field(description="Held-out pass@1 after the session, no lessons "
                                                                    "in the prompt.")
    rounds: list[RoundFigures] = Field(description="Per-round sampled train figures, rounds in order.")
    heldout_after_vs_before: PairedComparison | None = Field(description="heldout_after vs heldout_before, "
                                                                         "paired; null when either is missing.")
    lessons_vs_no_lessons: PairedComparison | None = Field(description="heldout_after vs heldout_after_no_lessons, "
                                                                       "paired; null when either is missing.")
    cycles: list[CycleSummary] = Field(description="One record per finished wake–sleep cycle (one cycle without "
                                                   "--cycles).")
    hints: HintSummary = Field(description="Hint rescue rates (flat keys in the JSON).")
    rubric: RubricSummary | None = Field(description="Rubric-reward figures (flat keys in the JSON); None with the "
                                                     "verifier reward, and then its keys are absent.",
                                         json_schema_extra={"absent": "with --reward verifier"})
    curriculum: CurriculumSummary = Field(description="The curriculum's part (flat keys in the JSON).")
    heldout_final_difficulty: EvalFigure | None = Field(
        description="Held-out pass@1 at each family's final rung, with active lessons; heldout_after when no family "
                    "moved.")
    heldout_final_difficulty_no_lessons: EvalFigure | None = Field(
        description="The same without lessons; heldout_after_no_lessons when no family moved.")

    def to_json(self) -> str:
        """The summary as ``arena run --json`` prints it: ``json.dumps`` of :meth:`model_dump`.

        ``", "`` / ``": "`` separators and ASCII escapes (``\\u00d7``), as the CLI has always printed;
        :meth:`model_dump_json` gives the same keys and values in compact UTF-8.
        """
        return json.dumps(self.model_dump())

    # No return annotation: the JSON schema stays the fields' (the hook below flattens it there too).
    @model_serializer(mode="wrap")
    def _flatten_parts(self, handler: SerializerFunctionWrapHandler):
        out: dict[str, Any] = {}
        for key, value in handler(self).items():
            if key in self.FLATTENED:
                out.update(value or {})  # None: the part is absent (its keys are not written)
            elif not (value is None and key in self.OMITTED_WHEN_NULL):
                out[key] = value
        return out

    @model_validator(mode="before")
    @classmethod
    def _nest_parts(cls, data: Any) -> Any:
        """Read the flat JSON layout too: each part's keys are gathered into it (none of them: the part is None)."""
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for name, part in cls.FLATTENED.items():
            if name not in out:
                keys = [k for k in part.model_fields if k in out]
                out[name] = {k: out.pop(k) for k in keys} if keys else None
        return out

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> dict[str, Any]:
        """The schema of the JSON: each part's properties in its place; a key that may be absent is not required and
        its description says when (the field's ``absent`` note; in the serialisation schema it is never null)."""
        schema = handler(core_schema)
        s = handler.resolve_ref_schema(schema)
        props: dict[str, Any] = {}
        required: list[str] = []
        for key, prop in s["properties"].items():
            options = prop.get("anyOf", [prop])
            absent = f" Absent {prop['absent']}." if "absent" in prop else ""
            if key in cls.FLATTENED:
                part = handler.resolve_ref_schema(next(o for o in options if "$ref" in o))
                for name, sub in part["properties"].items():
                    props[name] = {**sub, "description": sub["description"] + absent}
                required += [] if absent else part.get("required", [])
            elif key in cls.OMITTED_WHEN_NULL:
                kept = next(o for o in options if o.get("type") != "null") if handler.mode == "serialization" else {
                    k: v for k, v in prop.items() if k not in ("absent", "description")}
                props[key] = {**kept, "description": prop["description"] + absent}
            else:
                props[key] = prop
                required += [key] if key in s.get("required", []) else []
        s["properties"], s["required"] = props, required
        return schema


class RunSummary(SessionSummary):
    """The ``arena run --json`` object: the stored figures (:class:`SessionSummary`) plus this process's run."""

    OMITTED_WHEN_NULL: ClassVar[tuple[str, ...]] = ("online_rubric_updates",)

    online_rubric_updates: OnlineRubricUpdates | None = Field(
        default=None, description="The OnlineRubrics updates of this run.",
        json_schema_extra={"absent": "without --online-rubrics"})
    wall_time_s: float = Field(description="Wall time of this process's run, seconds, rounded to 1 place (a resumed "
                                           "session: since the resume).")
    role_speed: dict[str, RoleSpeed] = Field(
        # keyed by role: solver, teacher, critic, proposer in that order, each only when its model counts its calls
        description="Role → its model's speed over this run; a role whose model keeps no counters (an endpoint, a "
                    "fake) is absent; roles sharing one model report the same figures.")


def stored_eval_summary(e: EvaluationInfo | None) -> EvalFigure | None:
    """A recorded evaluation as an :class:`EvalFigure` (its stored interval, rounded to 4 places), or None.

    pass@1 is None when no task was graded (n = 0): the row stores 0.0 there, which is not a score.

    The interval is the one recorded with the row (not recomputed), so a summary of an old
    session reads what was measured then.

    Args:
        e: the stored evaluation (:meth:`lessons.library.store.LessonStore.evaluations`), or None.
    """
    if e is None:
        return None
    return EvalFigure(pass_at_1=round(e.pass_at_1, 4) if e.n else None, n=e.n,
                      ci95=(round(e.ci_lo, 4), round(e.ci_hi, 4)))


def _paired(a: Any, b: Any) -> PairedComparison | None:
    """:func:`arena.evaluation.paired` of two evaluation results as a :class:`PairedComparison` (None: no pairing)."""
    p = paired(a, b)
    return None if p is None else PairedComparison.model_validate(p)


def _eval_figure(result: Any) -> EvalFigure | None:
    """An :class:`arena.evaluation.EvalResult`'s pass@1 over every task as an :class:`EvalFigure` (None for None)."""
    return None if result is None else EvalFigure.model_validate(result.summary(with_passes=False))


def rounds_summary(store: LessonStore, session_id: int, rollouts: int, threshold: float = 1.0) -> list[RoundFigures]:
    """Per-round figures, rounds in order: episodes, mean reward, pass@1 and pass@k (sampled).

    Args:
        store: the library.
        session_id: the session.
        rollouts: k of the pass@k figure (``--rollouts``): its key in the JSON is ``pass_at_{k}``.
        threshold: the success threshold of a pass (``--success-threshold``: 0.8 for rubric rewards by default).

    Returns:
        One :class:`RoundFigures` per round with stored rewards.
    """
    rounds = []
    for rnd, groups in sorted(store.round_rewards(session_id).items()):
        flat = [r for g in groups for r in g]
        rounds.append(RoundFigures(
            round=rnd, episodes=len(groups), mean_reward=round(sum(flat) / len(flat), 4) if flat else 0.0,
            pass_at_1=round(mean_pass_at_k(groups, 1, threshold), 4), k=rollouts,
            pass_at_k=round(mean_pass_at_k(groups, rollouts, threshold), 4),
        ))
    return rounds


def build_summary(store: LessonStore, session_id: int, session_name: str, cfg: SessionConfig,
                  sleep_refused: Mapping[int, str] | None = None) -> SessionSummary:
    """The session summary from stored rows (so a resumed session reports every episode).

    Args:
        store: the library.
        session_id: the session's id.
        session_name: its name.
        cfg: its settings.
        sleep_refused: cycle → why its sleep was refused (the runner's record; stored nowhere else).

    Returns:
        The :class:`SessionSummary`; :class:`RunSummary` adds the runner's parts
        (``online_rubric_updates``, ``wall_time_s``, ``role_speed``).
    """
    stats = store.session_stats(session_id)
    evals = store.evaluations(session_id)
    stored = HeldoutEvals(store, session_id, [], cfg.lesson_tokens, cfg.max_tokens).stored
    after = stored(HELDOUT_AFTER)
    figures = {name: stored_eval_summary(evals.get(name)) for name in EVAL_NAMES}
    for name, same in ((HELDOUT_FINAL_DIFFICULTY, HELDOUT_AFTER),
                       (HELDOUT_FINAL_DIFFICULTY_NO_LESSONS, HELDOUT_AFTER_NO_LESSONS)):
        e = evals.get(name)  # absent when no family moved: the final difficulty is the starting one
        figures[name] = stored_eval_summary(e) if e is not None else figures[same]
    return SessionSummary(
        session=session_name,
        episodes=stats["episodes"],
        rollouts=stats["rollouts"],
        mean_reward=round(stats["mean_reward"], 4),
        lessons_added=stats["lessons_added"],
        lessons_active=stats["lessons_active"],
        lessons_candidate=stats["lessons_candidate"],
        lessons_retired=stats["lessons_retired"],
        library_tokens_used=store.library_tokens_used(),
        library_tokens=cfg.library_tokens,
        utility_checks=len(store.utility_checks(session_id)),
        utility_skipped=utility_skip_reason(store.stored_tasks(session_name, "train"), cfg.utility_every),
        reflections_failed=stats.get("reflections_failed", 0),
        curation_rejected=stats.get("curation_rejected", 0),
        faults=store.fault_counts(session_id),  # endpoint faults by kind (rollouts and held-out tasks)
        heldout_before=figures[HELDOUT_BEFORE],
        heldout_after=figures[HELDOUT_AFTER],
        heldout_after_no_lessons=figures[HELDOUT_AFTER_NO_LESSONS],
        rounds=rounds_summary(store, session_id, cfg.rollouts, cfg.success_threshold),
        heldout_after_vs_before=_paired(after, stored(HELDOUT_BEFORE)),
        lessons_vs_no_lessons=_paired(after, stored(HELDOUT_AFTER_NO_LESSONS)),
        cycles=cycles_summary(store, session_name, session_id, cfg, sleep_refused),
        hints=hint_summary(store.group_outcomes(session_id), cfg.success_threshold),
        rubric=rubric_summary(RubricStore(store), session_id, evals) if cfg.reward != "verifier" else None,
        curriculum=curriculum_summary(store, session_id),
        heldout_final_difficulty=figures[HELDOUT_FINAL_DIFFICULTY],
        heldout_final_difficulty_no_lessons=figures[HELDOUT_FINAL_DIFFICULTY_NO_LESSONS],
    )


def rubric_summary(rubric_store: RubricStore, session_id: int, evals: dict[str, Any]) -> RubricSummary:
    """Rubric-reward figures of a session: grading counts, hack flags, critic calibration, held-out mean rewards.

    Args:
        rubric_store: the library's rubric repository.
        session_id: the session.
        evals: its stored evaluations by name (:meth:`lessons.library.store.LessonStore.evaluations`).

    Returns:
        :class:`RubricSummary`: :meth:`lessons.library.rubrics.RubricStore.grading_stats`, the critic's
        calibration (:func:`arena.episode.calibration.calibration_report` on tasks with a verifier; ``{}``
        if none) and each evaluation's mean judged reward.
    """
    from arena.episode.calibration import calibration_report

    return RubricSummary(
        **rubric_store.grading_stats(session_id),
        critic_calibration=calibration_report(rubric_store.calibration_pairs(session_id)),
        heldout_mean_reward={
            name: (round(e.details["mean_reward"], 4) if e.details.get("mean_reward") is not None else None)
            for name, e in evals.items()
        },
    )


def hint_summary(groups: Sequence[Any], threshold: float) -> HintSummary:
    """How often guidance rescues a task (Guide / Agent-RLVR measures), and why hints were refused.

    Args:
        groups: the session's group outcomes (``unguided`` and ``guided`` rewards per group, and
            each episode's refused hint parts, ``hint_rejected``).
        threshold: the success threshold (:func:`lessons.outcomes.passes`).

    Returns:
        :class:`HintSummary` (its fields say what each figure counts).
    """

    def ok(rewards: Sequence[float]) -> bool:
        return any(passes(r, threshold) for r in rewards)

    n = len(groups)
    guided = [g for g in groups if g.guided]
    rescued = sum(ok(g.guided) for g in guided)
    all_fail = sum(not ok(g.unguided) for g in groups)
    reasons = Counter(r for g in groups for line in g.hint_rejected for r in plan_rejection_reasons(line))
    return HintSummary(
        all_fail_groups=all_fail,
        guided_groups=len(guided),
        guided_success_rate=round(rescued / len(guided), 4) if guided else 0.0,
        all_fail_rescued=round(rescued / all_fail, 4) if all_fail else None,
        hints_refused=sum(bool(g.hint_rejected) and not g.guided and not ok(g.unguided) for g in groups),
        plan_rejections=dict(reasons.most_common()),
        pass_at_k_unguided=round(sum(ok(g.unguided) for g in groups) / n, 4) if n else 0.0,
        pass_at_k_with_hints=round(sum(ok(g.unguided) or ok(g.guided) for g in groups) / n, 4) if n else 0.0,
    )


def cycles_summary(store: LessonStore, session: str, session_id: int, cfg: SessionConfig,
                   sleep_refused: Mapping[int, str] | None = None) -> list[CycleSummary]:
    """One :class:`CycleSummary` per finished cycle: adapter, examples, held-out pass@1 and the train pass rates.

    Args:
        store: the library.
        session: the session's name (its sleeps' adapters are registered under it).
        session_id: its id.
        cfg: its settings (cycles, rounds, rollouts, success threshold).
        sleep_refused: cycle → why its sleep was refused; a cycle not in it has ``sleep_refused`` None.
    """
    adapters = cycle_adapters(store, session)
    by_round = store.round_rewards(session_id)
    evals = HeldoutEvals(store, session_id, [], cfg.lesson_tokens, cfg.max_tokens)
    before = evals.stored(HELDOUT_BEFORE)
    refused = sleep_refused or {}
    out = []
    for c in range(1, cfg.cycles + 1):
        groups = [g for r in cycle_rounds(cfg, c) for g in by_round.get(r, [])]
        if not groups:
            break
        info = adapters.get(c)
        last = c == cfg.cycles
        with_l = evals.stored(eval_name(c, True)) or (evals.stored(HELDOUT_AFTER) if last else None)
        plain = evals.stored(eval_name(c, False)) or (evals.stored(HELDOUT_AFTER_NO_LESSONS) if last else None)
        report = (info.data.get("report") or {}) if info else {}
        out.append(CycleSummary(
            cycle=c,
            adapter_id=info.adapter_id if info else None,
            examples=report.get("examples", info.data.get("examples") if info else 0),
            data=report,
            heldout=_eval_figure(with_l),
            heldout_no_lessons=_eval_figure(plain),
            train_pass_at_1=round(mean_pass_at_k(groups, 1, cfg.success_threshold), 4),
            train_pass_at_k=round(mean_pass_at_k(groups, cfg.rollouts, cfg.success_threshold), 4),
            vs_before=_paired(with_l, before),
            lessons_vs_no_lessons=_paired(with_l, plain),
            sleep_refused=refused.get(c),
        ))
    return out


def online_rubrics_summary(updates: Sequence[Any]) -> OnlineRubricUpdates:
    """The ``online_rubric_updates`` part: tasks updated, rubric versions added, criteria rejected (of them: over the
    rubric's criterion limit), first 10 failures.

    Args:
        updates: one :class:`arena.session.online_rubrics.OnlineUpdate` per task per update.
    """
    return OnlineRubricUpdates(
        tasks=len(updates),
        versions_added=sum(u.version is not None for u in updates),
        criteria_rejected=sum(len(u.rejected) for u in updates),
        criteria_over_limit=sum(getattr(u, "over_limit", 0) for u in updates),  # dropped: MAX_CRITERIA reached
        failed=[f"{u.task_key}: {u.error}" for u in updates if u.error][:10],
    )


# --------------------------------------------------------------------------- the docs' table


def _schema_type(prop: Mapping[str, Any]) -> str:
    """A JSON-schema property's type in words: ``integer``, ``number or null``, ``array of RoundFigures`` …"""
    if "$ref" in prop:
        return prop["$ref"].rsplit("/", 1)[-1]
    if "anyOf" in prop:
        return " or ".join(_schema_type(o) for o in prop["anyOf"])
    kind = prop.get("type", "any")
    if kind == "array" and "prefixItems" in prop:
        return f"[{', '.join(_schema_type(o) for o in prop['prefixItems'])}]"
    if kind == "array":
        return f"array of {_schema_type(prop.get('items', {}))}"
    if kind == "object" and isinstance(prop.get("additionalProperties"), dict):
        return f"object of string → {_schema_type(prop['additionalProperties'])}"
    return kind


def _markdown_text(text: str | None) -> str:
    """A docstring or description as one Markdown line: reST roles and double backquotes become code spans."""
    for role in (":func:", ":class:", ":meth:", ":mod:", ":data:"):
        text = (text or "").replace(role, "")
    return " ".join(text.replace("``", "`").split()).replace("|", "\\|")


def _markdown_rows(schema: Mapping[str, Any]) -> list[str]:
    """``| name | type | description |`` rows of an object schema's properties (pattern-named ones by their title)."""
    props = {**schema.get("properties", {}),
             **{p.get("title", pattern): p for pattern, p in schema.get("patternProperties", {}).items()}}
    return [f"| `{name}` | {_schema_type(prop)} | {_markdown_text(prop.get('description'))} |"
            for name, prop in props.items()]


def summary_fields_markdown(model: type[BaseModel] = RunSummary) -> str:
    """The fields of the ``--json`` summary as Markdown, from :meth:`RunSummary.model_json_schema`, for the docs.

    Args:
        model: the model to describe (default the whole ``arena run --json`` object).

    Returns:
        A ``| name | type | description |`` table of the top-level keys in JSON order (the
        serialisation schema: what ``--json`` holds; a key that may be absent says when), then one
        ``### Model`` section with a table per nested model (:class:`EvalFigure`, :class:`RoundFigures` …).
    """
    schema = model.model_json_schema(mode="serialization")
    header = ["| name | type | description |", "| --- | --- | --- |"]
    out = [*header, *_markdown_rows(schema)]
    for name, sub in schema.get("$defs", {}).items():
        out += ["", f"### {name}", "", _markdown_text(sub.get("description")), "", *header, *_markdown_rows(sub)]
    return "\n".join(out) + "\n"
