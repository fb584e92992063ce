"""What `gpudiag diff` makes of kernel results: a metric compared (MetricChange) and the
explanations that name the readings known to move one (Explanation). Apart from
gpudiag/diff.py so that a diff of snapshots without kernel results, and every report,
does not build these dataclasses (about 1.5 ms of each `gpudiag diff`, issue 44)."""

from __future__ import annotations

from dataclasses import dataclass

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    import re
    from typing import Any


@dataclass(frozen=True)
class MetricChange:
    """A kernel metric measured on both sides."""

    kernel: str
    device: str
    metric: str
    unit: str
    median_a: float
    median_b: float
    ratio: float
    ci_low: float
    ci_high: float
    verdict: str
    explanations: tuple[Any, ...] = ()  # diff.ReadingChange's that may explain it
    reason: str = ""  # why a verdict is "inconclusive"
    ab: str = ""  # stats.samples_verdict: different, same, or how many more trials decide


@dataclass(frozen=True)
class Explanation:
    """Which readings can move which metrics (rules/explanations.toml): a pattern over
    "kernel.metric", one over the device (cpu-numa0, gpu3; any when absent), and the
    reading-key patterns."""

    metric: re.Pattern[str]
    device: re.Pattern[str]
    readings: tuple[re.Pattern[str], ...]
