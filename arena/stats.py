"""Small statistics used in summaries: Wilson intervals for pass@1 and the unbiased pass@k estimator."""

from __future__ import annotations

import math
from collections.abc import Sequence


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
    """Mean pass@k over groups of rewards (a rollout passes when its reward ≥ ``threshold``)."""
    vals = [pass_at_k(len(g), sum(r >= threshold - 1e-9 for r in g), k) for g in groups if len(g) >= k]
    return sum(vals) / len(vals) if vals else 0.0
