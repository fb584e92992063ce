"""Did it get slower, and since when: change points in each node's history of each kernel
metric (Apache Otava's E-Divisive means with a Student's t test, gpudiag/fleet/otava),
roll-outs (one change at one run on many nodes, with the configuration readings that
changed there), and two runs of a fleet (each node's change against all nodes' changes,
with a minimum effect and the false discovery rate controlled over every test).

The history is a plain structure (History: node -> its runs, each run its time, its
configuration readings and its kernel figures) made from the snapshots and Parquet the
fleet reads (`history_of`), or by a generator (benchmarks/change_errors.py). Every
figure is compared on the log scale: changes are percentages of the earlier value, and a
change is "slower" by the metric's unit (GB/s lower, microseconds higher).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

from gpudiag import stats
from gpudiag.diff import higher_is_better
from gpudiag.fleet.table import fold, template
from gpudiag.hostfs import natural_key

if TYPE_CHECKING:
    from gpudiag.fleet.table import Fleet

MIN_RUNS = 8  # runs of a node before its history is searched for change points
MAX_PVALUE = 0.001  # Otava's default significance
DEFAULT_SLOWER = 2.0  # percent: the smallest change the fleet reports (--slower)
FDR_Q = 0.05
# Nodes with two runs before the latest two runs are compared with the fleet's: the MAD
# of fewer changes is too loose a scale (its relative standard error is over a third).
MIN_NODES = 10
MAD_SCALE = 1.4826


@dataclass(frozen=True)
class RunPoint:
    """One run of one node: when, its configuration readings (displayed) and its kernel
    figures (key -> the trials' median)."""

    created: str
    config: dict[str, str]
    values: dict[str, float]


@dataclass
class History:
    """Each node's runs in time order, and each kernel figure's unit."""

    nodes: dict[str, list[RunPoint]] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)  # node -> its type (Fleet.model)
    names: dict[str, tuple[str, str]] = field(default_factory=dict)  # template -> kernel, device

    def better_higher(self, key: str) -> bool:
        return higher_is_better(self.units.get(key, "GB/s"))


def history_of(fleet: Fleet) -> History:
    """The fleet's history: every node's snapshots, oldest first."""
    out = History()
    configs: dict[int, dict[str, str]] = {}
    for host, runs in fleet.history.items():
        points = []
        for run in runs:
            if run.config not in configs:
                configs[run.config] = fleet.config_dict(run.config)
            values = {}
            for kv in run.kernel_values:
                values[kv.key] = kv.value
                out.units.setdefault(kv.key, kv.unit)
                out.names.setdefault(template(kv.key)[0], (kv.name, kv.device))
            points.append(RunPoint(run.created, configs[run.config], values))
        out.nodes[host] = points
        out.models[host] = fleet.model(runs[-1].config)
    return out


def _usable(value: float) -> bool:
    """A figure that has a logarithm: positive and finite (a file may hold 1e999)."""
    return 0 < value < math.inf


def _node_series(runs: list[RunPoint], name: str) -> list[float] | None:
    """A metric template's node figure per run (the median of its GPUs), or None where a
    run lacks it."""
    out = []
    for run in runs:
        vals = sorted(v for k, v in run.values.items() if template(k)[0] == name and _usable(v))
        if not vals:
            return None
        half = len(vals) // 2
        out.append(vals[half] if len(vals) % 2 else (vals[half - 1] + vals[half]) / 2)
    return out


def changed_readings(before: RunPoint, after: RunPoint) -> list[tuple[str, str, str]]:
    """The configuration readings that differ between two runs: (key, before, after)."""
    keys = sorted(set(before.config) | set(after.config), key=natural_key)
    return [
        (k, before.config.get(k, "-"), after.config.get(k, "-"))
        for k in keys
        if before.config.get(k) != after.config.get(k)
    ]


