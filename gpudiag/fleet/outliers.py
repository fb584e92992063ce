"""What is odd in the fleet's table, each kind of reading by its own comparison (the
kind the catalog declares with the reading, gpudiag/catalog.py's Kind):

- measurements and configuration numbers: against the median and MAD of their group
  (same model, reading, and position where the reading is positional): robust z beyond
  the threshold, or where the MAD is 0 any value more than 1% off the median;
- counters (errors since boot or over a GPU's life): by rate, not by a pool that is
  mostly zero: the fleet's rate per unit (GPU, NVLink, node) fitted as a negative
  binomial (a Poisson where the counts are not overdispersed), and a count flagged only
  where its tail probability, times the number of units compared, is below COUNTER_ALPHA.
  The ordinary few (a corrected error here and there) are left alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from gpudiag.catalog import Kind
from gpudiag.fleet.table import MIN_COMPARABLE, Columns, Fleet, TableNames

MAD_SCALE = 1.4826  # MAD of a normal distribution -> its standard deviation
# a counter is improbable where its tail probability times the number of units compared
# is below this: the chance that a fleet of healthy units following the fitted rate shows
# one count flagged, 1% (the family-wise error rate, Bonferroni over every unit)
COUNTER_ALPHA = 0.01
MAX_COUNT = 10**6  # tails are summed up to here; beyond, the tail at it bounds them


@dataclass
class Outlier:
    """A reading (or kernel figure) of one node's device far from comparable ones."""

    reading: str
    node: str
    device: str
    value: float
    unit: str
    median: float
    mad: float
    z: float
    model: str

    @property
    def off(self) -> str:
        """How far off: a percentage of the median, or the difference where it is 0."""
        if self.median:
            return f"{(self.value - self.median) / abs(self.median):+.1%}"
        return f"{self.value - self.median:+g}"


def _median(values: np.ndarray) -> float:
    """The median as Polars computes it (linear interpolation between the two middle
    values of an even count: lower + (upper - lower) * 0.5, which is not always NumPy's
    (lower + upper) / 2 to the last bit): the report's figures are the ones Polars gave
    before the statistics moved to NumPy."""
    n = len(values)
    k = (n - 1) // 2
    if n % 2:
        return float(np.partition(values, k)[k])
    part = np.partition(values, (k, k + 1))
    lower, upper = float(part[k]), float(part[k + 1])
    return lower + (upper - lower) * 0.5


@dataclass
class GroupStats:
    """Per group of Columns: how many rows, their median and their MAD."""

    count: np.ndarray
    median: np.ndarray
    mad: np.ndarray


def group_stats(columns: Columns) -> GroupStats:
    """Median and MAD (median of absolute deviations from the median) of each group. The
    rows are ordered by group once (a radix sort where there are at most 65,536 groups),
    then each group's median is a partition, O(n), of its slice."""
    size = len(columns.groups)
    group = columns.group
    count = np.bincount(group, minlength=size)
    order = np.argsort(group.astype(np.uint16) if size <= 2**16 else group, kind="stable")
    ordered = columns.value[order]
    del order
    bounds = np.concatenate(([0], np.cumsum(count)))
    median = np.full(size, math.nan)
    mad = np.full(size, math.nan)
    for g in range(size):
        values = ordered[bounds[g] : bounds[g + 1]]
        if len(values):
            median[g] = m = _median(values)
            mad[g] = _median(np.abs(values - m))
    return GroupStats(count, median, mad)


@dataclass
class OddRows:
    """The rows of Columns far from their group: indices, and each one's figures."""

    rows: np.ndarray
    median: np.ndarray
    mad: np.ndarray
    z: np.ndarray


def robust_outliers(
    columns: Columns, stats: GroupStats, threshold: float, skip: np.ndarray | None = None
) -> OddRows:
    """Rows far from the median of their group (model, reading, position): robust z
    beyond `threshold`, or, where the MAD is 0, any value off the median by more than 1%
    (or off 0); only in groups of at least MIN_COMPARABLE rows. `skip`: per reading id,
    True where the reading is judged otherwise (counters, by rate)."""
    median = stats.median[columns.group]
    dev = columns.value - median
    off = np.abs(dev) > np.abs(median) * 0.01  # most rows are not: look at the others only
    off &= stats.count[columns.group] >= MIN_COMPARABLE
    if skip is not None and skip.any():
        off &= ~skip[columns.reading_id]
    rows = np.flatnonzero(off)
    del off
    dev, median = dev[rows], median[rows]
    mad = stats.mad[columns.group[rows]]
    scale = mad * MAD_SCALE
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(scale > 0, dev / scale, np.where(dev > 0, math.inf, -math.inf))
    far = np.abs(z) > threshold
    return OddRows(rows[far], median[far], mad[far], z[far])


def _outliers(columns: Columns, odd: OddRows, fleet: Fleet, names: TableNames) -> list[Outlier]:
    out = []
    for i, row in enumerate(odd.rows.tolist()):
        reading_id = int(columns.reading_id[row])
        out.append(
            Outlier(
                reading=names.readings.items[reading_id],
                node=fleet.current[int(columns.node_id[row])].host,
                device=names.devices.items[int(columns.device_id[row])],
                value=float(columns.value[row]),
                unit=names.units.get(reading_id, ""),
                median=float(odd.median[i]),
                mad=float(odd.mad[i]),
                z=float(odd.z[i]),
                model=names.models.items[int(columns.model_of[columns.node_id[row]])],
            )
        )
    return out


