"""The success rule: when a reward counts as a pass.

Every pass@1 / pass@k, every all-fail group (the ones that get hints), every "success" that
becomes training data and every green row in the TUI is decided here, so the counts agree.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

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


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimate from n samples with c correct (Chen et al. 2021, "Codex" paper).

    ``1 - C(n-c, k) / C(n, k)``; requires ``1 ≤ k ≤ n``.
    """
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def mean_pass_at_k(groups: Sequence[Sequence[float]], k: int, threshold: float = 1.0) -> float:
    """Mean pass@k over groups of rewards (a rollout passes as :func:`lessons.outcomes.passes` says)."""
    vals = [pass_at_k(len(g), count_passes(g, threshold), k) for g in groups if len(g) >= k]
    return sum(vals) / len(vals) if vals else 0.0


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
