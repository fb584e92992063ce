"""Statistics of repeated kernel trials: median, spread and a confidence interval."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence

from gpudiag.model import Statistics

# Above this many samples the binomial is replaced by its normal approximation, as the
# exact sum overflows (a --seconds run of a small STREAM gathers thousands of trials).
EXACT_RANKS_UP_TO = 1000


def median_ci_ranks(count: int, confidence: float = 0.95) -> tuple[int, int]:
    """0-based ranks (lo, hi) of sorted samples bounding the median at `confidence`.

    Distribution-free: the number of samples below the true median is Binomial(n, 1/2),
    so [x_lo, x_hi] covers it with probability 1 - 2 * P(B < lo + 1). Below 6 samples no
    interval reaches 95%; then the widest one, [min, max], is returned.
    """
    if count < 1:
        raise ValueError("need at least one sample")
    tail = (1.0 - confidence) / 2.0
    if count > EXACT_RANKS_UP_TO:  # comb() overflows a float past ~1030 samples
        z = statistics.NormalDist().inv_cdf(1.0 - tail)
        lo = max(0, math.floor(count / 2 - z * math.sqrt(count) / 2) - 1)
        return lo, count - 1 - lo
    # The interval [x_lo, x_hi] misses the median with probability 2 * P(B <= lo):
    # take the largest lo that keeps that within the tail.
    lo = 0
    cumulative = 0.5**count
    for k in range(1, count // 2):
        cumulative += math.comb(count, k) * 0.5**count
        if cumulative > tail:
            break
        lo = k
    hi = count - 1 - lo
    return lo, hi


def summarize(samples: Sequence[float]) -> Statistics:
    """Median, minimum, maximum, mean, coefficient of variation and 95% CI of the median.

    Needs at least two samples: one sample has no spread to report.
    """
    values = sorted(float(s) for s in samples)
    if len(values) < 2:
        raise ValueError("statistics need at least two samples")
    if not all(math.isfinite(v) for v in values):
        raise ValueError("samples must be finite numbers")
    mean = statistics.fmean(values)
    stdev = statistics.stdev(values)
    cv = stdev / abs(mean) if mean != 0 else 0.0 if stdev == 0 else math.inf
    if not math.isfinite(cv):
        raise ValueError("coefficient of variation is undefined for a zero mean")
    lo, hi = median_ci_ranks(len(values))
    return Statistics(
        count=len(values),
        median=statistics.median(values),
        minimum=values[0],
        maximum=values[-1],
        mean=mean,
        cv=cv,
        ci95_low=values[lo],
        ci95_high=values[hi],
    )


def progress_fraction(done: int, rounds: int, started: float, seconds: float | None) -> float:
    """Progress: of the rounds asked for, or of the time asked for, whichever is less."""
    by_rounds = min(1.0, done / rounds)
    if seconds is None or seconds <= 0:
        return by_rounds
    return min(by_rounds, (time.monotonic() - started) / seconds, 1.0)


def more_trials(
    started: float,
    done: int,
    rounds: int,
    seconds: float | None,
    until_confident: float | None,
    unsettled: Callable[[], bool],
) -> bool:
    """Whether a kernel's trial loop goes on: until `rounds` rounds are done, then while
    `seconds` (since `started`, time.monotonic) have not passed, then, with
    --until-confident, while its budget lasts and `unsettled()` says the interval has
    neither cleared the rule's threshold nor tightened enough."""
    elapsed = time.monotonic() - started
    if done < rounds or (seconds is not None and elapsed < seconds):
        return True
    return until_confident is not None and elapsed < until_confident and unsettled()
