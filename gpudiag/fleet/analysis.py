"""`gpudiag fleet PATH...`: what needs a person across N nodes, and why the slow ones are slow.

One snapshot is one node at one moment; a node is its host name (or, in redacted
snapshots, its placeholder); several snapshots of one node are its history, and its
latest is the node. Nodes are compared only with nodes of their type: GPU model and
count, virtual machine or bare metal (Fleet.model). Each reading is compared by its kind,
declared with the reading in the catalog (gpudiag/catalog.py's Kind):

- measurements and configuration numbers: against the median and MAD of alike units,
  robust z beyond the threshold, or any value more than 1% off where the MAD is 0
  (outliers.py); positional readings (a GPU's NUMA node) per position, never pooled;
- counters: by rate, a negative-binomial tail against the fleet's rate with the number
  of units corrected for; the ordinary few are left alone (outliers.py);
- configuration: nodes whose configuration readings are all equal form a group, each
  node set folded by ClusterShell's NodeSet, with what differs from the largest group;
- kernel figures: per GPU as measurements, and per node as nodes (whyslow.py): each
  node's median of its GPUs, with an interval from its GPUs, against alike nodes; nodes
  more than `slow_pct` percent short are the ranked slowest nodes.

The report has, headline first: the verdict (exit 1 when something needs a person, 3
when only input was bad, 0 otherwise, saying both); why slow (the slowest nodes, and for
each kernel metric with slow GPUs the configuration readings rules/explanations.toml
says can move it, ranked by F1 of separating the slow units); configuration groups;
outliers and counters beyond the fleet's rate; history (changes.py: roll-outs, change
points of each node's metrics, the two latest runs against the fleet's drift, --compare's
A/B verdicts; history.py: metrics that got slower between runs of a node, counters that
rose); findings per rule, those on some
nodes of a type only needing a person.

The numeric data is one long table (node, model, reading, device, value) held as NumPy
columns (table.py): statistics are group-wise medians over it, and `--parquet FILE`
writes it (with each node's configuration group) through Polars for pandas, DuckDB or a
dashboard (parquet.py). Polars is imported only then. The report's text, markdown and
JSON are report.py's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpudiag.catalog import Kind
from gpudiag.diff import higher_is_better
from gpudiag.fleet.changes import (
    DEFAULT_SLOWER,
    MIN_RUNS,
    HistoryReport,
    history_of,
    history_report,
)
from gpudiag.fleet.factors import factors
from gpudiag.fleet.history import Regression, RisingCounter, regressions, rising_counters
from gpudiag.fleet.outliers import (
    MAD_SCALE,
    CounterOdd,
    CounterRows,
    GroupStats,
    OddRows,
    Outlier,
    _median,
    _outliers,
    counter_rows,
    group_stats,
    judge_counters,
    robust_outliers,
)
from gpudiag.fleet.rack import Rack, rack_identity_only, rack_view
from gpudiag.fleet.records import LoadedFleet
from gpudiag.fleet.table import (
    DEVICE_ID,
    MIN_COMPARABLE,
    NO_SLOT,
    Columns,
    Fleet,
    Names,
    TableNames,
    fold,
    numeric_columns,
    numeric_table,
    template,
)
from gpudiag.fleet.whyslow import (
    DEFAULT_SLOW_PCT,
    Cause,
    SlowMetric,
    SlowNode,
    _unit_counts,
    explain_slow,
    explained_units,
    slow_nodes,
)
from gpudiag.hostfs import natural_key

if TYPE_CHECKING:
    import polars as pl

__all__ = [
    "DEVICE_ID",
    "MAD_SCALE",
    "MIN_COMPARABLE",
    "NO_SLOT",
    "Cause",
    "Columns",
    "ConfigGroup",
    "CounterOdd",
    "Fleet",
    "FleetFinding",
    "FleetReport",
    "GroupStats",
    "Names",
    "OddRows",
    "Outlier",
    "Regression",
    "RisingCounter",
    "SlowMetric",
    "SlowNode",
    "TableNames",
    "_median",
    "analyse",
    "config_groups",
    "explain_slow",
    "fleet_findings",
    "fold",
    "group_stats",
    "numeric_columns",
    "numeric_table",
    "regressions",
    "rising_counters",
    "robust_outliers",
    "template",
]

EXIT_SAME, EXIT_ODD, EXIT_BAD_INPUT = 0, 1, 3
DEFAULT_THRESHOLD = 5.0


# ------------------------------------------------------------------ results


@dataclass
class ConfigGroup:
    """Nodes with identical configuration readings."""

    nodes: list[str]
    model: str
    differences: list[tuple[str, str, str]] = field(default_factory=list)  # key, ref, this

    @property
    def folded(self) -> str:
        return fold(self.nodes)


@dataclass
class FleetFinding:
    """A rule that fired on some nodes of the fleet."""

    rule_id: str
    severity: str
    nodes: list[str]


@dataclass
class FleetReport:
    """Everything `gpudiag fleet` reports."""

    nodes: int
    snapshots: int
    bad: list[str]
    slow: list[SlowMetric]
    groups: list[ConfigGroup]
    outliers: list[Outlier]
    regressions: list[Regression]
    findings: list[FleetFinding]
    threshold: float
    rising: list[RisingCounter] = field(default_factory=list)
    slow_nodes: list[SlowNode] = field(default_factory=list)
    counters: list[CounterOdd] = field(default_factory=list)
    slow_pct: float = DEFAULT_SLOW_PCT
    node_models: dict[str, str] = field(default_factory=dict)  # node -> its type
    columns: Columns | None = None
    names: TableNames | None = None
    node_names: list[str] = field(default_factory=list)
    racks: list[Rack] = field(default_factory=list)  # NVLink domains (gpudiag/fleet/rack.py)
    history: HistoryReport | None = None
    _table: pl.DataFrame | None = field(default=None, repr=False, compare=False)

    @property
    def table(self) -> pl.DataFrame | None:
        """The long numeric table as a Polars frame (node_id, reading_id, device_id,
        value, model_id, config, slot), built when first asked for."""
        if self._table is None and self.columns is not None:
            self._table = self.columns.frame()
        return self._table

    def partial_findings(self) -> list[FleetFinding]:
        """Findings (warning or worse) on some nodes of a type only, with those nodes:
        on every node of a type (model and count, virtual or not) they say something
        about the site's setup of that type, not about a node."""
        types: dict[str, int] = defaultdict(int)
        for model in self.node_models.values():
            types[model] += 1
        out = []
        for f in self.findings:
            if f.severity not in ("critical", "warning"):
                continue
            if not self.node_models:  # a report made without the nodes' types
                if len(f.nodes) < self.nodes:
                    out.append(f)
                continue
            if len(f.nodes) == len(self.node_models) and self.node_models.keys() == set(f.nodes):
                continue  # on every node, so on every node of each type (no loop a node)
            on: dict[str, list[str]] = defaultdict(list)
            for node in f.nodes:
                on[self.node_models.get(node, "")].append(node)
            nodes = [n for model, ns in on.items() if len(ns) < types.get(model, 0) for n in ns]
            if nodes:
                out.append(FleetFinding(f.rule_id, f.severity, nodes))
        return out

    def uncompared(self) -> dict[str, list[str]]:
        """Per type (model and count), its nodes where fewer than MIN_COMPARABLE are of
        that type: no node of them is judged against alike nodes (a node's median of its
        GPUs, a reading's robust z need at least that many to say what is usual)."""
        of: dict[str, list[str]] = defaultdict(list)
        for node, model in self.node_models.items():
            of[model].append(node)
        return {
            model: sorted(nodes, key=natural_key)
            for model, nodes in sorted(of.items())
            if len(nodes) < MIN_COMPARABLE
        }

    def uncompared_text(self) -> str:
        """The nodes `uncompared` gives, as one phrase; empty where there are none."""
        few = self.uncompared()
        if not few:
            return ""
        which = "; ".join(f"{fold(nodes)} ({model})" for model, nodes in few.items())
        return f"too few alike nodes to compare (fewer than {MIN_COMPARABLE} of a type): {which}"

    def odd_nodes(self) -> list[str]:
        """Every node the report lists anywhere as odd (a node needing a person): outliers,
        slow nodes, counters beyond the fleet's rate, configuration groups other than the
        largest of their model, regressions, rising counters, findings on some nodes."""
        odd = {o.node for o in self.outliers}
        odd |= {n.node for n in self.slow_nodes}
        odd |= {c.node for c in self.counters}
        odd |= {r.node for r in self.regressions} | {c.node for c in self.rising}
        if self.history is not None:
            odd |= self.history.nodes()
        largest: set[str] = set()
        for g in self.groups:
            if g.model not in largest:
                largest.add(g.model)
            elif not rack_identity_only(g.differences):  # another rack is not odd
                odd.update(g.nodes)
        for f in self.partial_findings():
            odd.update(f.nodes)
        for rack in self.racks:  # trays whose clique, cluster or links differ
            odd.update(rack.disagree)
        return sorted(odd, key=natural_key)

    def everywhere(self) -> list[FleetFinding]:
        """Findings (warning or worse) on every node of their type: no node differs from
        alike nodes by them (partial_findings has the others), but each says something a
        person must look at, critical first."""
        partial = {(f.rule_id, f.severity) for f in self.partial_findings()}
        return [
            f
            for f in self.findings
            if f.severity in ("critical", "warning") and (f.rule_id, f.severity) not in partial
        ]

    @property
    def odd(self) -> bool:
        """Whether anything needs a person: a node listed as odd anywhere."""
        return bool(self.odd_nodes())

    def exit_code(self) -> int:
        """1 something needs a person (whatever else): a node listed as odd; 3 nothing
        does but some input was bad, 0 neither: a healthy fleet of realistic spread exits
        0. Findings on every node of a type (everywhere) leave it as it is: they are the
        type's way at this site, which the fleet does not judge (`gpudiag check` of any
        of those nodes exits by them); the verdict names them."""
        if self.odd:
            return EXIT_ODD
        return EXIT_BAD_INPUT if self.bad else EXIT_SAME

    def verdict(self) -> str:
        """One line: what the exit code says, and both where both hold."""
        nodes = self.odd_nodes()
        parts = []
        if nodes:
            parts.append(
                f"needs a person: {len(nodes)} node{'s' if len(nodes) != 1 else ''} ({fold(nodes)})"
            )
        if self.bad:
            parts.append(
                f"bad input: {len(self.bad)} file{'s' if len(self.bad) != 1 else ''} "
                "could not be read"
            )
        everywhere = self.everywhere()
        few = self.uncompared_text() if not nodes else ""
        if few:
            parts.append(f"no node found to differ, but {few}")
        elif not nodes and everywhere:
            parts.append("no node differs from alike nodes")
        if everywhere and not nodes:  # else the verdict says something needs a person
            rules = ", ".join(f"{f.rule_id} ({f.severity})" for f in everywhere[:4])
            more = f" and {len(everywhere) - 4} more" if len(everywhere) > 4 else ""
            parts.append(f"findings on every node of a type below: {rules}{more}")
        text = "; ".join(parts) or "nothing needs a person"
        return f"exit {self.exit_code()}: {text}"


