"""The session summary (``arena run --json``), built from stored rows so a resumed session reports every episode.

:func:`build_summary` assembles it from the parts below: held-out evaluations as recorded
(:func:`stored_eval_summary`), per-round statistics, paired comparisons, the wake–sleep cycles
(:func:`cycles_summary`), hint rescue rates (:func:`hint_summary`), rubric-reward figures
(:func:`rubric_summary`), the curriculum's part and the OnlineRubrics updates
(:func:`online_rubrics_summary`). Keys and rounding are part of the CLI's output: keep them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from agents.roles.hints import plan_rejection_reasons
from arena.config import SessionConfig
from arena.evaluation import paired
from arena.session.curriculum import curriculum_summary
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


def stored_eval_summary(e: EvaluationInfo | None) -> dict[str, Any] | None:
    """A recorded evaluation as ``{"pass_at_1", "n", "ci95"}`` (its stored interval, rounded to 4 places), or None.

    pass@1 is None when no task was graded (n = 0): the row stores 0.0 there, which is not a score.

    The interval is the one recorded with the row (not recomputed), so a summary of an old
    session reads what was measured then.
    """
    if e is None:
        return None
    return {"pass_at_1": round(e.pass_at_1, 4) if e.n else None, "n": e.n, "ci95": [round(e.ci_lo, 4), round(e.ci_hi, 4)]}


def rounds_summary(store: LessonStore, session_id: int, rollouts: int, threshold: float = 1.0) -> list[dict[str, Any]]:
    """Per-round figures: ``round``, ``episodes``, ``mean_reward``, ``pass_at_1`` and ``pass_at_{rollouts}`` (sampled).

    Args:
        store: the library.
        session_id: the session.
        rollouts: k of the pass@k column (``--rollouts``).
        threshold: the success threshold of a pass (``--success-threshold``: 0.8 for rubric rewards by default).
    """
    rounds = []
    for rnd, groups in sorted(store.round_rewards(session_id).items()):
        flat = [r for g in groups for r in g]
        rounds.append(
            {
                "round": rnd,
                "episodes": len(groups),
                "mean_reward": round(sum(flat) / len(flat), 4) if flat else 0.0,
                "pass_at_1": round(mean_pass_at_k(groups, 1, threshold), 4),
                f"pass_at_{rollouts}": round(mean_pass_at_k(groups, rollouts, threshold), 4),
            }
        )
    return rounds


def build_summary(store: LessonStore, session_id: int, session_name: str, cfg: SessionConfig) -> dict[str, Any]:
    """The session summary from stored rows (so a resumed session reports every episode).

    Args:
        store: the library.
        session_id: the session's id.
        session_name: its name.
        cfg: its settings.

    Returns:
        The ``--json`` object without the runner's additions (``sleep_refused`` per cycle,
        ``online_rubric_updates``, ``wall_time_s``).
    """
    stats = store.session_stats(session_id)
    evals = store.evaluations(session_id)
    summary: dict[str, Any] = {
        "session": session_name,
        "episodes": stats["episodes"],
        "rollouts": stats["rollouts"],
        "mean_reward": round(stats["mean_reward"], 4),
        "lessons_added": stats["lessons_added"],
        "lessons_active": stats["lessons_active"],
        "lessons_candidate": stats["lessons_candidate"],
        "lessons_retired": stats["lessons_retired"],
        "library_tokens_used": store.library_tokens_used(),
        "library_tokens": cfg.library_tokens,
        "utility_checks": len(store.utility_checks(session_id)),
        "utility_skipped": utility_skip_reason(store.stored_tasks(session_name, "train"), cfg.utility_every),
        "reflections_failed": stats.get("reflections_failed", 0),
        "curation_rejected": stats.get("curation_rejected", 0),
        "faults": store.fault_counts(session_id),  # endpoint faults by kind (rollouts and held-out tasks)
    }
    for name in EVAL_NAMES:
        summary[name] = stored_eval_summary(evals.get(name))
    summary["rounds"] = rounds_summary(store, session_id, cfg.rollouts, cfg.success_threshold)
    stored = HeldoutEvals(store, session_id, [], cfg.lesson_tokens, cfg.max_tokens).stored
    after = stored(HELDOUT_AFTER)
    summary["heldout_after_vs_before"] = paired(after, stored(HELDOUT_BEFORE))
    summary["lessons_vs_no_lessons"] = paired(after, stored(HELDOUT_AFTER_NO_LESSONS))
    summary["cycles"] = cycles_summary(store, session_name, session_id, cfg)
    summary.update(hint_summary(store.group_outcomes(session_id), cfg.success_threshold))
    if cfg.reward != "verifier":
        summary.update(rubric_summary(RubricStore(store), session_id, evals))
    summary.update(curriculum_summary(store, session_id))
    for name, same in ((HELDOUT_FINAL_DIFFICULTY, HELDOUT_AFTER),
                       (HELDOUT_FINAL_DIFFICULTY_NO_LESSONS, HELDOUT_AFTER_NO_LESSONS)):
        e = evals.get(name)  # absent when no family moved: the final difficulty is the starting one
        summary[name] = stored_eval_summary(e) if e is not None else summary[same]
    return summary


def rubric_summary(rubric_store: RubricStore, session_id: int, evals: dict[str, Any]) -> dict[str, Any]:
    """Rubric-reward figures of a session: grading counts, hack flags, critic calibration, held-out mean rewards.

    Returns:
        ``reward_kind``-independent keys: ``graded_rollouts``, ``ungraded_rollouts``, ``flagged_rollouts``,
        ``hack_flags`` (flag → count), ``rubric_versions_added``, ``critic_calibration``
        (:func:`arena.episode.calibration.calibration_report` on tasks with a verifier; ``{}`` if none) and
        ``heldout_mean_reward`` (evaluation name → mean judged reward).
    """
    from arena.episode.calibration import calibration_report

    out = rubric_store.grading_stats(session_id)
    out["critic_calibration"] = calibration_report(rubric_store.calibration_pairs(session_id))
    out["heldout_mean_reward"] = {
        name: (round(e.details["mean_reward"], 4) if e.details.get("mean_reward") is not None else None)
        for name, e in evals.items()
    }
    return out


def hint_summary(groups: Sequence[Any], threshold: float) -> dict[str, Any]:
    """How often guidance rescues a task (Guide / Agent-RLVR measures), and why hints were refused.

    Args:
        groups: the session's group outcomes (``unguided`` and ``guided`` rewards per group, and
            each episode's refused hint parts, ``hint_rejected``).
        threshold: the success threshold (:func:`lessons.outcomes.passes`).

    Returns:
        ``all_fail_groups`` (groups whose best unguided reward < ``threshold``),
        ``guided_groups`` (groups re-attempted with a hint), ``guided_success_rate`` (share
        of guided groups with at least one guided success; 0.0 when there are none),
        ``all_fail_rescued`` (share of all-fail groups with a guided success: Guide's rescue
        rate, hints that could not be written counting as failures; None when no group failed),
        ``hints_refused`` (all-fail groups left unguided with refused hint parts: every part
        leaked, :class:`agents.roles.hints.HintRefused`), ``plan_rejections`` (refused plan attempts by
        reason, :func:`agents.roles.hints.plan_rejection_reasons`),
        ``pass_at_k_unguided`` (share of groups with an unguided success: pass@k at n = k)
        and ``pass_at_k_with_hints`` (share solved unguided or, after all failed, guided).
    """

    def ok(rewards: Sequence[float]) -> bool:
        return any(passes(r, threshold) for r in rewards)

    n = len(groups)
    guided = [g for g in groups if g.guided]
    rescued = sum(ok(g.guided) for g in guided)
    all_fail = sum(not ok(g.unguided) for g in groups)
    reasons = Counter(r for g in groups for line in g.hint_rejected for r in plan_rejection_reasons(line))
    return {
        "all_fail_groups": all_fail,
        "guided_groups": len(guided),
        "guided_success_rate": round(rescued / len(guided), 4) if guided else 0.0,
        "all_fail_rescued": round(rescued / all_fail, 4) if all_fail else None,
        "hints_refused": sum(bool(g.hint_rejected) and not g.guided and not ok(g.unguided) for g in groups),
        "plan_rejections": dict(reasons.most_common()),
        "pass_at_k_unguided": round(sum(ok(g.unguided) for g in groups) / n, 4) if n else 0.0,
        "pass_at_k_with_hints": round(sum(ok(g.unguided) or ok(g.guided) for g in groups) / n, 4) if n else 0.0,
    }


def cycles_summary(store: LessonStore, session: str, session_id: int, cfg: SessionConfig) -> list[dict[str, Any]]:
    """One record per finished cycle for ``--json``: adapter, examples, held-out pass@1 and the train pass rates.

    Each record: ``cycle``, ``adapter_id`` (None for a cycle without sleep), ``examples``,
    ``data`` (the sleep's data report), ``heldout`` / ``heldout_no_lessons`` (``{"pass_at_1",
    "n", "ci95"}``), ``train_pass_at_1`` / ``train_pass_at_k`` (sampled, over the cycle's
    unguided groups), and the paired tests ``vs_before`` (heldout vs heldout_before) and
    ``lessons_vs_no_lessons``.
    """
    adapters = cycle_adapters(store, session)
    by_round = store.round_rewards(session_id)
    evals = HeldoutEvals(store, session_id, [], cfg.lesson_tokens, cfg.max_tokens)
    before = evals.stored(HELDOUT_BEFORE)
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
        out.append({
            "cycle": c,
            "adapter_id": info.adapter_id if info else None,
            "examples": report.get("examples", info.data.get("examples") if info else 0),
            "data": report,
            "heldout": with_l.summary(with_passes=False) if with_l else None,
            "heldout_no_lessons": plain.summary(with_passes=False) if plain else None,
            "train_pass_at_1": round(mean_pass_at_k(groups, 1, cfg.success_threshold), 4),
            "train_pass_at_k": round(mean_pass_at_k(groups, cfg.rollouts, cfg.success_threshold), 4),
            "vs_before": paired(with_l, before),
            "lessons_vs_no_lessons": paired(with_l, plain),
            "sleep_refused": None,  # set by the runner when this cycle's sleep had too little data
        })
    return out


def online_rubrics_summary(updates: Sequence[Any]) -> dict[str, Any]:
    """The ``online_rubric_updates`` part: tasks updated, rubric versions added, criteria rejected (of them: over the
    rubric's criterion limit), first 10 failures.

    Args:
        updates: one :class:`arena.session.online_rubrics.OnlineUpdate` per task per update.
    """
    return {
        "tasks": len(updates),
        "versions_added": sum(u.version is not None for u in updates),
        "criteria_rejected": sum(len(u.rejected) for u in updates),
        "criteria_over_limit": sum(getattr(u, "over_limit", 0) for u in updates),  # dropped: MAX_CRITERIA reached
        "failed": [f"{u.task_key}: {u.error}" for u in updates if u.error][:10],
    }