@dataclass
class CounterOdd:
    """A counter (errors since boot or over a part's life) of one unit improbable
    against the fleet's rate: `p` is its tail probability under the rate fitted on the
    other units of its group, times the number of units compared (at most 1)."""

    reading: str
    node: str
    device: str
    value: float
    unit: str
    rate: float  # the other units' mean count
    p: float
    model: str


def _tail(count: float, mean: float, var: float) -> float:
    """P(X >= count) for X negative binomial with this mean and variance (a Poisson
    where the variance is not above the mean), summed in log space up to MAX_COUNT."""
    c = int(min(math.ceil(count), MAX_COUNT))
    k = np.arange(c - 1, dtype=np.float64)
    if var > mean:
        r = mean * mean / (var - mean)
        q = r / (r + mean)
        first = r * math.log(q)
        steps = np.log((k + r) / (k + 1)) + math.log1p(-q)
    else:
        first = -mean
        steps = np.log(mean / (k + 1))
    log_pmf = np.concatenate(([first], first + np.cumsum(steps)))
    return float(max(0.0, 1.0 - np.exp(log_pmf).sum()))


@dataclass
class CounterRows:
    """The counters of (a part of) the long table with a count, and their groups' sums:
    rows (reading id, node, device, count, slot), per group (reading id) the units, their
    counts' total and sum of squares, and how many units are in groups with any count."""

    rows: list[tuple[int, int, int, float, int]]
    n: dict[int, float]
    total: dict[int, float]
    squares: dict[int, float]
    family: float


def counter_rows(columns: Columns, names: TableNames) -> CounterRows:
    """The counters of `columns` with a count, and the sums odd_counters needs of their
    groups: a counter's group is its reading over the fleet, so that parts of the table
    holding whole readings give the whole table's sums."""
    kinds = names.kind_array()
    # per reading id, then per row (a comparison of objects per row took 0.1 s a million)
    counter = (kinds == Kind.COUNTER.value)[columns.reading_id] if len(kinds) else None
    if counter is None or not counter.any():
        return CounterRows([], {}, {}, {}, 0.0)
    rows = np.flatnonzero(counter & (columns.value > 0))
    if not len(rows):
        return CounterRows([], {}, {}, {}, 0.0)
    # a counter's rate is the GPU's (or NVLink's, or node's) whatever the node type: one
    # group per reading over the fleet, so that six VMs are not judged on their own 48 GPUs
    group_of = columns.reading_id
    groups = np.unique(group_of[rows])
    in_groups = np.flatnonzero(counter & np.isin(group_of, groups))
    size = len(names.readings.items)
    n = np.bincount(group_of[in_groups], minlength=size).astype(np.float64)
    values = columns.value[in_groups]
    total = np.bincount(group_of[in_groups], weights=values, minlength=size)
    squares = np.bincount(group_of[in_groups], weights=values * values, minlength=size)
    found = [
        (int(group_of[row]), int(columns.node_id[row]), int(columns.device_id[row]),
         float(columns.value[row]), int(columns.slot[row]))
        for row in rows.tolist()
    ]  # fmt: skip
    wanted = groups.tolist()
    return CounterRows(
        found,
        {g: float(n[g]) for g in wanted},
        {g: float(total[g]) for g in wanted},
        {g: float(squares[g]) for g in wanted},
        float(n[groups].sum()),
    )


def odd_counters(
    columns: Columns, fleet: Fleet, names: TableNames, alpha: float = COUNTER_ALPHA
) -> list[CounterOdd]:
    """Counters improbable against their reading's rate over the fleet (GPUs pooled):
    each non-zero count above the other units' mean gets the tail probability of a
    negative binomial fitted by moments on the other units (leave one out, so that the
    unit tested does not widen its own yardstick; a Poisson where the counts are not
    overdispersed; a rate of at least one count in the group's units where the others
    have none), times the number of units in groups with any count (Bonferroni)."""
    return judge_counters([counter_rows(columns, names)], fleet, names, alpha)


def judge_counters(
    parts: list[CounterRows], fleet: Fleet, names: TableNames, alpha: float = COUNTER_ALPHA
) -> list[CounterOdd]:
    """odd_counters of the parts of a table (each holding whole readings), in the whole
    table's row order (a layout's nodes, then their slots)."""
    family = sum(part.family for part in parts)  # whole numbers: the same in any order
    rank: dict[int, int] = {}
    for run in fleet.current:
        rank.setdefault(run.layout, len(rank))
    layout_of = [rank[run.layout] for run in fleet.current]
    rows = sorted(
        ((row, part) for part in parts for row in part.rows),
        key=lambda item: (layout_of[item[0][1]], item[0][1], item[0][4]),
    )
    found: list[CounterOdd] = []
    tails: dict[tuple[int, float], tuple[float, float]] = {}
    for (g, node, device, c, _), part in rows:
        others = part.n[g] - 1
        if others < MIN_COMPARABLE - 1:
            continue
        if (g, c) not in tails:
            mean = (part.total[g] - c) / others
            var = (part.squares[g] - c * c) / others - mean * mean
            rate = max(mean, 1.0 / others)
            p = _tail(c, rate, var) if c > rate else 1.0
            tails[(g, c)] = (mean, min(1.0, p * family))
        mean, p = tails[(g, c)]
        if p < alpha:
            found.append(
                CounterOdd(
                    reading=names.readings.items[g],
                    node=fleet.current[node].host,
                    device=names.devices.items[device],
                    value=c,
                    unit=names.units.get(g, ""),
                    rate=mean,
                    p=p,
                    model=fleet.model(fleet.current[node].config),
                )
            )
    return found