def config_groups(fleet: Fleet) -> list[ConfigGroup]:
    """Nodes by identical configuration, largest group first, each with what differs
    from the largest group of its model."""
    members: dict[int, list[str]] = defaultdict(list)
    same = _same_configs(fleet)
    for run in fleet.current:
        members[same[run.config]].append(run.host)
    ordered = sorted(members.items(), key=lambda item: (-len(item[1]), natural_key(item[1][0])))
    groups = []
    reference: dict[str, tuple[int, dict[str, str]]] = {}
    layout_of = fleet.loaded.config_layout
    for config, nodes in ordered:
        model = fleet.model(config)
        values = fleet.config_dict(config)
        group = ConfigGroup(nodes, model)
        if model in reference:
            ref_config, ref = reference[model]
            for key in sorted(set(ref) | set(values), key=natural_key):
                if ref.get(key) != values.get(key):
                    group.differences.append((key, ref.get(key, "-"), values.get(key, "-")))
            # a group of the same values is another layout: a reading's status (a GPU
            # lost: gpu.N.health in error), or readings one has and the other lacks
            group.differences[:0] = layout_differences(
                fleet.loaded, layout_of[ref_config], layout_of[config]
            )
        else:
            reference[model] = (config, values)
        groups.append(group)
    return groups


