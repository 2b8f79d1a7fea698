"""The success rule: when a reward counts as a pass.

Every pass@1 / pass@k, every all-fail group (the ones that get hints), every "success" that
becomes training data and every green row in the TUI is decided here, so the counts agree.
"""

from __future__ import annotations

from collections.abc import Iterable

PASS_EPS = 1e-9  # float slack: a reward within this of the threshold passes (0.1 + 0.2 + 0.7 == 1.0)


def passes(reward: float | None, threshold: float = 1.0) -> bool:
    """Whether a reward is a pass.

    Args:
        reward: a reward in [0, 1]; None (ungraded) never passes.
        threshold: the success threshold (``--success-threshold``; 1.0 for verifiers, 0.8 for
            rubrics by default), compared with a slack of :data:`PASS_EPS`.

    Returns:
        ``reward >= threshold - 1e-9``.
    """
    return reward is not None and reward >= threshold - PASS_EPS


def count_passes(rewards: Iterable[float | None], threshold: float = 1.0) -> int:
    """The number of rewards in ``rewards`` that :func:`passes` at ``threshold``."""
    return sum(passes(r, threshold) for r in rewards)


# Held-out evaluation names (``evaluations.name``): written by the session runner, read by the
# summary, the TUI and ``arena bench learning``.
HELDOUT_BEFORE = "heldout_before"  # greedy pass@1 before the first round, with the lessons the library had
HELDOUT_AFTER = "heldout_after"  # after the session, with active lessons
HELDOUT_AFTER_NO_LESSONS = "heldout_after_no_lessons"  # after the session, no lessons in the prompt
HELDOUT_FINAL_DIFFICULTY = "heldout_final_difficulty"  # curriculum: the final rung's held-out set
HELDOUT_FINAL_DIFFICULTY_NO_LESSONS = "heldout_final_difficulty_no_lessons"
EVAL_NAMES = (HELDOUT_BEFORE, HELDOUT_AFTER, HELDOUT_AFTER_NO_LESSONS)


def eval_name(cycle: int, lessons: bool, wake: bool = False) -> str:
    """The evaluation name of one wake–sleep cycle: ``heldout_cycle{c}[_wake][_no_lessons]``.

    Args:
        cycle: the cycle, from 1.
        lessons: whether active lessons were in the prompt.
        wake: the pre-sleep measurement (the wake's solver) instead of the post-sleep one.
    """
    return f"heldout_cycle{cycle}{'_wake' if wake else ''}{'' if lessons else '_no_lessons'}"
