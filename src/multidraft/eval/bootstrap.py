"""Bootstrap confidence intervals over prompts for the ratios reports quote (speedups, acceptance lengths).

Why: a ratio pooled over 3-20 prompts moves a lot with one prompt, and reports must say how much. Prompts are the
unit that varies (tokens within one prompt are not independent), so whole prompts are resampled with replacement,
every column of a prompt together (a paired comparison keeps its pairing). Percentile intervals, seeded: the same
data gives the same interval.

    from multidraft.eval.bootstrap import pooled_ratio_ci
    # one row per prompt: tokens and seconds of method A, tokens and seconds of its baseline B
    ci = pooled_ratio_ci([(128, 20.1, 128, 51.0), (97, 30.2, 97, 40.8), ...])
    print(f"speedup {ci}")       # "speedup 2.41 [2.18, 2.66]": estimate [2.5 %, 97.5 % quantiles]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np


@dataclass(frozen=True)
class Interval:
    estimate: float           # the statistic on the data as it is
    low: float
    high: float
    level: float              # e.g. 0.95
    samples: int              # prompts (rows) resampled

    def __str__(self) -> str:
        return f"{self.estimate:.2f} [{self.low:.2f}, {self.high:.2f}]"

    def excludes(self, value: float) -> bool:
        """True when `value` lies outside the interval (e.g. 1.0 for a ratio: the difference is resolved)."""
        return not self.low <= value <= self.high


def bootstrap_ci(rows: Sequence, statistic: Callable[[np.ndarray], float], *, resamples: int = 10_000,
                 level: float = 0.95, seed: int = 0) -> Interval:
    """Percentile bootstrap interval of `statistic(rows)` with rows (one per prompt) resampled with replacement.

    `rows` is anything np.asarray makes 1-D (one value per prompt) or 2-D (one row per prompt, columns the
    quantities the statistic combines); `statistic` takes an array of the same shape.
    """
    data = np.asarray(rows, dtype=np.float64)
    if data.ndim not in (1, 2) or len(data) == 0:
        raise ValueError(f"bootstrap needs one value or row per prompt, got an array of shape {data.shape}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if resamples < 100:
        raise ValueError(f"use at least 100 resamples, got {resamples}")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(data), size=(resamples, len(data)))
    values = np.array([statistic(data[pick]) for pick in picks], dtype=np.float64)
    values = values[np.isfinite(values)]
    low, high = np.quantile(values, [(1 - level) / 2, (1 + level) / 2])
    return Interval(float(statistic(data)), float(low), float(high), level, len(data))


def ratio_of_sums(numerator: np.ndarray, denominator: np.ndarray) -> float:
    """sum(numerator) / sum(denominator): a pooled rate (tokens / seconds, tokens / target calls)."""
    total = float(np.sum(denominator))
    return float(np.sum(numerator)) / total if total else float("nan")


def pooled_ratio(rows: np.ndarray) -> float:
    """Rows (tokens_a, cost_a, tokens_b, cost_b): pooled rate of A over pooled rate of B, e.g. tok/s of a method
    over tok/s of its baseline, or acceptance length (tokens / target calls) of one drafter over another's."""
    rows = np.asarray(rows, dtype=np.float64)
    return ratio_of_sums(rows[:, 0], rows[:, 1]) / ratio_of_sums(rows[:, 2], rows[:, 3])


def geometric_mean_ratio(rows: np.ndarray) -> float:
    """Rows (rate_a, rate_b): the geometric mean over prompts of rate_a / rate_b (every prompt weighs the same)."""
    rows = np.asarray(rows, dtype=np.float64)
    return float(np.exp(np.mean(np.log(rows[:, 0] / rows[:, 1]))))


def pooled_ratio_ci(rows, **options) -> Interval:
    """Bootstrap interval of `pooled_ratio` over prompts (rows: tokens_a, cost_a, tokens_b, cost_b)."""
    return bootstrap_ci(rows, pooled_ratio, **options)


def geometric_mean_ratio_ci(rows, **options) -> Interval:
    """Bootstrap interval of `geometric_mean_ratio` over prompts (rows: rate_a, rate_b)."""
    return bootstrap_ci(rows, geometric_mean_ratio, **options)