def _same_configs(fleet: Fleet) -> list[int]:
    """Each configuration's first one of the same readings (keys, statuses, units) and
    values in another order: a snapshot the loader upgraded (gpudiag/upgrade.py) holds the
    readings its producer gained after the others, where a current one holds them in the
    producer's order; the two are one configuration, not two groups."""
    loaded = fleet.loaded
    shapes: dict[int, frozenset[tuple[str, str, str]]] = {}
    first: dict[tuple[Any, ...], int] = {}
    out = []
    for config, layout_id in enumerate(loaded.config_layout):
        if layout_id not in shapes:
            layout = loaded.layouts[layout_id]
            shapes[layout_id] = frozenset(
                zip(layout.keys, layout.statuses, layout.units, strict=True)
            )
        values = tuple(sorted(fleet.config_dict(config).items()))
        out.append(first.setdefault((shapes[layout_id], values), config))
    return out


def _status(status: str) -> str:
    return status if status == "ok" else f"[{status}]"


def layout_differences(
    loaded: LoadedFleet, ref_id: int, this_id: int
) -> list[tuple[str, str, str]]:
    """What sets two layouts of one model apart, beside their configuration values: each
    reading (not a configuration one: config_dict shows those) whose status differs, its
    health readings first (a lost GPU is what a person must see); else, the readings one
    has and the other lacks ('-'), else their units. Empty for the same layout."""
    if ref_id == this_id:
        return []
    ref, this = loaded.layouts[ref_id], loaded.layouts[this_id]
    config = {ref.keys[p] for p in ref.config} | {this.keys[p] for p in this.config}
    ref_status = dict(zip(ref.keys, ref.statuses, strict=True))
    this_status = dict(zip(this.keys, this.statuses, strict=True))
    changed = [
        (key, _status(ref_status[key]), _status(status))
        for key, status in this_status.items()
        if key not in config and key in ref_status and ref_status[key] != status
    ]
    if not changed:
        changed = [(k, "-", _status(s)) for k, s in this_status.items() if k not in ref_status]
        changed += [(k, _status(s), "-") for k, s in ref_status.items() if k not in this_status]
    if not changed:
        ref_unit = dict(zip(ref.keys, ref.units, strict=True))
        changed = [
            (k, ref_unit[k] or "-", u or "-")
            for k, u in zip(this.keys, this.units, strict=True)
            if k in ref_unit and ref_unit[k] != u
        ]
    return sorted(changed, key=lambda d: (not d[0].endswith(".health"), natural_key(d[0])))