@dataclass(frozen=True)
class Change:
    """A change point: from run `run` (1-based) on, `metric` (a key, or a template for a
    node's figure) moved by pct percent [low, high] (95%), with what changed there."""

    node: str
    metric: str
    device: str  # 'GPU 3', or '' for the node's figure (the median of its GPUs)
    run: int
    created: str
    pct: float
    low: float
    high: float
    p: float
    slower: bool
    changed: tuple[tuple[str, str, str], ...] = ()

    def line(self) -> str:
        where = f"{self.device} " if self.device else ""
        after = ", ".join(f"{k} {a} -> {b}" for k, a, b in self.changed)
        return (
            f"{self.node} {where}{self.metric} {self.pct:+.1f}% [{self.low:+.1f}, "
            f"{self.high:+.1f}] ({'slower' if self.slower else 'faster'}) since run "
            f"{self.run}, {self.created[:10]}" + (f", after {after}" if after else "")
        )


def change_points(
    series: Sequence[float], min_pct: float = DEFAULT_SLOWER, max_pvalue: float = MAX_PVALUE
) -> list[tuple[int, stats.Shift]]:
    """Otava's change points of a series of positive figures, each as (index of the first
    run after it, the shift between the segments either side with its interval). A
    change point that leaves one run alone between two others (one odd run) is not a
    change; nor is one whose 95% interval holds 0 or stays short of min_pct (the minimum
    effect is the interval's: a 2% change measured as 1.8% [0.9, 2.7] is kept)."""
    from gpudiag.fleet.otava.analysis import compute_change_points

    logs = [math.log(v) for v in series]
    found, _ = compute_change_points(logs, window_len=50, max_pvalue=max_pvalue)
    cuts = [0, *sorted(int(c.index) for c in found), len(logs)]
    out = []
    for i in range(1, len(cuts) - 1):
        before, after = series[cuts[i - 1] : cuts[i]], series[cuts[i] : cuts[i + 1]]
        if len(before) < 2 or len(after) < 2:
            continue  # one run apart from its neighbours: an odd run, not a change
        s = stats.shift(before, after)
        if (s.low > 0 or s.high < 0) and max(abs(s.low), abs(s.high)) >= min_pct:
            out.append((cuts[i], s))
    return out


def node_changes(
    history: History,
    min_pct: float = DEFAULT_SLOWER,
    min_runs: int = MIN_RUNS,
    max_pvalue: float = MAX_PVALUE,
) -> list[Change]:
    """Change points of every node with at least `min_runs` runs: of each metric as the
    node's figure (the median of its GPUs), and of each GPU's figure where the GPU moved
    apart from its node's (a change of one GPU only)."""
    out = []
    for node, runs in history.nodes.items():
        if len(runs) < min_runs:
            continue
        keys = sorted({k for run in runs for k in run.values}, key=natural_key)
        names = sorted({template(k)[0] for k in keys})
        node_series = {name: _node_series(runs, name) for name in names}
        for name in names:
            series = node_series[name]
            if series is None:
                continue
            better = history.better_higher(next(k for k in keys if template(k)[0] == name))
            for index, s in change_points(series, min_pct, max_pvalue):
                out.append(_change(node, name, "", runs, index, s, better))
        for key in keys:
            name, device = template(key)
            if not device:
                continue
            own = [run.values.get(key) for run in runs]
            base = node_series.get(name)
            if base is None or not all(v is not None and _usable(v) for v in own):
                continue
            relative = [v / b for v, b in zip(own, base, strict=True)]  # type: ignore[operator]
            better = history.better_higher(key)
            for index, s in change_points(relative, min_pct, max_pvalue):
                out.append(_change(node, name, device, runs, index, s, better))
    return out


def _change(
    node: str,
    name: str,
    device: str,
    runs: list[RunPoint],
    index: int,
    s: stats.Shift,
    better: bool,
) -> Change:
    return Change(
        node,
        name,
        device,
        index + 1,
        runs[index].created,
        s.pct,
        s.low,
        s.high,
        s.p,
        (s.pct < 0) == better,
        tuple(changed_readings(runs[index - 1], runs[index])),
    )


