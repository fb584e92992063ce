"""The statistics of "did it change": Student's t distribution (for the change point
detector's test, gpudiag/fleet/otava, and for intervals of a mean), Welch's test of two
samples on the log scale (a ratio, as a percentage), the three-way A/B verdict of
Chromium Pinpoint ("different", "same" or "run N more", N from the measured variance) and
Benjamini-Hochberg's false discovery rate over many tests. Pure Python and NumPy: SciPy is
not a dependency (the values it gives are checked in tests/test_changes.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

ALPHA = 0.01  # Pinpoint's: "different" when p < 0.01
POWER = 0.9
EFFECT = 0.02  # the difference an inconclusive verdict says how many runs would decide
MARGIN = 0.01  # "same" when the whole interval lies within +-1%


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        step = d * c
        h *= step
        if abs(step - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_two_sided(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with df degrees of freedom (NaN stays NaN)."""
    if math.isnan(t) or df <= 0:
        return math.nan
    if math.isinf(t):
        return 0.0
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def t_quantile(q: float, df: float) -> float:
    """The q quantile (q > 0.5) of Student's t, by bisection on t_two_sided."""
    target = 2.0 * (1.0 - q)
    low, high = 0.0, 1.0
    while t_two_sided(high, df) > target:
        high *= 2.0
    for _ in range(80):
        mid = (low + high) / 2.0
        if t_two_sided(mid, df) > target:
            low = mid
        else:
            high = mid
    return (low + high) / 2.0


def ttest_ind_from_stats(
    mean1: float,
    std1: float,
    nobs1: float,
    mean2: float,
    std2: float,
    nobs2: float,
    alternative: str = "two-sided",
) -> tuple[float, float]:
    """(t, p) of Student's two-sample test with pooled variance from summary statistics,
    as scipy.stats.ttest_ind_from_stats(equal_var=True) gives them (two-sided only)."""
    if alternative != "two-sided":
        raise ValueError("only the two-sided test is provided")
    df = nobs1 + nobs2 - 2.0
    pooled = ((nobs1 - 1.0) * std1 * std1 + (nobs2 - 1.0) * std2 * std2) / df
    denom = math.sqrt(pooled * (1.0 / nobs1 + 1.0 / nobs2))
    diff = float(mean1) - float(mean2)
    if denom == 0.0:
        t = math.nan if diff == 0.0 else math.copysign(math.inf, diff)
    else:
        t = diff / denom
    return t, t_two_sided(t, df)


@dataclass(frozen=True)
class Shift:
    """B against A on the log scale: the change in percent with its interval, Welch's
    p-value, and the noise (the pooled coefficient of variation)."""

    pct: float
    low: float
    high: float
    p: float
    cv: float
    n_a: int
    n_b: int