def fleet_findings(fleet: Fleet) -> list[FleetFinding]:
    """Per rule (and severity), the nodes whose latest snapshot has it, in node order.
    Identical findings tuples (most nodes of a fleet) are looked at once."""
    by_findings: dict[tuple[tuple[str, str, str], ...], list[str]] = defaultdict(list)
    for run in fleet.current:  # already in natural order of host names
        by_findings[run.findings].append(run.host)
    nodes: dict[tuple[str, str], list[list[str]]] = defaultdict(list)
    for findings, hosts in by_findings.items():
        for rule in dict.fromkeys((rule_id, severity) for rule_id, severity, _ in findings):
            nodes[rule].append(hosts)
    order = {run.host: i for i, run in enumerate(fleet.current)}
    rank = {"critical": 0, "warning": 1, "unknown": 2, "info": 3}
    return [
        FleetFinding(
            rule_id,
            severity,
            lists[0] if len(lists) == 1 else sorted((h for hs in lists for h in hs), key=order.get),
        )
        for (rule_id, severity), lists in sorted(
            nodes.items(), key=lambda item: (rank.get(item[0][1], 4), item[0][0])
        )
    ]


def analyse(
    loaded: LoadedFleet,
    threshold: float = DEFAULT_THRESHOLD,
    slow_pct: float = DEFAULT_SLOW_PCT,
    slower_pct: float = DEFAULT_SLOWER,
    compare: tuple[str, str, str] | None = None,
    margin: float = 0.01,
    chunks: Callable[[Fleet, TableNames], Iterable[Columns]] | None = None,
) -> FleetReport:
    """The fleet report of loaded snapshots: each kind of reading by its comparison
    (counters by rate, positional readings per position, the rest by robust z), nodes
    slower than `slow_pct` percent as nodes. The statistics are NumPy over the long
    table's columns; Polars is imported only where the table is asked for as a frame
    (FleetReport.table: --parquet, other tools).

    `chunks`: the long table a part at a time, each part whole reading templates and all
    counters in one (a dataset's report, bounded in memory: fleet/dataset_scan.py); the
    report is the same, without the table (FleetReport.columns is None)."""
    fleet = Fleet(loaded)
    names = TableNames()
    ids = {run.host: i for i, run in enumerate(fleet.current)}
    kernel_names: dict[str, tuple[str, str]] = {}
    for run in fleet.current:
        for kv in run.kernel_values:
            kernel_names.setdefault(template(kv.key)[0], (kv.name, kv.device))
    columns = None
    if chunks is None:
        columns = numeric_columns(fleet, names)
        parts = [_judged(columns, fleet, names, threshold, slow_pct, kernel_names, ids)]
    else:
        parts = [
            _judged(part, fleet, names, threshold, slow_pct, kernel_names, ids)
            for part in chunks(fleet, names)
        ]
    outliers = sorted(
        (o for part in parts for o in part.outliers),
        key=lambda o: (-abs(o.z), o.reading, natural_key(o.node), natural_key(o.device)),
    )
    return FleetReport(
        nodes=len(fleet.current),
        snapshots=len(loaded.runs),
        bad=list(loaded.bad),
        slow=sorted((m for part in parts for m in part.slow), key=lambda m: (m.model, m.metric)),
        groups=config_groups(fleet),
        outliers=outliers,
        regressions=regressions(fleet, slower_pct, MIN_RUNS),
        rising=rising_counters(fleet),
        findings=fleet_findings(fleet),
        threshold=threshold,
        slow_nodes=sorted(
            (n for part in parts for n in part.slow_nodes),
            key=lambda s: (-s.shortfall, s.metric, natural_key(s.node)),
        ),
        counters=judge_counters([part.counters for part in parts], fleet, names),
        slow_pct=slow_pct,
        node_models={run.host: fleet.model(run.config) for run in fleet.current},
        columns=columns,
        names=names,
        node_names=[run.host for run in fleet.current],
        racks=rack_view(fleet),
        history=_history(fleet, slower_pct, compare, margin),
    )