@dataclass(frozen=True)
class RollOut:
    """One change at one run on several nodes: a roll-out (a driver, a BIOS setting)."""

    metric: str
    run: int
    created: str
    nodes: tuple[str, ...]
    changed: tuple[tuple[str, str, str], ...]
    pct: float
    low: float
    high: float
    slower: bool

    def line(self) -> str:
        after = ", ".join(f"{k} {a} -> {b}" for k, a, b in self.changed) or "no reading changed"
        return (
            f"{self.metric} {self.pct:+.1f}% [{self.low:+.1f}, {self.high:+.1f}] "
            f"({'slower' if self.slower else 'faster'}) from run {self.run}, "
            f"{self.created[:10]}, on {len(self.nodes)} nodes ({fold(list(self.nodes))}), "
            f"after {after}"
        )


def roll_outs(changes: list[Change], min_nodes: int = 2) -> list[RollOut]:
    """Node-figure changes grouped by metric, run and the readings that changed there:
    each group of `min_nodes` or more is a roll-out, its effect the mean of its nodes'
    changes with a t interval over the nodes."""
    groups: dict[tuple[str, int, tuple[tuple[str, str, str], ...], bool], list[Change]]
    groups = defaultdict(list)
    for c in changes:
        if not c.device:
            groups[(c.metric, c.run, c.changed, c.slower)].append(c)
    out = []
    for (metric, run, changed, slower), members in groups.items():
        if len(members) < min_nodes:
            continue
        logs = [math.log1p(c.pct / 100.0) for c in members]
        mean = sum(logs) / len(logs)
        sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / (len(logs) - 1))
        half = stats.t_quantile(0.975, len(logs) - 1) * sd / math.sqrt(len(logs))
        nodes = tuple(sorted((c.node for c in members), key=natural_key))
        pct = [100.0 * math.expm1(x) for x in (mean, mean - half, mean + half)]
        out.append(RollOut(metric, run, members[0].created, nodes, changed, *pct, slower))
    return sorted(out, key=lambda r: (-len(r.nodes), r.run, r.metric))


def config_roll_outs(
    history: History, min_pct: float = DEFAULT_SLOWER, min_nodes: int = 2
) -> list[RollOut]:
    """Roll-outs by what changed: nodes whose configuration readings changed alike
    (driver 570.86 -> 575.57) form a group of alike nodes; each metric's node figures,
    each node's relative to its own runs before the change and aligned at it, averaged
    over the group, are searched for change points (Otava); a change point at the
    alignment is the roll-out's, its effect the mean of the nodes' changes (after against
    before) with a t interval over the nodes."""
    events: dict[tuple[tuple[str, str, str], ...], list[tuple[str, int]]] = defaultdict(list)
    for node, runs in history.nodes.items():
        for i in range(1, len(runs)):
            changed = tuple(changed_readings(runs[i - 1], runs[i]))
            if changed:
                events[changed].append((node, i))
    out = []
    for changed, members in events.items():
        if len(members) < min_nodes:
            continue
        names = sorted(
            {template(k)[0] for node, _ in members for k in history.nodes[node][0].values}
        )
        for name in names:
            rows: list[tuple[str, int, list[float]]] = []
            for node, i in members:
                series = _node_series(history.nodes[node], name)
                if series is None or i < 2 or len(series) - i < 2:
                    continue
                logs = [math.log(v) for v in series]
                rows.append((node, i, logs))
            if len(rows) < min_nodes:
                continue
            before = min(i for _, i, _ in rows)
            after = min(len(logs) - i for _, i, logs in rows)
            aligned = []
            for k in range(-before, after):
                column = [logs[i + k] - sum(logs[:i]) / i for _, i, logs in rows]
                aligned.append(math.exp(sum(column) / len(column)))
            if not any(index == before for index, _ in change_points(aligned, 0.0)):
                continue
            diffs = [sum(lg[i:]) / (len(lg) - i) - sum(lg[:i]) / i for _, i, lg in rows]
            mean = sum(diffs) / len(diffs)
            sd = math.sqrt(sum((x - mean) ** 2 for x in diffs) / (len(diffs) - 1))
            half = stats.t_quantile(0.975, len(diffs) - 1) * sd / math.sqrt(len(diffs))
            pct = [100.0 * math.expm1(x) for x in (mean, mean - half, mean + half)]
            if abs(pct[0]) < min_pct:
                continue
            runs_at = [i for _, i, _ in rows]
            run = max(set(runs_at), key=runs_at.count)
            node0 = next(node for node, i, _ in rows if i == run)
            key = next(k for k in history.nodes[node0][0].values if template(k)[0] == name)
            out.append(
                RollOut(
                    name,
                    run + 1,
                    history.nodes[node0][run].created,
                    tuple(sorted((node for node, _, _ in rows), key=natural_key)),
                    changed,
                    *pct,
                    (mean < 0) == history.better_higher(key),
                )
            )
    return sorted(out, key=lambda r: (-len(r.nodes), r.run, r.metric))


