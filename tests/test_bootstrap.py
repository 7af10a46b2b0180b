"""The bootstrap helper that puts confidence intervals over prompts on reported ratios."""

import numpy as np
import pytest

from multidraft.eval.bootstrap import (bootstrap_ci, geometric_mean_ratio, geometric_mean_ratio_ci, pooled_ratio,
                                       pooled_ratio_ci)


def test_pooled_ratio_is_rate_over_rate():
    rows = [(100, 10.0, 100, 20.0), (50, 5.0, 50, 20.0)]
    assert pooled_ratio(rows) == pytest.approx((150 / 15) / (150 / 40))
    assert geometric_mean_ratio([(4.0, 1.0), (1.0, 1.0)]) == pytest.approx(2.0)


def test_interval_covers_the_truth_at_about_its_level():
    # Means of 20 normal draws: a 90 % interval must cover the true mean about 90 % of the time (not 50 %, not 100 %).
    rng = np.random.default_rng(1)
    hits = 0
    for i in range(300):
        sample = rng.normal(3.0, 1.0, 20)
        ci = bootstrap_ci(sample, np.mean, resamples=1000, level=0.9, seed=i)
        hits += ci.low <= 3.0 <= ci.high
    assert 0.8 <= hits / 300 <= 0.95       # percentile bootstrap undercovers a little at n = 20


def test_interval_shrinks_with_more_prompts_and_is_seeded():
    rng = np.random.default_rng(0)
    few = [(t, t / r, t, t / 1.0) for t, r in zip(rng.integers(50, 130, 5), rng.normal(2.0, 0.5, 5).clip(0.5))]
    many = [(t, t / r, t, t / 1.0) for t, r in zip(rng.integers(50, 130, 80), rng.normal(2.0, 0.5, 80).clip(0.5))]
    a, b = pooled_ratio_ci(few), pooled_ratio_ci(many)
    assert a.low <= a.estimate <= a.high and b.low <= b.estimate <= b.high
    assert b.high - b.low < a.high - a.low
    assert pooled_ratio_ci(few) == a                               # same data, same seed: same interval
    assert b.excludes(1.0) and not b.excludes(b.estimate)


def test_identical_prompts_give_a_point_interval():
    ci = geometric_mean_ratio_ci([(3.0, 1.5)] * 6)
    assert ci.low == pytest.approx(2.0) and ci.high == pytest.approx(2.0)


@pytest.mark.parametrize("rows", [[], [[[1.0]]]])
def test_bad_shapes_are_refused(rows):
    with pytest.raises(ValueError):
        bootstrap_ci(rows, np.mean)
