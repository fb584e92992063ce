"""Statistics of repeated kernel trials: median, spread and a confidence interval that
holds for drifting trials, and the sequential rule of --until-confident.

GPU trials drift (clocks, heat): one trial is like the one before it, so an interval made
for independent trials is too narrow (simulated coverage of the rank interval alone: 0.79-
0.88 at lag-1 autocorrelation 0.5, 0.38-0.48 at 0.9, issue 35). `summarize` gives the hull
of that distribution-free interval and a batch-means interval whose batches grow with the
autocorrelation the trials show (two batches, Student's t with 1 degree of freedom, where
it is 0.3 or more). Simulated coverage (2,000 AR(1) series each, tests/test_stats_drift.py):
at lag-1 0.5, 0.969 with 10 trials and 0.955 with 30 (the rank interval alone: 0.873,
0.802); at 0.9, 0.945 with 60 trials, 0.922 with 30 and 0.885 with 10 (alone: 0.44-0.48):
trials that drift that much need 60 of them for a 95% interval to hold.

`--until-confident` looks at its interval only at planned looks (the plan's trials, then
twice as many, ...), look k at confidence 1 - SEQUENTIAL_ALPHA / 2^(k+1): alpha spending
of a fixed error budget (the looks' errors sum to at most SEQUENTIAL_ALPHA however many
there are), so that its false "below" rate at the threshold is no worse than one fixed
interval of 10 trials; what it reports after is at its last look's confidence."""

from __future__ import annotations

import contextvars
import itertools
import math
import statistics
import time
from collections.abc import Callable, Sequence

from gpudiag.model import Statistics

# Above this many samples the binomial is replaced by its normal approximation, as the
# exact sum overflows (a --seconds run of a small STREAM gathers thousands of trials).
EXACT_RANKS_UP_TO = 1000
CONFIDENCE = 0.95
MIN_INTERVAL = 6  # trials from which a 95% interval exists (below: [min, max])
# Lag-1 autocorrelation (bias-corrected) from which the trials are taken as drifting:
# two batches only (chosen by simulation against 0.5: 0.3 keeps coverage at 0.9 higher)
DRIFTING = 0.3
# --until-confident: looks at the plan's trials (at least LOOK_FROM) times 1, 2, 4, ...,
# look k at confidence 1 - SEQUENTIAL_ALPHA / 2^(k+1) (two-sided): a false "below" at the
# threshold of at most SEQUENTIAL_ALPHA / 2 = 0.5%, against 0.36% for one fixed interval
# of 10 (1.1% for the rank interval alone) and 6.7% for a look after every trial at 95%
# (simulated: tests/test_stats_drift.py)
SEQUENTIAL_ALPHA = 0.01
LOOK_FROM = 10  # the first look is at the plan's trials, or at 10 where it asks fewer
# The confidence a sequential look tests at, while more_trials asks whether to go on
# (kernels/stream.py and gemm.py judge their interval through `summarize` then)
_LOOK_CONFIDENCE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "look_confidence", default=None
)
# Student's t, two-sided 95% (0.975 quantile), by degrees of freedom 1-30 (any table)
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def _t_quantile(df: int, confidence: float) -> float:
    """Student's t two-sided quantile: the table at 95%, else Cornish-Fisher from the
    normal's (within 1% from 3 degrees of freedom; 1 and 2 exact by their closed forms)."""
    if confidence == CONFIDENCE and df <= len(_T975):
        return _T975[df - 1]
    p = 1.0 - (1.0 - confidence) / 2.0
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) * math.sqrt(2.0 / (4 * p * (1 - p)))
    z = statistics.NormalDist().inv_cdf(p)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / df + g2 / df**2 + g3 / df**3


def lag1_autocorrelation(values: Sequence[float]) -> float:
    """The trials' lag-1 autocorrelation, corrected for its bias toward 0 in short series
    (Kendall: E[r] ~ rho - (1 + 3 rho) / n), clipped to [0, 0.99]."""
    n = len(values)
    mean = statistics.fmean(values)
    d = [v - mean for v in values]
    total = sum(x * x for x in d)
    if n < 3 or total == 0:
        return 0.0
    r = sum(a * b for a, b in itertools.pairwise(d)) / total
    return min(max(r + (1 + 3 * max(r, 0.0)) / n, 0.0), 0.99)