# ------------------------------------------------------------------ two runs of a fleet


@dataclass(frozen=True)
class Drift:
    """The fleet's change of one metric between two runs: the median of its nodes'
    changes, with the order-statistic 95% interval of a median."""

    metric: str
    pct: float
    low: float
    high: float
    nodes: int
    slower: bool

    def line(self) -> str:
        word = "slower" if self.slower else "faster"
        return (
            f"{self.metric}: the later run is {abs(self.pct):.1f}% [{self.low:+.1f}, "
            f"{self.high:+.1f}] {word} fleet-wide ({self.nodes} nodes)"
        )


@dataclass(frozen=True)
class NodeShift:
    """A node (device '') or one GPU that changed between two runs beyond the fleet's
    drift by at least the minimum effect, a discovery at the false discovery rate."""

    node: str
    metric: str
    device: str
    pct: float  # beyond the fleet's drift (a GPU's: beyond its node's)
    low: float
    high: float
    p: float
    slower: bool

    def line(self) -> str:
        where = f"{self.device} " if self.device else ""
        beyond = "its node" if self.device else "the fleet"
        return (
            f"{self.node} {where}{self.metric} {self.pct:+.1f}% [{self.low:+.1f}, "
            f"{self.high:+.1f}] beyond {beyond} ({'slower' if self.slower else 'faster'})"
        )


@dataclass
class RunComparison:
    """Two runs of a fleet: each metric's drift, the nodes and GPUs beyond it, and how
    many tests the false discovery rate was controlled over."""

    drifts: list[Drift]
    shifts: list[NodeShift]
    tests: int
    slower_pct: float


def _median(values: list[float]) -> float:
    s = sorted(values)
    half = len(s) // 2
    return s[half] if len(s) % 2 else (s[half - 1] + s[half]) / 2


def _median_interval(values: list[float]) -> tuple[float, float]:
    """The distribution-free 95% interval of a median: order statistics n/2 -+ 0.98 sqrt(n)."""
    s = sorted(values)
    n = len(s)
    k = math.floor(n / 2 - 0.98 * math.sqrt(n))
    return s[max(k, 0)], s[min(n - 1 - max(k, 0), n - 1)]


