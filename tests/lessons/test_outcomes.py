"""lessons.outcomes: the one success rule and the held-out evaluation names."""

import pytest

from lessons.outcomes import count_passes, eval_name, passes


@pytest.mark.parametrize(
    "reward, threshold, expected",
    [
        (1.0, 1.0, True),
        (0.1 + 0.2 + 0.7, 1.0, True),  # float sums within the slack
        (1.0 - 1e-10, 1.0, True),
        (0.999, 1.0, False),
        (0.0, 1.0, False),
        (None, 1.0, False),  # ungraded never passes
        (0.8, 0.8, True),
        (0.79, 0.8, False),
    ],
)
def test_passes(reward, threshold, expected):
    assert passes(reward, threshold) is expected


def test_count_passes_counts_only_passes():
    assert count_passes([1.0, 0.5, None, 1.0 - 1e-12, 0.0]) == 2
    assert count_passes([0.9, 0.8, 0.7], threshold=0.8) == 2
    assert count_passes([]) == 0


def test_eval_name():
    assert eval_name(2, True) == "heldout_cycle2"
    assert eval_name(1, False) == "heldout_cycle1_no_lessons"
    assert eval_name(3, True, wake=True) == "heldout_cycle3_wake"
    assert eval_name(3, False, wake=True) == "heldout_cycle3_wake_no_lessons"
