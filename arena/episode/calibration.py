"""Critic calibration: how far a rubric judge agrees with the verifier, per task family.

On tasks that have both a verifier and a rubric, every rubric-graded rollout also stores the
verifier's reward (``rollouts.verifier_reward``). Treating the judge's reward as its confidence
that the verifier passes the rollout gives two measures (the questions of arXiv 2311.14743 and
arXiv 2506.22777: can the grader be trusted?):

- **accuracy**: share of rollouts where the judge's pass (reward ≥ ``threshold``) equals the
  verifier's pass (verifier reward ≥ 1);
- **expected calibration error** (ECE; Naeini et al. 2015, Guo et al. 2017): rollouts binned by
  judge reward into ``bins`` equal-width bins on [0, 1];
  ECE = Σ_b (n_b / N) · |mean verifier pass in b − mean judge reward in b|.

:func:`calibration_report` computes both for each family and for all together; it is used by the
run summary and ``arena critic calibrate``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from lessons.outcomes import passes

ALL = "all"  # key of the pooled figures


def expected_calibration_error(confidence: Sequence[float], correct: Sequence[bool], bins: int = 10) -> float:
    """ECE of confidences in [0, 1] against binary outcomes (equal-width bins; Guo et al. 2017).

    Args:
        confidence: one value in [0, 1] per item (the judge's reward).
        correct: the outcome per item (the verifier passed it).
        bins: number of equal-width bins on [0, 1]; a confidence of exactly 1 falls in the last bin.

    Returns:
        ECE in [0, 1]; 0.0 for no items.

    Raises:
        ValueError: lengths differ, bins < 1, or a confidence outside [0, 1].
    """
    if len(confidence) != len(correct):
        raise ValueError(f"{len(confidence)} confidences but {len(correct)} outcomes")
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    n = len(confidence)
    if n == 0:
        return 0.0
    sums: list[list[float]] = [[0.0, 0.0, 0.0] for _ in range(bins)]  # count, Σ confidence, Σ correct
    for c, ok in zip(confidence, correct):
        if not 0.0 <= c <= 1.0:
            raise ValueError(f"confidence must be in [0, 1], got {c}")
        b = min(int(c * bins), bins - 1)
        sums[b][0] += 1
        sums[b][1] += c
        sums[b][2] += float(ok)
    return sum(cnt / n * abs(s_ok / cnt - s_c / cnt) for cnt, s_c, s_ok in sums if cnt)


def calibration_report(
    pairs: Iterable[tuple[str, float, float]], threshold: float = 0.5, bins: int = 10
) -> dict[str, dict[str, Any]]:
    """Judge-vs-verifier accuracy and ECE per family and pooled.

    Args:
        pairs: ``(family, judge_reward, verifier_reward)`` per rollout, rewards in [0, 1]
            (:meth:`lessons.library.rubrics.RubricStore.calibration_pairs`).
        threshold: the judge passes a rollout when its reward is at least this.
        bins: ECE bins.

    Returns:
        family → ``{"n", "accuracy", "ece", "judge_pass_rate", "verifier_pass_rate"}``, families
        sorted, plus ``"all"`` pooled; empty when there are no pairs.
    """
    by_family: dict[str, list[tuple[float, bool]]] = {}
    for family, judge, verifier in pairs:
        by_family.setdefault(family, []).append((float(judge), passes(float(verifier))))
    if not by_family:
        return {}

    def figures(items: list[tuple[float, bool]]) -> dict[str, Any]:
        conf = [c for c, _ in items]
        ok = [o for _, o in items]
        agree = sum((c >= threshold) == o for c, o in items)
        return {
            "n": len(items),
            "accuracy": round(agree / len(items), 4),
            "ece": round(expected_calibration_error(conf, ok, bins), 4),
            "judge_pass_rate": round(sum(c >= threshold for c in conf) / len(items), 4),
            "verifier_pass_rate": round(sum(ok) / len(items), 4),
        }

    report = {f: figures(items) for f, items in sorted(by_family.items())}
    report[ALL] = figures([x for items in by_family.values() for x in items])
    return report