def _mean_var(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    mean = math.fsum(values) / n
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return mean, var


def shift(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> Shift:
    """Welch's test of log(B) against log(A): the change of B in percent of A, with its
    `level` interval. Both sides need two positive values."""
    if len(a) < 2 or len(b) < 2 or min(a) <= 0 or min(b) <= 0:
        raise ValueError("a shift needs two positive values a side")
    la, lb = [math.log(v) for v in a], [math.log(v) for v in b]
    ma, va = _mean_var(la)
    mb, vb = _mean_var(lb)
    na, nb = len(la), len(lb)
    se2 = va / na + vb / nb
    diff = mb - ma
    pooled_sd = math.sqrt(((na - 1) * va + (nb - 1) * vb) / (na + nb - 2))
    if se2 == 0.0:
        p = 1.0 if diff == 0.0 else 0.0
        low = high = diff
    else:
        df = se2 * se2 / ((va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1) or 1e-300)
        se = math.sqrt(se2)
        p = t_two_sided(diff / se, df)
        half = t_quantile(0.5 + level / 2.0, df) * se
        low, high = diff - half, diff + half

    def pct(x: float) -> float:
        return 100.0 * math.expm1(x)

    return Shift(pct(diff), pct(low), pct(high), p, pooled_sd, na, nb)


def runs_needed(
    cv: float, effect: float = EFFECT, alpha: float = ALPHA, power: float = POWER
) -> int:
    """Runs a side that find a relative difference `effect` at noise `cv` (both as
    fractions) with a two-sided test at `alpha` and the given power: 2 (z_a/2 + z_b)^2
    cv^2 / effect^2 (about 8 at CV 1% for 2% at alpha 0.01 and power 0.9, 30 at CV 2%)."""
    from statistics import NormalDist  # its fractions and decimal: only when asked

    z = NormalDist().inv_cdf
    n = 2.0 * (z(1.0 - alpha / 2.0) + z(power)) ** 2 * (cv / effect) ** 2
    return max(2, math.ceil(n))


@dataclass(frozen=True)
class Verdict:
    """An A/B verdict: "different", "same" or "inconclusive", the shift it rests on, and
    for an inconclusive one the runs a side that would decide."""

    kind: str
    shift: Shift
    higher_is_better: bool
    margin: float
    effect: float
    runs: int = 0  # runs a side that would decide `effect` at this noise
    same_runs: int = 0  # runs a side that would show it within the margin (0: it is not)

    @property
    def slower(self) -> bool:
        return (self.shift.pct < 0) == self.higher_is_better

    def line(self, b: str = "B", runs: str = "runs") -> str:
        """One line: 'different: B is 3.2% [2.1, 4.3] slower', 'same: within +-1%
        (B -0.2% [-0.6, 0.3])', 'inconclusive: about 12 more runs per side ...'."""
        s = self.shift
        if self.kind == "different":
            word = "slower" if self.slower else "faster"
            sign = -1.0 if s.pct < 0 else 1.0
            lo, hi = sorted((sign * s.low, sign * s.high))
            return f"different: {b} is {abs(s.pct):.1f}% [{lo:.1f}, {hi:.1f}] {word}"
        interval = f"{b} {s.pct:+.1f}% [{s.low:+.1f}, {s.high:+.1f}]"
        if self.kind == "same":
            return f"same: within +-{100 * self.margin:g}% ({interval})"
        have = min(s.n_a, s.n_b)
        noise = f"at this noise (CV {100 * s.cv:.1f}%"
        if have < self.runs:
            return (
                f"inconclusive: about {self.runs - have} more {runs} per side would decide a "
                f"{100 * self.effect:g}% difference {noise}, {self.runs} a side; {interval})"
            )
        under = f"inconclusive: under a {100 * self.effect:g}% difference"
        if self.same_runs > have:
            return (
                f"{under}; about {self.same_runs - have} more {runs} per side would show "
                f"whether it is within +-{100 * self.margin:g}% {noise}; {interval})"
            )
        return f"{under}, not within +-{100 * self.margin:g}% ({interval})"


def ab_verdict(
    a: Sequence[float],
    b: Sequence[float],
    higher_is_better: bool = True,
    margin: float = MARGIN,
    effect: float = EFFECT,
    alpha: float = ALPHA,
    power: float = POWER,
) -> Verdict:
    """Pinpoint's three answers from runs (or trials) of A and of B: "same" when the
    1 - 2 alpha interval (two one-sided tests) lies within +-margin, "different" when
    Welch's p < alpha, else "inconclusive" with the runs a side that would decide a
    difference of `effect` at the measured noise, or where there are that many already,
    those that would show it within the margin (two one-sided tests at alpha, each side's
    z(1 - alpha) + z(power) over the room between the measured change and the margin)."""
    tost = shift(a, b, 1.0 - 2.0 * alpha)
    s = shift(a, b)
    limit = 100.0 * margin
    if -limit <= tost.low and tost.high <= limit:
        return Verdict("same", s, higher_is_better, margin, effect)
    if s.p < alpha:
        return Verdict("different", s, higher_is_better, margin, effect)
    gap = margin - abs(math.log1p(s.pct / 100.0))  # room left for the interval's half
    same_runs = runs_needed(s.cv, gap, 2.0 * alpha) if gap > 0 else 0
    return Verdict(
        "inconclusive", s, higher_is_better, margin, effect, runs_needed(s.cv, effect), same_runs
    )


def fdr(pvalues: Sequence[float], q: float = 0.05) -> list[bool]:
    """Benjamini-Hochberg: which of the tests are discoveries at false discovery rate q."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    m = len(pvalues)
    cut = -1
    for rank, i in enumerate(order, 1):
        if pvalues[i] <= q * rank / m:
            cut = rank
    keep = [False] * m
    for i in order[: max(cut, 0)]:
        keep[i] = True
    return keep


def samples_verdict(a: Sequence[float], b: Sequence[float], higher_better: bool) -> str:
    """`gpudiag diff`'s A/B line for two kernel results' trials ("" where a side has
    fewer than two positive trials): ab_verdict's, counting trials."""
    if len(a) < 2 or len(b) < 2 or min(a) <= 0 or min(b) <= 0:
        return ""
    return ab_verdict(a, b, higher_better).line("B", "trials")
