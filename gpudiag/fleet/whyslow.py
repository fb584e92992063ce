"""Why the slow ones are slow, and which nodes are slow as nodes: the configuration
readings that separate slow units from the others (explain_slow), and each node's
aggregate of its GPUs against alike nodes (slow_nodes)."""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpudiag.diff import higher_is_better, load_explanations
from gpudiag.fleet.outliers import Outlier, _median
from gpudiag.fleet.table import (
    MIN_COMPARABLE,
    NO_SLOT,
    Columns,
    Fleet,
    TableNames,
    _display,
    template,
)
from gpudiag.hostfs import natural_key

# A node is slow where its aggregate (the median of its GPUs) falls short of the alike
# nodes' median by more than this many percent (`gpudiag fleet --slow PCT`). 7%: healthy
# H100 fleets spread node to node by about 2% in kernel figures and GPU to GPU by 1.5%
# (issue 38's figures, which tests/fleetgen.py's operator fleet draws), so a healthy node's
# aggregate spreads by about 2.1% and 7% is 3.3 of those (a healthy node listed about once
# in 2,000 per metric: at most 1% of a fleet, and exit 0 on 1,000 healthy nodes), while a
# node that loses 8% on every GPU (its median of 8 GPUs spreading 0.6%) is past 7% about
# nine times in ten per metric, and with two metrics nearly always.
DEFAULT_SLOW_PCT = 7.0
INTERVAL_COVERAGE = 0.9  # the node interval: order statistics of its GPUs covering this


@dataclass
class Cause:
    """A configuration reading that separates slow units from the others."""

    reading: str
    f1: float
    slow_values: list[tuple[str, int]]
    other_values: list[tuple[str, int]]


@dataclass
class SlowMetric:
    """A kernel metric with slow outliers, and the readings that explain them."""

    metric: str
    model: str
    unit: str
    median: float
    slow: list[Outlier]
    comparable: int
    causes: list[Cause]


def _candidate_key(candidate: str, device: str) -> str:
    """A candidate reading template for one unit's device (GPU 3, GPU 0-1)."""
    numbers = re.findall(r"\d+", device)
    key = candidate
    if "{gpu}" in key:
        if not numbers:
            return ""
        key = key.replace("{gpu}", numbers[0])
    if "{peer}" in key:
        if len(numbers) < 2:
            return ""
        key = key.replace("{peer}", numbers[1])
    return key


def explained_units(fleet: Fleet) -> tuple[np.ndarray, list[tuple[int, int]]] | None:
    """Per node of fleet.current, the id of its configuration with the values of the
    volatile readings that may explain it (NodeRun.explain: the throttle reasons); each
    id's (configuration, a node of it). None where no node holds such values (a fleet
    read from Parquet or a dataset, which keep configuration values only)."""
    if not any(run.explain for run in fleet.current):
        return None
    ids: dict[tuple[int, tuple[Any, ...]], int] = {}
    units: list[tuple[int, int]] = []
    of = []
    for i, run in enumerate(fleet.current):
        unit = ids.setdefault((run.config, run.explain), len(units))
        if unit == len(units):
            units.append((run.config, i))
        of.append(unit)
    return np.asarray(of, dtype=np.int64), units


_NOT_KEPT = ("", "", "")  # a volatile value its source did not keep (Parquet, a dataset)


def _volatile_value(fleet: Fleet, node: int, key: str) -> tuple[Any, str, str] | None:
    """(value, unit, status) of a volatile explaining reading of a node (NodeRun.explain);
    _NOT_KEPT where its layout has the reading but the run came without its values (read
    from Parquet or a dataset beside snapshots of the same layout)."""
    run = fleet.current[node]
    layout = fleet.loaded.layouts[run.layout]
    position = fleet.positions[run.layout].get(key)
    if position is None or position not in layout.explain:
        return None
    if len(run.explain) != len(layout.explain):
        return _NOT_KEPT
    value = run.explain[layout.explain.index(position)]
    return value, layout.units[position], layout.statuses[position]


