"""What failures cost a large job, in closed form: its MTTF, the chance of a failure in a
horizon, Meta's first-order E[ETTR], and the checkpoint intervals of Young, Daly and
Saxena et al. with the closed form's own optimum. Units: hours throughout, but where a
name says otherwise. The simulation that checks these is goodput_sim.py; the rates they
take come from the fleet (goodput.py) or the command line.

Sources:
- Kokolis et al. (Meta), "Revisiting Reliability in Large-Scale Machine Learning Research
  Clusters" (arXiv 2410.21680): E[ETTR] ~ (1 - N r (u0 + dt/2)) / (1 + w/dt), first order
  (one failure at most per interval, none during a restart).
- Young (1974): the checkpoint interval sqrt(2 w M).
- Daly (2006), first order: sqrt(2 w (M + R)).
- Saxena et al. (arXiv 2410.18124), the availability optimum T_s + sqrt(2 (T_f + T_r) T_s
  + T_s^2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# `gpudiag goodput`'s defaults (its options in commands/goodput.py), which the fleet
# screen's goodput tab uses too (goodput_report.fleet_text)
DEFAULT_GPUS = 16384
DEFAULT_GPUS_PER_NODE = 8
DEFAULT_RESTART_MIN = 10.0
DEFAULT_WRITE_S = 60.0
DEFAULT_JOB_DAYS = 30.0
DEFAULT_REPAIR_H = 24.0

HOURS_PER_DAY = 24.0
DAYS_PER_YEAR = 365.0


class ModelError(ValueError):
    """A figure the model cannot take (one line: said to the user as it is)."""


@dataclass(frozen=True)
class Job:
    """A job as the model sees it: its size, its failure rate per node, and what a
    failure and a checkpoint cost. `detect_s` adds to every restart; `spares` only the
    simulation can model (the closed form has none)."""

    gpus: int
    rate_per_node_day: float
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    restart_s: float = DEFAULT_RESTART_MIN * 60.0
    write_s: float = DEFAULT_WRITE_S
    detect_s: float = 0.0
    spares: int = 0

    def __post_init__(self) -> None:
        for name in ("rate_per_node_day", "restart_s", "write_s", "detect_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ModelError(f"{name}: must be a finite number at least 0, got {value}")
        if self.gpus < 1 or self.gpus_per_node < 1 or self.spares < 0:
            raise ModelError("gpus and gpus per node must be at least 1, spares at least 0")

    @property
    def nodes(self) -> int:
        """Nodes the job runs on: whole nodes, GPUs / GPUs per node rounded up (7 GPUs on
        8-GPU nodes take one node, and all of its failures)."""
        return -(-self.gpus // self.gpus_per_node)

    @property
    def failures_per_hour(self) -> float:
        """The job's failure rate: every node's rate, summed."""
        return self.nodes * self.rate_per_node_day / HOURS_PER_DAY

    @property
    def overhead_h(self) -> float:
        """What a failure costs besides the lost work: detection and restart (u0)."""
        return (self.restart_s + self.detect_s) / 3600.0

    @property
    def write_h(self) -> float:
        return self.write_s / 3600.0


def mttf_hours(job: Job) -> float:
    """The job's mean time to failure (inf where nothing fails)."""
    rate = job.failures_per_hour
    return math.inf if rate == 0 else 1.0 / rate


def p_any_failure(rate_per_gpu_year: float, gpus: int, days: float) -> float:
    """The chance of at least one failure among `gpus` GPUs in `days`, failures
    exponential at `rate_per_gpu_year` (a share: 0.01 is 1% a year)."""
    return -math.expm1(-rate_per_gpu_year * gpus * days / DAYS_PER_YEAR)


def ettr(job: Job, interval_h: float) -> float:
    """Meta's first-order E[ETTR] for a checkpoint every `interval_h` hours of work:
    (1 - lambda (u0 + dt/2)) / (1 + w/dt), floored at 0 (where the first order says the
    job never progresses). With a free write (w = 0) an interval of 0 is its limit,
    checkpointing continuously: 1 - lambda u0."""
    if not interval_h > 0 and not (interval_h == 0 and job.write_h == 0):
        raise ModelError("the checkpoint interval must be above 0")
    if interval_h == 0:
        return max(0.0, 1.0 - job.failures_per_hour * job.overhead_h)
    lost = job.failures_per_hour * (job.overhead_h + interval_h / 2)
    return max(0.0, (1.0 - lost) / (1.0 + job.write_h / interval_h))


def ettr_renewal(job: Job, interval_h: float) -> float:
    """E[ETTR] under the closed form's own assumptions without its first-order cut: a
    segment of dt + w is retried from its start until it runs through without a failure
    (exponential failures, none during a restart), so it takes (e^{lambda s} - 1)(1/lambda
    + u0) on average. The simulation's figure, exactly; used to say how far the first
    order is off where the simulation is not run."""
    rate = job.failures_per_hour
    segment = interval_h + job.write_h
    if segment == 0:  # a free write, checkpointing continuously: the limit s -> 0
        return 1.0 / (1.0 + rate * job.overhead_h)
    if rate == 0:
        return interval_h / segment
    try:
        expected = math.expm1(rate * segment) * (1.0 / rate + job.overhead_h)
    except OverflowError:  # a segment hundreds of MTTFs long: it never runs through
        return 0.0
    return interval_h / expected


def young_h(job: Job) -> float:
    """Young's interval, sqrt(2 w M)."""
    return math.sqrt(2 * job.write_h * mttf_hours(job))


def daly_h(job: Job) -> float:
    """Daly's first-order interval, sqrt(2 w (M + R))."""
    return math.sqrt(2 * job.write_h * (mttf_hours(job) + job.overhead_h))


def saxena_h(job: Job) -> float:
    """Saxena et al.'s availability optimum, T_s + sqrt(2 (T_f + T_r) T_s + T_s^2)."""
    w = job.write_h
    return w + math.sqrt(2 * (mttf_hours(job) + job.overhead_h) * w + w * w)


def optimal_h(job: Job) -> float:
    """The interval that maximises the closed form: d/d(dt) of dt (a - lambda dt/2) /
    (dt + w) is 0 at dt = sqrt(w^2 + 2 a w / lambda) - w, a = 1 - lambda u0. Where
    nothing fails, any interval is as good: inf; where a write costs nothing (w = 0), the
    shorter the better: 0, checkpointing continuously (the formula's limit)."""
    rate, w = job.failures_per_hour, job.write_h
    a = 1.0 - rate * job.overhead_h
    if rate == 0:
        return math.inf
    if a <= 0:
        raise ModelError(
            f"the job's MTTF ({mttf_hours(job) * 3600:.3g} s) is no longer than a restart "
            f"({job.restart_s + job.detect_s:g} s with detection): it never makes progress"
        )
    return math.sqrt(w * w + 2 * a * w / rate) - w


def intervals(job: Job) -> dict[str, float]:
    """The four checkpoint intervals, in hours."""
    return {
        "young": young_h(job),
        "daly": daly_h(job),
        "saxena": saxena_h(job),
        "optimal": optimal_h(job),
    }


def interval_grid(job: Job, around_h: float, points: int = 13) -> list[float]:
    """Checkpoint intervals from a quarter to four times `around_h`, evenly on a log scale,
    never below the checkpoint write: what the table and chart show."""
    low = max(around_h / 4, job.write_h * 1.01, 1e-6)
    high = max(around_h * 4, low * 2)
    step = (math.log(high) - math.log(low)) / (points - 1)
    return [math.exp(math.log(low) + i * step) for i in range(points)]
