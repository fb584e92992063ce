"""A seeded discrete-event simulation of one job (NumPy, every run advanced together):
what checks the closed form (goodput_model.py) and what it cannot say.

One run: the job works through `segments` checkpoint intervals of dt hours of work, each
followed by a checkpoint write of w. Failures come at the job's rate (exponential:
memoryless, so each event draws the time to the next). A failure loses the work since the
last completed checkpoint, then costs the detection latency and either the restart u0 or,
where a hot spare is free, nothing more (the spare takes the failed node's place; the
failed node is repaired for `repair_h` and becomes a spare again). No failure strikes
during a restart: the closed form's assumption, kept so that the two can be compared.
Lemon nodes (`lemons`: their share of the fleet and how many times the rate of the rest
they fail): the job starts with its share of them; a failure strikes a lemon in proportion
to its rate, and the node that replaces it is drawn from the fleet (a lemon at the fleet's
share). So failures cluster on lemons early in a run and thin out as they are replaced:
what the closed form, with one average rate, cannot see.
A run's ETTR is its work over its wall clock; the figure is the mean over runs, with a
normal 95% interval of that mean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpudiag.fleet.goodput_model import Job, ModelError

MAX_EVENTS = 10_000_000  # per run and in all: a job that never finishes is refused


@dataclass(frozen=True)
class Simulated:
    """The mean ETTR of `runs` simulated jobs, with its 95% interval."""

    runs: int
    seed: int
    mean: float
    low: float
    high: float
    failures_per_run: float
    spare_swaps_per_run: float


def simulate(
    job: Job,
    interval_h: float,
    runs: int,
    seed: int = 0,
    work_h: float = 30 * 24.0,
    repair_h: float = 24.0,
    rate_per_hour: float | None = None,
    lemons: tuple[float, float] | None = None,
) -> Simulated:
    """Simulate `runs` jobs of `work_h` hours of work; `rate_per_hour` overrides the
    job's failure rate (the what-if rows), the fleet's average with its `lemons`
    (share of nodes, rate factor)."""
    if runs < 1 or not interval_h > 0 or not work_h > 0 or repair_h < 0:
        raise ModelError("simulate: runs, interval and work must be above 0")
    rate = job.failures_per_hour if rate_per_hour is None else rate_per_hour
    segments = max(1, math.ceil(work_h / interval_h - 1e-9))
    segment = interval_h + job.write_h
    if rate * segment > 50:
        raise ModelError(
            f"simulate: {rate * segment:.0f} failures expected per checkpoint interval: "
            "the job would never finish"
        )
    rng = np.random.default_rng(seed)
    clock = np.zeros(runs)
    done = np.zeros(runs, dtype=np.int64)  # segments completed
    failures = np.zeros(runs, dtype=np.int64)
    swaps = np.zeros(runs, dtype=np.int64)
    spares_free_at = np.zeros((runs, job.spares)) if job.spares else None
    detect_h = job.detect_s / 3600.0
    restart_h = job.restart_s / 3600.0
    share, factor = lemons if lemons else (0.0, 1.0)
    if not (0 <= share < 1 and factor >= 1):
        raise ModelError("simulate: a lemon share in [0, 1) and a factor of 1 or more")
    nodes = job.nodes
    healthy_rate = rate / (nodes * (1 - share + share * factor))
    in_job = np.full(runs, float(round(nodes * share)))  # lemons in each run's job
    active = np.arange(runs)
    events = 0
    while active.size:
        events += active.size
        if events > MAX_EVENTS:
            raise ModelError("simulate: too many events; fewer runs or a longer interval")
        job_rate = healthy_rate * (nodes + in_job[active] * (factor - 1))
        with np.errstate(divide="ignore"):
            wait = rng.exponential(1.0, active.size) / job_rate
        through = wait >= segment
        ok, bad = active[through], active[~through]
        clock[ok] += segment
        done[ok] += 1
        if bad.size:
            clock[bad] += wait[~through] + detect_h
            failures[bad] += 1
            if share:
                lemon_rate = healthy_rate * factor * in_job[bad]
                struck = rng.random(bad.size) * job_rate[~through] < lemon_rate
                in_job[bad[struck]] -= 1
                in_job[bad[struck]] += rng.random(int(struck.sum())) < share
            cost = np.full(bad.size, restart_h)
            if spares_free_at is not None:
                slots = spares_free_at[bad]
                slot = slots.argmin(axis=1)
                free = slots[np.arange(bad.size), slot] <= clock[bad]
                cost[free] = 0.0
                swaps[bad[free]] += 1
                spares_free_at[bad[free], slot[free]] = clock[bad[free]] + repair_h
            clock[bad] += cost
        active = active[done[active] < segments]
    ratios = segments * interval_h / clock
    mean = float(ratios.mean())
    half = 1.96 * float(ratios.std(ddof=1)) / math.sqrt(runs) if runs > 1 else 0.0
    return Simulated(
        runs,
        seed,
        mean,
        mean - half,
        mean + half,
        float(failures.mean()),
        float(swaps.mean()),
    )