def compare_runs(
    history: History,
    slower_pct: float = DEFAULT_SLOWER,
    q: float = FDR_Q,
    before: int = -2,
    after: int = -1,
) -> RunComparison:
    """Each node's latest run against its one before (or runs `before` and `after`):
    per metric, each node's change (the median of its GPUs' log ratios) against all
    nodes' (robust z from the median and MAD), and each GPU's change beyond its node's
    against all GPUs'; Benjamini-Hochberg over every test; a node or GPU is reported
    when discovered and at least `slower_pct` percent beyond, slower or faster."""
    normal = NormalDist()
    node_logs: dict[str, dict[str, float]] = defaultdict(dict)  # metric -> node -> log
    gpu_logs: dict[str, dict[tuple[str, str], float]] = defaultdict(dict)
    spreads: dict[tuple[str, str], float] = {}  # (metric, node) -> sd of its GPUs' logs
    better: dict[str, bool] = {}
    for node, runs in history.nodes.items():
        if len(runs) < 2:
            continue
        a, b = runs[before], runs[after]
        per: dict[str, list[tuple[str, float]]] = defaultdict(list)
        for key, vb in b.values.items():
            va = a.values.get(key)
            if va is None or not _usable(va) or not _usable(vb):
                continue
            name, device = template(key)
            per[name].append((device, math.log(vb / va)))
            better.setdefault(name, history.better_higher(key))
        for name, items in per.items():
            centre = _median([x for _, x in items])
            node_logs[name][node] = centre
            if len(items) > 1:
                mean = sum(x for _, x in items) / len(items)
                spreads[(name, node)] = math.sqrt(
                    sum((x - mean) ** 2 for _, x in items) / (len(items) - 1) / len(items)
                )
            for device, x in items:
                if device and len(items) > 2:
                    gpu_logs[name][(node, device)] = x - centre
    drifts = []
    # (node, device) -> metric -> (change beyond the fleet or node, its robust z, its se)
    units: dict[tuple[str, str], dict[str, tuple[float, float, float]]] = defaultdict(dict)
    for name, per_node in sorted(node_logs.items()):
        values = list(per_node.values())
        if len(values) < 3:
            continue
        centre = _median(values)
        low, high = _median_interval(values)
        pct = [100.0 * math.expm1(x) for x in (centre, low, high)]
        drifts.append(Drift(name, *pct, len(values), (centre < 0) == better[name]))
        scale = MAD_SCALE * _median([abs(v - centre) for v in values])
        for node, v in per_node.items():
            z = (v - centre) / scale if scale else (0.0 if v == centre else math.inf)
            units[(node, "")][name] = (v - centre, z, spreads.get((name, node), 0.0))
        residuals = gpu_logs.get(name, {})
        if len(residuals) >= 3:
            gscale = MAD_SCALE * _median([abs(v) for v in residuals.values()])
            for (node, device), v in residuals.items():
                z = v / gscale if gscale else (0.0 if v == 0 else math.inf)
                units[(node, device)][name] = (v, z, gscale)
    # one test per node (and per GPU): the mean of its metrics' robust z, itself judged
    # against every node's (every GPU's) mean, so that metrics that move together are
    # not counted twice
    tests = list(units.items())
    combined = [sum(z for _, z, _ in m.values()) / len(m) for _, m in tests]
    pvalues = [1.0] * len(tests)
    for family in ("", "gpu"):
        members = [i for i, (u, _) in enumerate(tests) if bool(u[1]) == bool(family)]
        finite = [combined[i] for i in members if math.isfinite(combined[i])]
        if len(finite) < 3:
            continue
        centre = _median(finite)
        scale = MAD_SCALE * _median([abs(v - centre) for v in finite])
        for i in members:
            v = combined[i]
            z = (v - centre) / scale if scale and math.isfinite(v) else math.inf
            pvalues[i] = 2.0 * (1.0 - normal.cdf(abs(z))) if math.isfinite(z) else 0.0
    found = stats.fdr(pvalues, q)
    shifts = []
    limit = math.log1p(slower_pct / 100.0)
    for ((node, device), metrics), p, hit in zip(tests, pvalues, found, strict=True):
        if not hit:
            continue
        for name, (d, _, se) in metrics.items():
            if abs(d) < limit:
                continue
            half = 1.96 * se
            pct = [100.0 * math.expm1(x) for x in (d, d - half, d + half)]
            shifts.append(NodeShift(node, name, device, *pct, p, (d < 0) == better[name]))
    shifts.sort(key=lambda s: (not s.slower, -abs(s.pct), natural_key(s.node), s.device))
    return RunComparison(drifts, shifts, len(tests), slower_pct)