@dataclass
class _Judged:
    """What the long table (or a part of it holding whole reading templates) says."""

    outliers: list[Outlier]
    slow: list[SlowMetric]
    slow_nodes: list[SlowNode]
    counters: CounterRows


def _judged(
    columns: Columns,
    fleet: Fleet,
    names: TableNames,
    threshold: float,
    slow_pct: float,
    kernel_names: dict[str, tuple[str, str]],
    ids: dict[str, int],
) -> _Judged:
    """Outliers, slow kernel metrics and nodes, and counters beyond the fleet's rate, of
    `columns` (the whole table, or whole reading templates of it with every counter)."""
    kinds = names.kind_array()
    skip = kinds == Kind.COUNTER.value if len(kinds) else None
    odd = robust_outliers(columns, group_stats(columns), threshold, skip)
    outliers = sorted(
        _outliers(columns, odd, fleet, names),
        key=lambda o: (-abs(o.z), o.reading, natural_key(o.node), natural_key(o.device)),
    )
    slow_metrics = []
    slow_rows = [
        o for o in outliers if o.reading in kernel_names and (o.z < 0) == higher_is_better(o.unit)
    ]
    by_metric: dict[tuple[str, str], list[Outlier]] = defaultdict(list)
    for o in slow_rows:
        by_metric[(o.model, o.reading)].append(o)
    explained = explained_units(fleet) if by_metric else None
    unit_of, units = explained if explained else (None, None)
    for (model, reading), slow in sorted(by_metric.items()):
        name, device = kernel_names[reading]
        model_id, reading_id = names.models.ids[model], names.readings.ids[reading]
        gids = [g for g, (m, r, _) in enumerate(columns.groups) if (m, r) == (model_id, reading_id)]
        counts, comparable = _unit_counts(columns, gids, slow, ids, names, unit_of)
        slow_metrics.append(
            SlowMetric(
                reading,
                model,
                slow[0].unit,
                slow[0].median,
                sorted(slow, key=lambda o: (natural_key(o.node), o.device)),
                comparable,
                explain_slow(fleet, counts, name, device, units),
            )
        )
    return _Judged(
        outliers,
        slow_metrics,
        slow_nodes(columns, fleet, names, slow_pct),
        counter_rows(columns, names),
    )


def _history(
    fleet: Fleet, slower_pct: float, compare: tuple[str, str, str] | None, margin: float
) -> HistoryReport:
    """The history part of the report, with the factors of each metric's gaps."""
    history = history_of(fleet)
    out = history_report(history, slower_pct, compare, margin)
    out.factors = factors(history)
    return out
