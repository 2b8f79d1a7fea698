import math

import pytest

from arena.stats import mean_pass_at_k, pass_at_k, wilson_interval


def test_wilson_known_values():
    lo, hi = wilson_interval(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-4) and hi == pytest.approx(0.7634, abs=1e-4)
    lo, hi = wilson_interval(0, 32)
    assert lo == 0.0 and hi == pytest.approx(0.1072, abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_pass_at_k_matches_the_combinatorial_definition():
    for n, c, k in [(8, 1, 1), (8, 1, 8), (8, 3, 4), (10, 0, 5), (5, 5, 2)]:
        expected = 1 - math.comb(n - c, k) / math.comb(n, k)
        assert pass_at_k(n, c, k) == pytest.approx(expected)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_mean_pass_at_k_over_groups():
    groups = [[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]]
    assert mean_pass_at_k(groups, 1) == pytest.approx((0.25 + 0 + 1) / 3)
    assert mean_pass_at_k(groups, 4) == pytest.approx(2 / 3)