# ------------------------------------------------------------------ A/B between groups


def metric_title(name: str) -> str:
    """A metric template as people read it: gpu.{gpu}.kernel.stream.triad.fp64 ->
    stream.triad.fp64, numa.{node}.kernel.stream.triad.fp64 -> cpu stream.triad.fp64."""
    head, sep, tail = name.partition(".kernel.")
    if not sep:
        return name
    return f"cpu {tail}" if head.startswith("numa") else tail


def _one_gpu(key: str, name: str) -> str | None:
    """The GPU index a --compare KEY names (gpu.0.power.limit: '0') where the metric
    template `name` is per GPU; else None."""
    head, _, rest = key.partition(".")
    index = rest.partition(".")[0]
    if head == "gpu" and index.isdigit() and name.startswith("gpu.{gpu}."):
        return index
    return None


def compared_figure(key: str, name: str) -> str:
    """What --compare KEY takes of each node for metric template `name`, as the report
    says it."""
    gpu = _one_gpu(key, name)
    if gpu is not None:
        return f"each node's GPU {gpu}, the GPU {key} is of"
    device = "GPUs" if name.startswith("gpu.") else "devices"
    return f"each node's median of its {device}"


def compare_groups(
    history: History, key: str, a: str, b: str, margin: float = stats.MARGIN
) -> list[tuple[str, int, int, stats.Verdict | None]]:
    """`--compare KEY=A,B`: nodes whose latest run reads A for the configuration reading
    KEY against those reading B (a value matches its display or the display's first
    word), per metric: each node's figure (compared_figure: the median of its GPUs, or
    where KEY is one GPU's, that GPU's figure) as one run of its side, Pinpoint's
    three-way verdict (stats.ab_verdict). (metric, nodes A, nodes B, verdict or None
    where a side has fewer than two nodes)."""
    sides: dict[str, list[str]] = {a: [], b: []}
    for node, runs in history.nodes.items():
        value = runs[-1].config.get(key)
        if value is None:
            continue
        for side in (a, b):
            if value == side or value.split(" ")[0] == side:
                sides[side].append(node)
    names = sorted({template(k)[0] for runs in history.nodes.values() for k in runs[-1].values})
    out = []
    for name in names:
        figures = {}
        gpu = _one_gpu(key, name)
        for side, nodes in sides.items():
            if gpu is not None:  # the factor's GPU on each node, not the node's median
                one = name.replace("{gpu}", gpu)
                figures[side] = [
                    v
                    for node in nodes
                    if (v := history.nodes[node][-1].values.get(one)) is not None and _usable(v)
                ]
                continue
            figures[side] = [
                s[-1]
                for node in nodes
                if (s := _node_series(history.nodes[node][-1:], name)) is not None
            ]
        key_of = next(k for runs in history.nodes.values() for k in runs[-1].values
                      if template(k)[0] == name)  # fmt: skip
        verdict = None
        if len(figures[a]) >= 2 and len(figures[b]) >= 2:
            verdict = stats.ab_verdict(
                figures[a], figures[b], history.better_higher(key_of), margin=margin
            )
        out.append((name, len(figures[a]), len(figures[b]), verdict))
    return out


@dataclass(frozen=True)
class Chart:
    """One metric's history as drawn: a node's figure per run (or the median of a group's
    nodes', or of the whole fleet's), with the runs where a change starts (0-based)."""

    metric: str
    label: str
    values: tuple[float, ...]
    marks: tuple[int, ...] = ()


MAX_CHARTS = 24


