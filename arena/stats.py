"""Small statistics used in summaries: Wilson intervals for pass@1, paired tests, and the unbiased pass@k estimator.

:func:`pass_at_k` and :func:`mean_pass_at_k` live in :mod:`lessons.outcomes` (the read models use them too) and
are re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from lessons.outcomes import mean_pass_at_k, pass_at_k

__all__ = [
    "mcnemar_exact", "mean_pass_at_k", "paired_comparison", "paired_difference_interval", "pass_at_k",
    "replicated_comparison", "sign_flip_test", "wilson_interval",
]


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval for a binomial proportion (Wilson 1927).

    Args:
        successes: number of passes (0 ≤ successes ≤ n).
        n: number of trials; ``n == 0`` gives ``(0.0, 1.0)``.
        z: normal quantile (1.96 for 95%).

    Returns:
        ``(lo, hi)`` in [0, 1]. Preferred over the normal approximation at small n and near 0/1,
        which is where held-out pass@1 of a small model lives.
    """
    if n <= 0:
        return (0.0, 1.0)
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be in [0, {n}], got {successes}")
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def paired_difference_interval(
    with_pass: Sequence[bool], without_pass: Sequence[bool], z: float = 1.959964
) -> tuple[float, float, float]:
    """Difference of two paired proportions with its 95% interval (Newcombe 1998, method 10).

    Args:
        with_pass, without_pass: paired outcomes (same task and seed under arm A and arm B),
            equal lengths n ≥ 1.
        z: normal quantile.

    Returns:
        ``(diff, lo, hi)``: ``p_A − p_B`` and its interval in [−1, 1], built from the two
        Wilson intervals with the pairs' correlation (phi), so it stays honest at small n
        and at 0/1 (all-equal pairs give a non-degenerate interval).

    Raises:
        ValueError: lengths differ or are 0.
    """
    n = len(with_pass)
    if n == 0 or n != len(without_pass):
        raise ValueError(f"need two equal, non-empty sequences of paired outcomes (got {n} and {len(without_pass)})")
    a = sum(1 for x, y in zip(with_pass, without_pass) if x and y)
    b = sum(1 for x, y in zip(with_pass, without_pass) if x and not y)
    c = sum(1 for x, y in zip(with_pass, without_pass) if not x and y)
    d = n - a - b - c
    p1, p2 = (a + b) / n, (a + c) / n
    l1, u1 = wilson_interval(a + b, n, z)
    l2, u2 = wilson_interval(a + c, n, z)
    denom = math.sqrt((a + b) * (c + d) * (a + c) * (b + d))
    phi = (a * d - b * c) / denom if denom > 0 else 0.0
    dl = math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    du = math.sqrt(max(0.0, (u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2))
    diff = p1 - p2
    return diff, max(-1.0, diff - dl), min(1.0, diff + du)


def mcnemar_exact(a_pass: Sequence[bool], b_pass: Sequence[bool]) -> tuple[int, int, float]:
    """Exact McNemar test of two paired pass/fail outcomes on the same tasks (McNemar 1947).

    Only the discordant pairs carry information: ``b`` tasks pass under A and fail under B,
    ``c`` the reverse. Under H0 (equal pass rates) ``b ~ Binomial(b + c, 1/2)``; the p-value is
    scipy's exact two-sided binomial test (``scipy.stats.binomtest``). No discordant pair
    gives p = 1.

    Args:
        a_pass, b_pass: paired outcomes, equal lengths n ≥ 1.

    Returns:
        ``(b, c, p_value)``.

    Raises:
        ValueError: lengths differ or are 0.
    """
    if not a_pass or len(a_pass) != len(b_pass):
        raise ValueError(f"need two equal, non-empty sequences of paired outcomes (got {len(a_pass)} and {len(b_pass)})")
    from scipy.stats import binomtest

    b = sum(1 for x, y in zip(a_pass, b_pass) if x and not y)
    c = sum(1 for x, y in zip(a_pass, b_pass) if y and not x)
    p = 1.0 if b + c == 0 else float(binomtest(b, b + c, 0.5, alternative="two-sided").pvalue)
    return b, c, p


def paired_comparison(a_pass: Sequence[bool], b_pass: Sequence[bool]) -> dict[str, float | int | list[float]]:
    """A vs B on the same tasks: the paired difference of pass@1 with its 95% CI and McNemar's exact p.

    The interval is Newcombe's paired-difference interval (:func:`paired_difference_interval`,
    method 10 of Newcombe 1998); the p-value is :func:`mcnemar_exact`.

    Returns:
        ``{"n", "a_pass_at_1", "b_pass_at_1", "diff", "ci95": [lo, hi], "a_only", "b_only", "p_value"}``
        (``a_only``/``b_only``: the discordant counts), rounded to 4 places.

    Raises:
        ValueError: lengths differ or are 0.
    """
    b, c, p = mcnemar_exact(a_pass, b_pass)
    diff, lo, hi = paired_difference_interval(a_pass, b_pass)
    n = len(a_pass)
    return {
        "n": n,
        "a_pass_at_1": round(sum(map(bool, a_pass)) / n, 4),
        "b_pass_at_1": round(sum(map(bool, b_pass)) / n, 4),
        "diff": round(diff, 4),
        "ci95": [round(lo, 4), round(hi, 4)],
        "a_only": b,
        "b_only": c,
        "p_value": float(f"{p:.6g}"),  # significant digits: p can be far below 1e-6
    }


BOOT_MAX = 1_000_000  # bootstrap replicates at most (computed in blocks, so memory does not grow with them)
_BOOT_BLOCK = 10_000


def sign_flip_test(differences: Sequence[int]) -> float:
    """Exact two-sided sign-flip (permutation) test that integer paired differences are centred on 0.

    Under the null each task's difference is as likely negative as positive, so the sum's null
    distribution is that of ``Σ ε_t d_t`` with independent fair signs ``ε_t``; it is computed exactly
    by convolution (Fisher 1935; Pitman 1937). For differences in {−1, 0, 1} (one training each)
    this is the exact McNemar test.

    Args:
        differences: per task, an integer difference (tasks with 0 do not count).

    Returns:
        ``P(|Σ ε_t d_t| ≥ |Σ d_t|)``, in (0, 1].
    """
    import numpy as np

    d = [abs(int(x)) for x in differences if int(x) != 0]
    total = sum(d)
    dist = np.zeros(2 * total + 1)  # index i is the sum i − total
    dist[total] = 1.0
    for m in d:
        dist = 0.5 * (np.roll(dist, m) + np.roll(dist, -m))  # no wrap: |partial sums| ≤ total
    observed = abs(int(sum(int(x) for x in differences)))
    sums = np.arange(-total, total + 1)
    return float(min(1.0, dist[np.abs(sums) >= observed].sum()))


def replicated_comparison(
    a: Sequence[Sequence[bool]], b: Sequence[Sequence[bool]], boot: int = 10_000, seed: int = 0,
) -> dict[str, Any]:
    """A vs B when each was trained several times (training seeds) and every training was evaluated on the same tasks.

    A single paired test (:func:`paired_comparison`) holds each trained model fixed: it sees the
    held-out tasks' sampling but not the spread between trainings, so between single runs it
    overstates significance. Two tests, one per source of variation, and an interval:

    - ``tasks_test``: the exact sign-flip test (:func:`sign_flip_test`) on each task's difference of
      the trainings' mean pass rate (A's mean − B's mean): the tasks' sampling. Its null is that,
      for the trainings at hand, a task's difference is as likely positive as negative (with one
      training each, McNemar's null: it is then the exact McNemar test). It holds the trainings
      fixed, so it does not see the spread between them;
    - ``welch``: Welch's t-test on the trainings' pass@1 (scipy.stats.ttest_ind, equal_var=False):
      the spread between trainings, exact for small S if per-training pass@1 is normal, blind to
      the task pairing (so conservative); None unless both have at least 2 trainings and the
      trainings of one of them differ;
    - ``bootstrap``: the 95% percentile interval of the difference from a hierarchical bootstrap
      (Davison & Hinkley 1997, §3.8; Saravanan et al. 2020): each replicate redraws the tasks (the
      same draw for A and B, which keeps the pairing) and, per condition, the trainings. With few
      trainings (3) redrawing them understates their spread by about (S − 1)/S, and with few
      discordant tasks the interval is narrow: it is an effect size, not a test.

    A difference is supported when both tests reject; with one training per condition only the
    first exists.

    Args:
        a: per training of A, the pass/fail of each task, shape (S_a, T); tasks in the same order as ``b``.
        b: the same for B, shape (S_b, T).
        boot: bootstrap replicates, 1000 to :data:`BOOT_MAX`.
        seed: the bootstrap's random seed.

    Returns:
        ``{"tasks", "a": {...}, "b": {...}, "diff", "tasks_test": {"p_value", "tasks_differing"},
        "welch": {"t", "df", "p_value", "ci95"} | None, "bootstrap": {"ci95", "replicates"}}``, each
        condition's entry ``{"trainings", "pass_at_1" (per training), "mean", "sd_between_trainings"}``
        (sd: None for one training); rounded to 4 places.

    Raises:
        ValueError: no training, no task, rows of unequal length, or ``boot`` out of range.
    """
    import numpy as np
    from scipy import stats

    xa, xb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if xa.ndim != 2 or xb.ndim != 2 or 0 in xa.shape or 0 in xb.shape or xa.shape[1] != xb.shape[1]:
        raise ValueError(f"need (trainings, tasks) arrays on the same tasks, got shapes {xa.shape} and {xb.shape}")
    if not 1000 <= boot <= BOOT_MAX:
        raise ValueError(f"boot must be from 1000 to {BOOT_MAX}, got {boot}")
    (sa, t), sb = xa.shape, xb.shape[0]
    rng = np.random.default_rng(seed)

    def redraw(x: Any, weights: Any) -> Any:
        per_training = weights @ x.T  # (block, S): each training's pass@1 on the redrawn tasks
        pick = rng.integers(0, x.shape[0], size=per_training.shape)
        return np.take_along_axis(per_training, pick, axis=1).mean(axis=1)

    d = np.empty(boot)
    for lo_i in range(0, boot, _BOOT_BLOCK):
        n = min(_BOOT_BLOCK, boot - lo_i)
        weights = rng.multinomial(t, np.full(t, 1.0 / t), size=n) / t  # (n, T): the shared redraw of the tasks
        d[lo_i:lo_i + n] = redraw(xa, weights) - redraw(xb, weights)
    lo, hi = np.percentile(d, [2.5, 97.5])

    # per task, S_b · (A's passes) − S_a · (B's passes): S_a S_b times the difference of mean pass rates, an integer
    per_task = (sb * xa.sum(axis=0) - sa * xb.sum(axis=0)).round().astype(int)

    pa, pb = xa.mean(axis=1), xb.mean(axis=1)  # each training's pass@1

    def condition(p1: Any) -> dict[str, Any]:
        return {"trainings": len(p1), "pass_at_1": [round(float(v), 4) for v in p1],
                "mean": round(float(p1.mean()), 4),
                "sd_between_trainings": round(float(p1.std(ddof=1)), 4) if len(p1) > 1 else None}

    welch = None
    # Welch needs two trainings a side; trainings that all score alike in both leave t undefined
    if sa > 1 and sb > 1 and (pa.std() > 0 or pb.std() > 0):
        res = stats.ttest_ind(pa, pb, equal_var=False)
        ci = res.confidence_interval(0.95)
        welch = {"t": round(float(res.statistic), 4), "df": round(float(res.df), 4),
                 "p_value": float(f"{float(res.pvalue):.6g}"), "ci95": [round(float(ci.low), 4), round(float(ci.high), 4)]}
    return {
        "tasks": t,
        "a": condition(pa),
        "b": condition(pb),
        "diff": round(float(xa.mean() - xb.mean()), 4),
        "tasks_test": {"p_value": float(f"{sign_flip_test(per_task):.6g}"), "tasks_differing": int(np.count_nonzero(per_task))},
        "welch": welch,
        "bootstrap": {"ci95": [round(float(lo), 4), round(float(hi), 4)], "replicates": boot},
    }