def explain_slow(
    fleet: Fleet,
    counts: Counter[tuple[int, str, bool]],
    name: str,
    kernel_device: str,
    units: list[tuple[int, int]] | None = None,
) -> list[Cause]:
    """The readings that separate slow units (node, device) from the others, among those
    the explanations say can move metric `name` on `kernel_device`, best first: the
    configuration readings, and, with `units`, the volatile ones each node holds
    (explained_units: they may explain a slow node, never group nodes; as `gpudiag diff`
    takes them). `counts`: how many units have each (configuration, or with `units` the
    id of a configuration and volatile values; device, slow); units with one of those
    and one device behave alike, so they are counted together."""
    explanations = [
        e for e in load_explanations() if e.metric.search(name) and e.device.search(kernel_device)
    ]
    if not explanations:
        return []
    patterns = [p for e in explanations for p in e.readings]
    candidates: set[str] = set()
    for unit in {c for c, _, _ in counts}:
        config = units[unit][0] if units else unit
        layout = fleet.loaded.layouts[fleet.loaded.config_layout[config]]  # the run's too
        for p in (*layout.config, *(layout.explain if units else ())):
            key = layout.keys[p]
            if any(pattern.search(key) for pattern in patterns):
                candidates.add(template(key)[0])
    causes = []
    for candidate in sorted(candidates):
        tally: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # value -> [slow, other]
        for (config, device, slow), n in counts.items():
            key = _candidate_key(candidate, device)
            found = fleet.config_value(units[config][0] if units else config, key) if key else None
            if found is None and key and units:
                found = _volatile_value(fleet, units[config][1], key)
                if found is _NOT_KEPT:
                    continue  # not known, so neither slow nor usual by this reading
            shown = _display(*found) if found else "-"
            tally[shown][0 if slow else 1] += n
        # the fast majority's value: most other units, then fewest slow ones, then by
        # name (the tally's order is the group_by's, which varies run to run)
        usual = min(tally.items(), key=lambda item: (-item[1][1], item[1][0], item[0]))[0]
        tp = sum(s for v, (s, _) in tally.items() if v != usual)
        fp = sum(o for v, (_, o) in tally.items() if v != usual)
        fn = tally[usual][0]
        if tp == 0:
            continue
        f1 = 2 * tp / (2 * tp + fp + fn)
        causes.append(
            Cause(
                candidate,
                f1,
                sorted(((v, s) for v, (s, _) in tally.items() if s), key=lambda x: (-x[1], x[0])),
                sorted(((v, o) for v, (_, o) in tally.items() if o), key=lambda x: (-x[1], x[0])),
            )
        )
    causes.sort(key=lambda c: (-c.f1, c.reading))
    return causes


def _unit_counts(
    columns: Columns,
    gids: list[int],
    slow: list[Outlier],
    ids: dict[str, int],
    names: TableNames,
    unit_of: np.ndarray | None = None,
) -> tuple[Counter[tuple[int, str, bool]], int]:
    """How many units (node, device) of some groups have each (configuration, device,
    slow), and how many units there are. `unit_of`: per node, what to count by instead
    of its configuration (explained_units)."""
    rows = np.flatnonzero(np.isin(columns.group, np.asarray(gids, dtype=np.uint32)))
    node = columns.node_id[rows].astype(np.int64)
    device = columns.device_id[rows].astype(np.int64)
    marked = np.asarray(
        [(ids[o.node] << 32) | names.devices.ids[o.device] for o in slow], dtype=np.int64
    )
    flags = np.isin((node << 32) | device, marked).astype(np.int64)
    per_node = columns.config_of if unit_of is None else unit_of
    keys = np.stack([per_node[node].astype(np.int64), device, flags], axis=1)
    found, numbers = np.unique(keys, axis=0, return_counts=True)
    counts: Counter[tuple[int, str, bool]] = Counter(
        {
            (config, names.devices.items[device_id], bool(flag)): n
            for (config, device_id, flag), n in zip(found.tolist(), numbers.tolist(), strict=True)
        }
    )
    return counts, len(rows)


@dataclass
class SlowNode:
    """A node whose aggregate of a kernel metric (the median of its GPUs) falls short of
    alike nodes' by more than the slow threshold; `low`-`high` is the interval of its
    median from its GPUs (order statistics, INTERVAL_COVERAGE), `shortfall` the share
    below the alike nodes' median (above it, for a figure better lower), with the
    shortfall at the interval's ends."""

    node: str
    metric: str
    model: str
    unit: str
    value: float
    low: float
    high: float
    reference: float
    shortfall: float
    shortfall_low: float
    shortfall_high: float
    gpus: int
    comparable: int