def charts(history: History, rolled: list[RollOut], changes: list[Change]) -> list[Chart]:
    """Each metric's fleet median per run (nodes with the most runs), each roll-out's
    nodes' median, and each node with a change point of its own (MAX_CHARTS at most)."""
    longest = max((len(r) for r in history.nodes.values()), default=0)
    if longest < 2:
        return []
    full = [n for n, runs in history.nodes.items() if len(runs) == longest]
    names = sorted({template(k)[0] for n in full for k in history.nodes[n][-1].values})

    def median_of(nodes: list[str] | tuple[str, ...], name: str) -> tuple[float, ...]:
        per = [s for n in nodes if (s := _node_series(history.nodes[n], name)) is not None]
        per = [s for s in per if len(s) == longest]
        return tuple(_median([s[i] for s in per]) for i in range(longest)) if per else ()

    out = []
    for name in names:
        values = median_of(full, name)
        if values:  # one node with the longest history is that node, not the fleet
            label = f"fleet ({len(full)} nodes)" if len(full) > 1 else full[0]
            out.append(Chart(name, label, values))
        for r in rolled:
            if r.metric == name and (values := median_of(r.nodes, name)):
                label = f"{fold(list(r.nodes))} ({len(r.nodes)} nodes)"
                out.append(Chart(name, label, values, (r.run - 1,)))
        marks: dict[str, list[int]] = defaultdict(list)
        for c in changes:
            if c.metric == name and not c.device:
                marks[c.node].append(c.run - 1)
        for node, at in sorted(marks.items(), key=lambda item: natural_key(item[0])):
            series = _node_series(history.nodes[node], name)
            if series is not None:
                out.append(Chart(name, node, tuple(series), tuple(sorted(at))))
    return out[:MAX_CHARTS]


@dataclass
class HistoryReport:
    """What the fleet report says of its history: roll-outs, each node's other change
    points, the two latest runs compared, and the A/B verdicts asked for."""

    roll_outs: list[RollOut]
    changes: list[Change]
    runs: RunComparison | None
    compare: list[tuple[str, int, int, stats.Verdict | None]] = field(default_factory=list)
    compare_what: str = ""
    charts: list[Chart] = field(default_factory=list)
    factors: list[Any] = field(default_factory=list)  # factors.py's Factor

    def nodes(self) -> set[str]:
        """Nodes the history says need a person: slower in a roll-out, a change point or
        beyond the fleet's drift."""
        out = {n for r in self.roll_outs if r.slower for n in r.nodes}
        out |= {c.node for c in self.changes if c.slower}
        if self.runs:
            out |= {s.node for s in self.runs.shifts if s.slower}
        return out


def history_report(
    history: History,
    slower_pct: float = DEFAULT_SLOWER,
    compare: tuple[str, str, str] | None = None,
    margin: float = stats.MARGIN,
) -> HistoryReport:
    """The fleet's history: roll-outs by configuration change, then the change points of
    nodes with MIN_RUNS runs that no roll-out explains, then the latest two runs of every
    node with two compared (when any has), then `--compare`'s verdicts."""
    rolled = config_roll_outs(history, slower_pct)
    explained = {(n, r.metric) for r in rolled for n in r.nodes}
    changes = [
        c
        for c in node_changes(history, slower_pct)
        if c.device or (c.node, c.metric) not in explained
    ]
    rolled += [r for r in roll_outs(changes, 3) if not r.changed]
    in_groups = {(n, r.metric, r.run) for r in rolled for n in r.nodes}
    changes = [c for c in changes if (c.node, c.metric, c.run) not in in_groups]
    changes.sort(key=lambda c: (not c.slower, -abs(c.pct), natural_key(c.node), c.device))
    runs = None
    if sum(len(r) >= 2 for r in history.nodes.values()) >= MIN_NODES:
        runs = compare_runs(history, slower_pct)
    verdicts = compare_groups(history, *compare, margin=margin) if compare else []
    what = f"{compare[0]}={compare[1]},{compare[2]}" if compare else ""
    drawn = charts(history, rolled, changes)
    return HistoryReport(rolled, changes, runs, verdicts, what, drawn)
