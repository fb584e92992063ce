"""Kernel statistics: median confidence interval coverage and summaries."""

from __future__ import annotations

import math
import random

import pytest

from gpudiag.kernels.stats import median_ci_ranks, summarize


@pytest.mark.parametrize(("count", "expected"), [(10, (1, 8)), (20, (5, 14)), (100, (39, 60))])
def test_median_ci_ranks_match_binomial_tables(count: int, expected: tuple[int, int]) -> None:
    # 1-based ranks (2, 9), (6, 15) and (40, 61) are the textbook 95% intervals.
    assert median_ci_ranks(count) == expected


@pytest.mark.parametrize("count", [6, 10, 25, 60])
def test_median_ci_covers_at_least_95_percent(count: int) -> None:
    lo, hi = median_ci_ranks(count)
    coverage = sum(math.comb(count, k) for k in range(lo + 1, hi + 1)) / 2**count
    assert coverage >= 0.95
    # and it is the tightest such interval
    tighter = sum(math.comb(count, k) for k in range(lo + 2, hi)) / 2**count
    assert tighter < 0.95


def test_median_ci_covers_true_median_in_simulation() -> None:
    rng = random.Random(7)
    hits = 0
    trials = 2000
    for _ in range(trials):
        samples = [rng.expovariate(1.0) for _ in range(15)]
        stats = summarize(samples)
        hits += stats.ci95_low <= math.log(2) <= stats.ci95_high
    assert hits / trials >= 0.94


def test_summarize_values() -> None:
    stats = summarize([3.0, 1.0, 2.0, 4.0])
    assert (stats.count, stats.median, stats.minimum, stats.maximum, stats.mean) == (
        4,
        2.5,
        1.0,
        4.0,
        2.5,
    )
    assert stats.cv == pytest.approx(math.sqrt(5 / 3) / 2.5)


@pytest.mark.parametrize("bad", [[], [1.0], [1.0, float("nan")]])
def test_summarize_refuses_what_has_no_statistics(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        summarize(bad)


def test_median_ci_ranks_of_thousands_of_samples_do_not_overflow() -> None:
    # a --seconds run of a small STREAM gathers thousands of trials: comb() overflowed
    lo, hi = median_ci_ranks(100_000)
    assert (lo, hi) == (49689, 50310)  # n/2 -+ 1.96 sqrt(n)/2, as the binomial gives
    exact, approximate = median_ci_ranks(1000), median_ci_ranks(1001)
    assert abs(exact[0] - approximate[0]) <= 1


def test_summarize_on_skewed_samples_where_median_and_mean_differ() -> None:
    # by hand: sorted 1 2 3 5 20; median 3, mean 31/5 = 6.2; squared deviations from the
    # mean 27.04 + 17.64 + 10.24 + 1.44 + 190.44 = 246.8, sample variance 246.8 / 4
    stats = summarize([5.0, 20.0, 1.0, 3.0, 2.0])
    assert (stats.count, stats.median, stats.minimum, stats.maximum) == (5, 3.0, 1.0, 20.0)
    assert stats.mean == pytest.approx(6.2)
    assert stats.cv == pytest.approx(math.sqrt(246.8 / 4) / 6.2)
    assert (stats.ci95_low, stats.ci95_high) == (1.0, 20.0)  # 5 samples: no 95% interval


def test_summarize_of_negative_samples_has_a_positive_spread() -> None:
    # sorted -9 -4 -2; median -4, mean -5; deviations -4 1 3: variance 26 / 2 = 13
    stats = summarize([-4.0, -9.0, -2.0])
    assert (stats.median, stats.minimum, stats.maximum, stats.mean) == (-4.0, -9.0, -2.0, -5.0)
    assert stats.cv == pytest.approx(math.sqrt(13) / 5)


def test_summarize_interval_picks_the_ranks_of_the_sorted_samples() -> None:
    # 10 samples: the 95% interval is the 2nd and 9th smallest (ranks 1 and 8)
    samples = [10.0, 0.5, 9.0, 2.0, 8.0, 3.0, 7.0, 4.0, 6.0, 5.0]
    stats = summarize(samples)
    assert (stats.ci95_low, stats.ci95_high) == (2.0, 9.0)
    assert stats.median == 5.5 and stats.mean == pytest.approx(54.5 / 10)