def median_interval(values: np.ndarray) -> tuple[float, float]:
    """The distribution-free interval of a median from n values: the k-th smallest and
    k-th largest, with the largest k whose coverage 1 - 2 P(Binomial(n, 1/2) < k) is at
    least INTERVAL_COVERAGE (n = 8: the 2nd and 7th, 93%); the extremes where n is small."""
    ordered = np.sort(values)
    n = len(ordered)
    k = _interval_rank(n)[0]
    return float(ordered[k - 1]), float(ordered[n - k])


def _interval_rank(n: int) -> tuple[int, float]:
    """median_interval's k for n values, and the interval's coverage."""
    k, below = 1, 1.0 / 2**n  # below: P(B <= k - 1) for the next k
    while k + 1 <= n // 2:
        if 1 - 2 * (below + math.comb(n, k) / 2**n) < INTERVAL_COVERAGE:
            break
        below += math.comb(n, k) / 2**n
        k += 1
    return k, max(0.0, 1 - 2 * below)


def interval_coverage(n: int) -> float:
    """How often median_interval of n values holds their distribution's median (n = 8:
    0.93); what the report prints beside it."""
    return _interval_rank(n)[1]


def slow_nodes(
    columns: Columns, fleet: Fleet, names: TableNames, slow_pct: float = DEFAULT_SLOW_PCT
) -> list[SlowNode]:
    """Nodes judged as nodes: per kernel metric of GPUs and per model, each node's median
    of its GPUs against the median of those aggregates over alike nodes (at least
    MIN_COMPARABLE); the nodes short by more than `slow_pct` percent, slowest first."""
    rows = np.flatnonzero(columns.slot == NO_SLOT)
    gpu_device = np.asarray(
        [d.startswith("GPU ") and " - " not in d for d in names.devices.items], dtype=bool
    )
    rows = rows[gpu_device[columns.device_id[rows]]] if len(rows) else rows
    if not len(rows):
        return []
    model = columns.model_of[columns.node_id[rows]].astype(np.int64)
    reading = columns.reading_id[rows].astype(np.int64)
    node = columns.node_id[rows].astype(np.int64)
    order = np.lexsort((node, reading, model))
    rows, model, reading, node = rows[order], model[order], reading[order], node[order]
    keys = np.stack([model, reading, node], axis=1)
    starts = np.flatnonzero(np.any(np.diff(keys, axis=0) != 0, axis=1)) + 1
    bounds = np.concatenate(([0], starts, [len(rows)]))
    aggregates: dict[tuple[int, int], list[tuple[int, float, float, float, int]]] = {}
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        values = columns.value[rows[a:b]]
        low, high = median_interval(values)
        aggregates.setdefault((int(model[a]), int(reading[a])), []).append(
            (int(node[a]), _median(values), low, high, b - a)
        )
    found = []
    for (model_id, reading_id), per_node in aggregates.items():
        if len(per_node) < MIN_COMPARABLE:
            continue
        reference = _median(np.asarray([v for _, v, _, _, _ in per_node]))
        if not reference:
            continue
        unit = names.units.get(reading_id, "")
        sign = 1.0 if higher_is_better(unit) else -1.0
        for node_id, value, low, high, gpus in per_node:
            shortfall = sign * (reference - value) / abs(reference)
            if shortfall * 100 <= slow_pct:
                continue
            ends = sorted(sign * (reference - v) / abs(reference) for v in (low, high))
            found.append(
                SlowNode(
                    node=fleet.current[node_id].host,
                    metric=names.readings.items[reading_id],
                    model=names.models.items[model_id],
                    unit=unit,
                    value=value,
                    low=low,
                    high=high,
                    reference=reference,
                    shortfall=shortfall,
                    shortfall_low=ends[0],
                    shortfall_high=ends[1],
                    gpus=gpus,
                    comparable=len(per_node),
                )
            )
    found.sort(key=lambda s: (-s.shortfall, s.metric, natural_key(s.node)))
    return found