def batch_means_interval(
    values: Sequence[float], confidence: float = CONFIDENCE
) -> tuple[float, float]:
    """An interval for the trials' level that holds when they drift: the mean of b batch
    means +- t(b-1) x their standard error, with fewer, longer batches the more the trials
    are autocorrelated (b = 2 from DRIFTING on; else up to sqrt(n), one batch per three
    effectively independent trials). The first trials are left out where n is not a
    multiple of b (warm-up is the likelier outlier)."""
    n = len(values)
    rho = lag1_autocorrelation(values)
    effective = n * (1 - rho) / (1 + rho)
    b = 2 if rho >= DRIFTING else max(2, min(math.isqrt(n), int(effective // 3)))
    m = n // b
    if m < 1:
        return min(values), max(values)
    kept = values[n - m * b :]
    means = [statistics.fmean(kept[i * m : (i + 1) * m]) for i in range(b)]
    centre = statistics.fmean(means)
    half = _t_quantile(b - 1, confidence) * statistics.stdev(means) / math.sqrt(b)
    return centre - half, centre + half


def median_ci_ranks(count: int, confidence: float = CONFIDENCE) -> tuple[int, int]:
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


def summarize(samples: Sequence[float], confidence: float | None = None) -> Statistics:
    """Median, minimum, maximum, mean, coefficient of variation and a 95% interval of the
    figure (`samples` in the order they were taken): the hull of the median's
    distribution-free interval and the batch-means interval, which holds for drifting
    trials. `confidence`: another level (a sequential look's; by default the one
    more_trials sets while it looks, else 95%).

    Needs at least two samples: one sample has no spread to report.
    """
    level = confidence or _LOOK_CONFIDENCE.get() or CONFIDENCE
    in_order = [float(s) for s in samples]
    values = sorted(in_order)
    if len(values) < 2:
        raise ValueError("statistics need at least two samples")
    if not all(math.isfinite(v) for v in values):
        raise ValueError("samples must be finite numbers")
    mean = statistics.fmean(values)
    stdev = statistics.stdev(values)
    cv = stdev / abs(mean) if mean != 0 else 0.0 if stdev == 0 else math.inf
    if not math.isfinite(cv):
        raise ValueError("coefficient of variation is undefined for a zero mean")
    lo, hi = median_ci_ranks(len(values), level)
    low, high = values[lo], values[hi]
    if len(values) >= MIN_INTERVAL:  # below it [min, max] is the widest there is
        batch_low, batch_high = batch_means_interval(in_order, level)
        low, high = min(low, batch_low), max(high, batch_high)
    return Statistics(
        count=len(values),
        median=statistics.median(values),
        minimum=values[0],
        maximum=values[-1],
        mean=mean,
        cv=cv,
        ci95_low=low,
        ci95_high=high,
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
    neither cleared the rule's threshold nor tightened enough. `unsettled()` is asked only
    at the planned looks (sequential_look), with `summarize` at that look's confidence."""
    elapsed = time.monotonic() - started
    if done < rounds or (seconds is not None and elapsed < seconds):
        return True
    if until_confident is None or elapsed >= until_confident:
        return False
    look = sequential_look(done, rounds)
    if look is None:
        return True  # between looks: gather more, decide nothing
    token = _LOOK_CONFIDENCE.set(look_confidence(look))
    try:
        return unsettled()
    finally:
        _LOOK_CONFIDENCE.reset(token)


def sequential_look(done: int, rounds: int) -> int | None:
    """Which planned look `done` trials are (0 at the plan's trials or LOOK_FROM, 1 at
    twice as many, ...), None between looks."""
    base = max(rounds, LOOK_FROM)
    if done < base or done % base:
        return None
    multiple = done // base
    return multiple.bit_length() - 1 if multiple & (multiple - 1) == 0 else None


def reported(
    samples: Sequence[float], until_confident: float | None, rounds: int = 0
) -> Statistics:
    """The statistics a run of `rounds` planned trials reports: after --until-confident
    at the confidence of the last look its trials reached (its interval was judged at
    that level; a verdict read from a 95% one would spend more than the budget: 1.0%
    against 0.36% by simulation), else at 95%."""
    if until_confident is None:
        return summarize(samples)
    return summarize(samples, look_confidence(last_look(len(samples), rounds)))


def last_look(done: int, rounds: int) -> int:
    """The last planned look `done` trials reached (0 before the first)."""
    base = max(rounds, LOOK_FROM)
    return max(0, (max(done, base) // base).bit_length() - 1)


def look_confidence(look: int) -> float:
    """The confidence of sequential look `look` (0, 1, ...): its share of the budget."""
    return 1.0 - SEQUENTIAL_ALPHA / 2 ** (look + 1)
