"""Which factor explains a gap across the fleet: for each kernel metric and type of node,
the share of the variance of the nodes' figures (log scale, each node the median of its
GPUs, latest run) that each configuration factor explains (eta squared of a one-way
analysis of variance), with the effect of each of its levels against the most common one
and its 95% interval (Welch, gpudiag/stats.py). The factors are the configuration readings
rules/explanations.toml ties to the metric (driver, VBIOS, power limit, clocks, PCIe link,
NUMA layout, CPU governor, ...), a per-GPU reading taken as the node's set of values.
Factors that split the nodes identically are confounded: the data cannot tell them apart,
and they are said so, listed together.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from gpudiag import stats
from gpudiag.fleet.changes import History, RunPoint, _usable, metric_title
from gpudiag.fleet.table import template
from gpudiag.hostfs import natural_key

MAX_FACTORS = 5  # per metric and type of node, the largest shares


@dataclass(frozen=True)
class Level:
    """One value of a factor: its nodes, and their figure against the reference level's
    in percent with its 95% interval (none for a single node)."""

    value: str
    nodes: int
    pct: float
    low: float | None
    high: float | None


@dataclass(frozen=True)
class Factor:
    """A configuration factor of one metric on one type of node."""

    metric: str
    model: str
    reading: str  # a template: nvml.driver_version, gpu.{gpu}.power.limit
    share: float  # of the variance of the nodes' log figures, 0-1
    reference: str  # the most common level
    levels: tuple[Level, ...]  # the others
    confounded: tuple[str, ...] = ()  # factors that split the nodes the same way

    def line(self) -> str:
        """The factor in words: what it explains is the spread of the nodes' figures, each
        node the median of its devices (a GPU far off moves its node's median little)."""
        parts = []
        for lv in self.levels:
            interval = f" [{lv.low:+.1f}, {lv.high:+.1f}]" if lv.low is not None else ""
            count = f"{lv.nodes} node{'s' if lv.nodes != 1 else ''}"
            parts.append(f"{lv.value} vs {self.reference}: {lv.pct:+.1f}%{interval} ({count})")
        same = f"; confounded with {', '.join(self.confounded)}" if self.confounded else ""
        return (
            f"{metric_title(self.metric)} ({self.model}): {self.reading} explains "
            f"{100 * self.share:.0f}% of the variance of the nodes' medians of their "
            f"{devices_of(self.metric)}; {'; '.join(parts)}{same}"
        )


def devices_of(metric: str) -> str:
    """What a node's figure of a metric template is the median of."""
    if metric.startswith("numa."):
        return "NUMA nodes"
    if metric.startswith("topo."):
        return "GPU pairs"
    return "GPUs" if metric.startswith("gpu.") else "devices"


def _levels(config: dict[str, str]) -> dict[str, str]:
    """A configuration's level of each reading template: its values, sorted and joined
    (one pass over the configuration, asked of once per configuration dict)."""
    values: dict[str, set[str]] = defaultdict(set)
    for k, v in config.items():
        values[template(k)[0]].add(v)
    return {reading: ", ".join(sorted(found)) for reading, found in values.items()}


def factors(history: History) -> list[Factor]:
    """Each metric's factors on each type of node, largest share first (MAX_FACTORS a
    metric and type), those with two levels or more."""
    from gpudiag.diff import load_explanations

    explanations = load_explanations()
    by_model: dict[str, list[str]] = defaultdict(list)
    for node in history.nodes:
        by_model[history.models.get(node, "")].append(node)
    out = []
    index: dict[int, dict[str, str]] = {}
    latest: dict[str, dict[str, float]] = {}  # node -> its latest run's figure per metric

    def _medians(node: str) -> dict[str, float]:
        return _node_figures(history.nodes[node][-1])

    for model, nodes in sorted(by_model.items()):
        names = sorted({template(k)[0] for n in nodes for k in history.nodes[n][-1].values})
        for name in names:
            kernel, device = history.names.get(name, ("", ""))
            patterns = [
                p
                for e in explanations
                if e.metric.search(kernel) and e.device.search(device)
                for p in e.readings
            ]
            figures = {
                n: math.log(medians[name])
                for n in nodes
                if name in (medians := latest.get(n) or latest.setdefault(n, _medians(n)))
            }
            if len(figures) < 3 or not patterns:
                continue
            configs = {id(c): c for n in figures if (c := history.nodes[n][-1].config)}
            keys = {k for c in configs.values() for k in c}  # nodes share their dicts
            readings = sorted(
                {template(k)[0] for k in keys if any(p.search(k) for p in patterns)},
                key=natural_key,
            )
            out.extend(_factors(history, name, model, figures, readings, index))
    return out


def _node_figures(run: RunPoint) -> dict[str, float]:
    """A run's figure per metric template (the median of its GPUs' usable figures, as
    changes._node_series gives it): one pass over its figures for all templates, not one
    a template (100,000 nodes: 0.3 s a template)."""
    by_name: dict[str, list[float]] = defaultdict(list)
    for key, value in run.values.items():
        if _usable(value):
            by_name[template(key)[0]].append(value)
    out = {}
    for name, values in by_name.items():
        values.sort()
        half = len(values) // 2
        out[name] = values[half] if len(values) % 2 else (values[half - 1] + values[half]) / 2
    return out


def _factors(
    history: History,
    name: str,
    model: str,
    figures: dict[str, float],
    readings: list[str],
    index: dict[int, dict[str, str]],
) -> list[Factor]:
    """`index`: each configuration dict's levels (`_levels`) by its id, filled as asked
    (the dicts live in `history` as long as the index)."""
    mean = sum(figures.values()) / len(figures)
    total = sum((v - mean) ** 2 for v in figures.values())
    found = []
    splits: dict[frozenset[frozenset[str]], list[str]] = defaultdict(list)
    groups_of: dict[str, dict[str, list[str]]] = {}
    configs: dict[int, dict[str, str]] = {}  # each node's configuration's levels
    node_levels = []
    for node in figures:
        config = history.nodes[node][-1].config
        level_of = index.get(id(config))  # by configuration dict: alike nodes share one
        if level_of is None:
            level_of = index[id(config)] = _levels(config)
        configs[id(level_of)] = level_of
        node_levels.append((node, id(level_of)))
    for reading in readings:
        level = {at: levels.get(reading) or "-" for at, levels in configs.items()}
        groups: dict[str, list[str]] = defaultdict(list)
        for node, at in node_levels:  # in the figures' order, as the sums below add
            groups[level[at]].append(node)
        if len(groups) < 2:
            continue
        groups_of[reading] = groups
        splits[frozenset(frozenset(g) for g in groups.values())].append(reading)
    for reading, groups in groups_of.items():
        between = sum(
            len(g) * (sum(figures[n] for n in g) / len(g) - mean) ** 2 for g in groups.values()
        )
        share = between / total if total > 0 else 0.0
        reference = max(groups, key=lambda v: (len(groups[v]), v))
        ref = [math.exp(figures[n]) for n in groups[reference]]
        levels = []
        for value, members in sorted(groups.items(), key=lambda item: -len(item[1])):
            if value == reference:
                continue
            these = [math.exp(figures[n]) for n in members]
            if len(these) >= 2 and len(ref) >= 2:
                s = stats.shift(ref, these)
                levels.append(Level(value, len(these), s.pct, s.low, s.high))
            else:
                pct = 100.0 * (sum(these) / len(these) / (sum(ref) / len(ref)) - 1.0)
                levels.append(Level(value, len(these), pct, None, None))
        split = frozenset(frozenset(g) for g in groups.values())
        others = tuple(r for r in splits[split] if r != reading)
        found.append(Factor(name, model, reading, share, reference, tuple(levels), others))
    found.sort(key=lambda f: (-f.share, f.reading))
    return found[:MAX_FACTORS]
