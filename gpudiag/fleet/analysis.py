"""`gpudiag fleet PATH...`: what is odd across N nodes, and why the slow ones are slow.

One snapshot is one node at one moment; a node is its host name (or, in redacted
snapshots, its placeholder); several snapshots of one node are its history, and its
latest is the node. The report has, headline first:

- Why slow: for each kernel metric with slow outliers, the configuration readings that
  separate the slow nodes (or GPUs) from the others, among those rules/explanations.toml
  says can move that metric (the diff's explanations, over N nodes instead of two),
  ranked by how well they separate (F1 of "differs from the fast majority's value" as a
  predictor of "slow").
- Configuration groups: nodes whose configuration readings (declared in gpudiag/catalog.py) are
  all equal, each node set folded by ClusterShell's NodeSet, and what differs from the
  largest group.
- Outliers: every numeric reading and kernel figure, per GPU (or NUMA node, GPU pair)
  and per node, against the median and MAD of comparable nodes (same GPU model and GPU
  count): robust z = (value - median) / (1.4826 MAD) beyond the threshold; where the MAD
  is zero (all alike), any value off the median by more than 1%.
- History: a node snapshotted more than once gets each kernel metric compared run to
  run with the diff's interval test (bootstrap ratio of medians, 95% CI excluding 1);
  the first run where it got slower is when the regression started.
- Findings: per rule, how many nodes and which.

The numeric data is one long table (node, model, reading, device, value) held as NumPy
columns: statistics are group-wise medians over it, and `--parquet FILE` writes it (with
each node's configuration group) through Polars for pandas, DuckDB or a dashboard
(parquet.py). Polars is imported only then: a report does not pay for it. The report's
text, markdown and JSON are report.py's.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np
from ClusterShell.NodeSet import NodeSet

from gpudiag import catalog, shipped
from gpudiag.derive import PROFILE_KEY
from gpudiag.diff import (
    bootstrap_ratio,
    higher_is_better,
    kernel_match_key,
    load_explanations,
    verdict,
)
from gpudiag.fleet.rack import Rack, rack_view
from gpudiag.fleet.records import Layout, LoadedFleet, NodeRun
from gpudiag.hostfs import natural_key
from gpudiag.profiles import load_profiles

if TYPE_CHECKING:
    import polars as pl

EXIT_SAME, EXIT_ODD, EXIT_BAD_INPUT = 0, 1, 3
DEFAULT_THRESHOLD = 5.0
MAD_SCALE = 1.4826  # MAD of a normal distribution -> its standard deviation
MIN_COMPARABLE = 3
DEVICE_ID = re.compile(r"^gpu\.\d+\.pci\.device_id$")


_FOLDABLE = re.compile(r"^[A-Za-z0-9._-]+$")


_FOLDED: dict[frozenset[str], str] = {}


def fold(names: list[str] | set[str]) -> str:
    """Node names folded as ClusterShell folds them: node[0001-0016,0018]. Names that are
    not plain host names (ClusterShell would read `,` `[` `@` as its own syntax) are listed
    as they are, comma-separated. Remembered by the set of names: ClusterShell parses each
    name (about 45 us), and a report folds one node set many times (every finding on all
    nodes: 1.1 s of a 1,000-node report)."""
    if not names:
        return ""
    key = frozenset(names)
    found = _FOLDED.get(key)
    if found is None:
        found = _fold(key)
        if len(_FOLDED) < 256:
            _FOLDED[key] = found
    return found


def _fold(names: frozenset[str]) -> str:
    if all(_FOLDABLE.match(name) for name in names):
        return str(NodeSet.fromlist(list(names)))
    return ",".join(sorted(names, key=natural_key))


@functools.lru_cache(maxsize=65536)
def template(key: str) -> tuple[str, str]:
    """A reading key as (template, device), by the catalog's subjects: gpu.3.power.limit ->
    (gpu.{gpu}.power.limit, 'GPU 3'); topo.gpu.0.1.copy_gbs -> (topo.gpu.{gpu}.{peer}.
    copy_gbs, 'GPU 0 - GPU 1'); ib.mlx5_0.1.rate -> (ib.{hca}.{port}.rate, 'IB mlx5_0
    port 1'); node-wide keys -> (key, ''). A GPU's NVLinks stay the GPU's (gpu.{gpu}.
    nvlink.5.state: link 5 of every GPU compared with link 5 of the others)."""
    scope, values = catalog.subject_of_key(key)
    if scope == "node":
        return key, ""
    if scope == "nvlink":
        scope, values = "gpu", {"gpu": values["gpu"]}
    return catalog.stem_template(key, scope, values), catalog.subject_title(scope, values)


def _display(value: Any, unit: str, status: str) -> str:
    if status != "ok":
        return f"[{status}]"
    if isinstance(value, tuple):
        value = ", ".join(map(str, value))
    return f"{value} {unit}".rstrip() if unit else str(value)


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


@dataclass
class Regression:
    """A node's kernel metric that got slower between two of its runs."""

    node: str
    metric: str
    device: str
    unit: str
    started: str
    previous: str
    ratio: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class RisingCounter:
    """A counter since boot (declared in gpudiag/catalog.py) that rose between two
    consecutive snapshots of one node: errors that happened in between."""

    node: str
    reading: str
    before: float
    after: float
    previous: str  # when the earlier snapshot was taken
    seen: str  # when the later one was


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
    columns: Columns | None = None
    names: TableNames | None = None
    node_names: list[str] = field(default_factory=list)
    racks: list[Rack] = field(default_factory=list)  # NVLink domains (gpudiag/fleet/rack.py)
    _table: pl.DataFrame | None = field(default=None, repr=False, compare=False)

    @property
    def table(self) -> pl.DataFrame | None:
        """The long numeric table as a Polars frame (node_id, reading_id, device_id,
        value, model_id, config, slot), built when first asked for."""
        if self._table is None and self.columns is not None:
            self._table = self.columns.frame()
        return self._table

    @property
    def odd(self) -> bool:
        """Whether anything differs: groups, outliers, regressions, findings on some
        nodes only (warning or worse)."""
        partial = any(
            f.severity in ("critical", "warning") and len(f.nodes) < self.nodes
            for f in self.findings
        )
        return bool(
            len(self.groups) > 1
            or self.outliers
            or self.regressions
            or self.rising
            or partial
            or any(r.disagree for r in self.racks)
        )

    def exit_code(self) -> int:
        """0 nothing odd, 1 something odd, 3 nothing odd but some input was bad."""
        if self.odd:
            return EXIT_ODD
        return EXIT_BAD_INPUT if self.bad else EXIT_SAME


# ------------------------------------------------------------------ analysis


class Fleet:
    """The loaded fleet's latest run per node, with per-node model labels and lookups."""

    def __init__(self, loaded: LoadedFleet) -> None:
        self.loaded = loaded
        history: dict[str, list[NodeRun]] = defaultdict(list)
        for run in loaded.runs:
            history[run.host].append(run)
        for runs in history.values():
            runs.sort(key=lambda r: (r.created, r.path))
        self.history = dict(sorted(history.items(), key=lambda item: natural_key(item[0])))
        self.current = [runs[-1] for runs in self.history.values()]
        self.positions = [layout.position() for layout in loaded.layouts]
        self._models: dict[int, str] = {}
        self.profiles = load_profiles()

    def config_value(self, config: int, key: str) -> tuple[Any, str, str] | None:
        """(value, unit, status) of a configuration reading in a configuration tuple."""
        layout_id = self.loaded.config_layout[config]
        layout = self.loaded.layouts[layout_id]
        position = self.positions[layout_id].get(key)
        if position is None:
            return None
        slot = _config_slot(layout).get(position)
        if slot is None:
            return None
        return self.loaded.configs[config][slot], layout.units[position], layout.statuses[position]

    def config_dict(self, config: int) -> dict[str, str]:
        """Every configuration reading of a configuration, displayed."""
        layout = self.loaded.layouts[self.loaded.config_layout[config]]
        values = self.loaded.configs[config]
        return {
            layout.keys[p]: _display(values[i], layout.units[p], layout.statuses[p])
            for i, p in enumerate(layout.config)
        }

    def model(self, config: int) -> str:
        """The node's GPU model (the profile its judgment stored, node.profile; for older
        snapshots the profile its most common PCI device id selects, else that id) and GPU
        count: nodes are compared only with nodes of the same model."""
        if config not in self._models:
            layout = self.loaded.layouts[self.loaded.config_layout[config]]
            gpus = len(catalog.gpu_indices(layout.keys))
            stored = self.config_value(config, PROFILE_KEY)
            if stored is not None and stored[2] == "ok" and gpus:
                self._models[config] = f"{stored[0]} x{gpus}"
                return self._models[config]
            ids = []
            for key in layout.keys:
                if DEVICE_ID.match(key):
                    found = self.config_value(config, key)
                    if found and found[2] == "ok":
                        ids.append(str(found[0]))
            label = "no GPUs"
            if ids:
                common = Counter(ids).most_common(1)[0][0]
                name = next(
                    (p.name for p in self.profiles.values() if common in p.device_ids), common
                )
                label = f"{name} x{gpus}"
            self._models[config] = label
        return self._models[config]


_SLOTS: dict[int, dict[int, int]] = {}


def _config_slot(layout: Layout) -> dict[int, int]:
    """position in the layout -> index in its configuration tuple."""
    slots = _SLOTS.get(id(layout))
    if slots is None:
        slots = {p: i for i, p in enumerate(layout.config)}
        _SLOTS[id(layout)] = slots
    return slots


class Names:
    """Strings held once, numbered: the table stores the numbers (UInt32 columns group,
    join and filter faster than strings, and take 4 bytes a row)."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.ids: dict[str, int] = {}

    def id(self, name: str) -> int:
        """The number of `name`, giving it the next one if new."""
        found = self.ids.get(name)
        if found is None:
            found = self.ids[name] = len(self.items)
            self.items.append(name)
        return found

    def frame(self, column: str) -> pl.DataFrame:
        """id -> name, for turning a column back into strings."""
        import polars as pl

        return pl.DataFrame(
            {f"{column}_id": range(len(self.items)), column: self.items},
            schema={f"{column}_id": pl.UInt32, column: pl.String},
        )


@dataclass
class TableNames:
    """What the numbers in the fleet table stand for."""

    readings: Names = field(default_factory=Names)
    devices: Names = field(default_factory=Names)
    models: Names = field(default_factory=Names)
    units: dict[int, str] = field(default_factory=dict)  # reading id -> unit


NO_SLOT = 2**32 - 1  # a kernel figure's slot: it is not one of the node's numbers


@dataclass
class Columns:
    """The long table of every numeric reading and kernel figure of the latest runs, as
    NumPy columns (one row a number; not-read values left out): node_id (an index into
    fleet.current), reading_id (template) and device_id (numbers in TableNames), value,
    slot (the index in the node's numbers, NO_SLOT for a kernel figure), and group: the
    rows compared with each other, one id per (model, reading, position). model_of and
    config_of are per node."""

    node_id: np.ndarray
    reading_id: np.ndarray
    device_id: np.ndarray
    value: np.ndarray
    slot: np.ndarray
    group: np.ndarray
    groups: list[tuple[int, int, int]]  # group id -> (model_id, reading_id, position)
    model_of: np.ndarray
    config_of: np.ndarray

    def frame(self) -> pl.DataFrame:
        """The table as Polars has it (for --parquet, pandas or DuckDB)."""
        import polars as pl

        return pl.DataFrame(
            {
                "node_id": self.node_id,
                "reading_id": self.reading_id,
                "device_id": self.device_id,
                "value": self.value,
                "model_id": self.model_of[self.node_id],
                "config": self.config_of[self.node_id],
                "slot": self.slot,
            }
        )


def numeric_columns(fleet: Fleet, names: TableNames) -> Columns:
    """The long table (Columns) of the fleet's latest runs. Nodes of one layout are one
    matrix, so a layout's rows are its matrix raveled and its column ids tiled; GPUs of one
    model are pooled (one group a reading template), NUMA nodes are not (a CPU-less memory
    node differs): their position is their device."""
    loaded = fleet.loaded
    model_of = np.asarray(
        [names.models.id(fleet.model(run.config)) for run in fleet.current], dtype=np.uint32
    )
    config_of = np.asarray([run.config for run in fleet.current], dtype=np.uint32)
    group_ids: dict[tuple[int, int, int], int] = {}
    numa: dict[int, bool] = {}

    def position(reading_id: int, device_id: int) -> int:
        if reading_id not in numa:
            numa[reading_id] = names.readings.items[reading_id].startswith("numa.")
        return device_id if numa[reading_id] else 0

    def group_of(model_id: int, reading_id: int, device_id: int) -> int:
        key = (model_id, reading_id, position(reading_id, device_id))
        return group_ids.setdefault(key, len(group_ids))

    by_layout: dict[int, list[int]] = defaultdict(list)
    for i, run in enumerate(fleet.current):
        by_layout[run.layout].append(i)
    parts: list[tuple[np.ndarray, ...]] = []
    for layout_id, members in by_layout.items():
        layout = loaded.layouts[layout_id]
        if not layout.numeric:
            continue
        reading_ids, device_ids = [], []
        for p in layout.numeric:
            name, device = template(layout.keys[p])
            reading_ids.append(names.readings.id(name))
            device_ids.append(names.devices.id(device))
            names.units.setdefault(reading_ids[-1], layout.units[p])
        rows = np.asarray(members, dtype=np.uint32)
        models, model_index = np.unique(model_of[rows], return_inverse=True)
        group_table = np.asarray(
            [
                [group_of(int(m), r, d) for r, d in zip(reading_ids, device_ids, strict=True)]
                for m in models
            ],
            dtype=np.uint32,
        )
        matrix = np.vstack([fleet.current[i].numbers for i in members])
        count, width = matrix.shape
        parts.append(
            (
                np.repeat(rows, width),
                np.tile(np.asarray(reading_ids, dtype=np.uint32), count),
                np.tile(np.asarray(device_ids, dtype=np.uint32), count),
                matrix.ravel(),
                np.tile(np.arange(width, dtype=np.uint32), count),
                group_table[model_index.ravel()].ravel(),
            )
        )
    kernel_rows: tuple[list[int], ...] = ([], [], [], [], [])
    ids: dict[str, tuple[int, int]] = {}
    groups: dict[tuple[int, str], int] = {}  # (model, key) -> group, asked once
    models = model_of.tolist()
    for i, run in enumerate(fleet.current):
        for kv in run.kernel_values:
            found = ids.get(kv.key)
            if found is None:
                name, device = template(kv.key)
                found = ids[kv.key] = (names.readings.id(name), names.devices.id(device))
                names.units.setdefault(found[0], kv.unit)
            group = groups.get((models[i], kv.key))
            if group is None:
                group = groups[(models[i], kv.key)] = group_of(models[i], *found)
            kernel_rows[0].append(i)
            kernel_rows[1].append(found[0])
            kernel_rows[2].append(found[1])
            kernel_rows[3].append(kv.value)  # type: ignore[arg-type]
            kernel_rows[4].append(group)
    parts.append(
        (
            np.asarray(kernel_rows[0], dtype=np.uint32),
            np.asarray(kernel_rows[1], dtype=np.uint32),
            np.asarray(kernel_rows[2], dtype=np.uint32),
            np.asarray(kernel_rows[3], dtype=np.float64),
            np.full(len(kernel_rows[0]), NO_SLOT, dtype=np.uint32),
            np.asarray(kernel_rows[4], dtype=np.uint32),
        )
    )
    node_id, reading_id, device_id, value, slot, group = (
        np.concatenate(c) for c in zip(*parts, strict=True)
    )
    keep = ~np.isnan(value)
    if not keep.all():
        node_id, reading_id, device_id, value, slot, group = (
            c[keep] for c in (node_id, reading_id, device_id, value, slot, group)
        )
    return Columns(
        node_id,
        reading_id,
        device_id,
        value,
        slot,
        group,
        list(group_ids),
        model_of,
        config_of,
    )


def numeric_table(fleet: Fleet, names: TableNames) -> pl.DataFrame:
    """The long table as a Polars frame: node_id, reading_id, device_id, value, model_id,
    config, slot (Columns.frame)."""
    return numeric_columns(fleet, names).frame()


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


def robust_outliers(columns: Columns, stats: GroupStats, threshold: float) -> OddRows:
    """Rows far from the median of their group (model, reading, position): robust z
    beyond `threshold`, or, where the MAD is 0, any value off the median by more than 1%
    (or off 0); only in groups of at least MIN_COMPARABLE rows."""
    median = stats.median[columns.group]
    dev = columns.value - median
    off = np.abs(dev) > np.abs(median) * 0.01  # most rows are not: look at the others only
    off &= stats.count[columns.group] >= MIN_COMPARABLE
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


def explain_slow(
    fleet: Fleet, counts: Counter[tuple[int, str, bool]], name: str, kernel_device: str
) -> list[Cause]:
    """The configuration readings that separate slow units (node, device) from the
    others, among those the explanations say can move metric `name` on `kernel_device`,
    best first. `counts`: how many units have each (configuration, device, slow); units
    with one configuration and device behave alike, so they are counted together."""
    explanations = [
        e for e in load_explanations() if e.metric.search(name) and e.device.search(kernel_device)
    ]
    if not explanations:
        return []
    patterns = [p for e in explanations for p in e.readings]
    candidates: set[str] = set()
    for config in {c for c, _, _ in counts}:
        layout = fleet.loaded.layouts[fleet.loaded.config_layout[config]]
        for p in layout.config:
            key = layout.keys[p]
            if any(pattern.search(key) for pattern in patterns):
                candidates.add(template(key)[0])
    causes = []
    for candidate in sorted(candidates):
        tally: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # value -> [slow, other]
        for (config, device, slow), n in counts.items():
            key = _candidate_key(candidate, device)
            found = fleet.config_value(config, key) if key else None
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


def config_groups(fleet: Fleet) -> list[ConfigGroup]:
    """Nodes by identical configuration, largest group first, each with what differs
    from the largest group of its model."""
    members: dict[int, list[str]] = defaultdict(list)
    for run in fleet.current:
        members[run.config].append(run.host)
    ordered = sorted(members.items(), key=lambda item: (-len(item[1]), natural_key(item[1][0])))
    groups = []
    reference: dict[str, dict[str, str]] = {}
    for config, nodes in ordered:
        model = fleet.model(config)
        values = fleet.config_dict(config)
        group = ConfigGroup(nodes, model)
        if model in reference:
            ref = reference[model]
            for key in sorted(set(ref) | set(values), key=natural_key):
                if ref.get(key) != values.get(key):
                    group.differences.append((key, ref.get(key, "-"), values.get(key, "-")))
        else:
            reference[model] = values
        groups.append(group)
    return groups


def regressions(fleet: Fleet) -> list[Regression]:
    """Kernel metrics that got slower between consecutive runs of a node (the diff's
    interval test); the first such run is when it started."""
    found = []
    for host, runs in fleet.history.items():
        if len(runs) < 2:
            continue
        reported: set[tuple[str, ...]] = set()
        for before, after in pairwise(runs):
            earlier = {kernel_match_key(k): k for k in before.kernels}
            for k in after.kernels:
                key = kernel_match_key(k)
                old = earlier.get(key)
                if key in reported or old is None or len(old.samples) < 2 or len(k.samples) < 2:
                    continue
                try:
                    ratio, low, high = bootstrap_ratio(list(old.samples), list(k.samples))
                except ValueError:
                    continue
                if verdict(low, high, k.unit) == "slower":
                    reported.add(key)
                    dtype = dict(k.params).get("dtype")
                    found.append(
                        Regression(
                            host,
                            f"{k.kernel}.{k.metric}" + (f".{dtype}" if dtype else ""),
                            k.device,
                            k.unit,
                            after.created,
                            before.created,
                            ratio,
                            low,
                            high,
                        )
                    )
    return found


def rising_counters(fleet: Fleet) -> list[RisingCounter]:
    """Counters since boot that rose between consecutive snapshots of a node (a reboot
    between them resets them: a counter that fell is not reported)."""
    counters: dict[int, dict[str, int]] = {}

    def positions(run: NodeRun) -> dict[str, int]:
        if run.layout not in counters:
            layout = fleet.loaded.layouts[run.layout]
            counters[run.layout] = {
                layout.keys[p]: i
                for i, p in enumerate(layout.numeric)
                if shipped.is_counter(layout.keys[p])
            }
        return counters[run.layout]

    found = []
    for host, runs in fleet.history.items():
        for before, after in pairwise(runs):
            earlier = positions(before)
            for key, i in positions(after).items():
                j = earlier.get(key)
                if j is None:
                    continue
                old, new = float(before.numbers[j]), float(after.numbers[i])
                if new > old:  # NaN (not read) on either side compares False
                    found.append(RisingCounter(host, key, old, new, before.created, after.created))
    return found


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


def _unit_counts(
    columns: Columns, gids: list[int], slow: list[Outlier], ids: dict[str, int], names: TableNames
) -> tuple[Counter[tuple[int, str, bool]], int]:
    """How many units (node, device) of some groups have each (configuration, device,
    slow), and how many units there are."""
    rows = np.flatnonzero(np.isin(columns.group, np.asarray(gids, dtype=np.uint32)))
    node = columns.node_id[rows].astype(np.int64)
    device = columns.device_id[rows].astype(np.int64)
    marked = np.asarray(
        [(ids[o.node] << 32) | names.devices.ids[o.device] for o in slow], dtype=np.int64
    )
    flags = np.isin((node << 32) | device, marked).astype(np.int64)
    keys = np.stack([columns.config_of[node].astype(np.int64), device, flags], axis=1)
    found, numbers = np.unique(keys, axis=0, return_counts=True)
    counts: Counter[tuple[int, str, bool]] = Counter(
        {
            (config, names.devices.items[device_id], bool(flag)): n
            for (config, device_id, flag), n in zip(
                found.tolist(), numbers.tolist(), strict=True
            )
        }
    )
    return counts, len(rows)


def analyse(loaded: LoadedFleet, threshold: float = DEFAULT_THRESHOLD) -> FleetReport:
    """The fleet report of loaded snapshots. The statistics are NumPy over the long
    table's columns; Polars is imported only where the table is asked for as a frame
    (FleetReport.table: --parquet, other tools)."""
    fleet = Fleet(loaded)
    names = TableNames()
    columns = numeric_columns(fleet, names)
    ids = {run.host: i for i, run in enumerate(fleet.current)}
    odd = robust_outliers(columns, group_stats(columns), threshold)
    outliers = sorted(
        _outliers(columns, odd, fleet, names),
        key=lambda o: (-abs(o.z), o.reading, natural_key(o.node), natural_key(o.device)),
    )
    kernel_names: dict[str, tuple[str, str]] = {}
    for run in fleet.current:
        for kv in run.kernel_values:
            kernel_names.setdefault(template(kv.key)[0], (kv.name, kv.device))
    slow_metrics = []
    slow_rows = [
        o for o in outliers if o.reading in kernel_names and (o.z < 0) == higher_is_better(o.unit)
    ]
    by_metric: dict[tuple[str, str], list[Outlier]] = defaultdict(list)
    for o in slow_rows:
        by_metric[(o.model, o.reading)].append(o)
    for (model, reading), slow in sorted(by_metric.items()):
        name, device = kernel_names[reading]
        model_id, reading_id = names.models.ids[model], names.readings.ids[reading]
        gids = [
            g for g, (m, r, _) in enumerate(columns.groups) if (m, r) == (model_id, reading_id)
        ]
        counts, comparable = _unit_counts(columns, gids, slow, ids, names)
        slow_metrics.append(
            SlowMetric(
                reading,
                model,
                slow[0].unit,
                slow[0].median,
                sorted(slow, key=lambda o: (natural_key(o.node), o.device)),
                comparable,
                explain_slow(fleet, counts, name, device),
            )
        )
    return FleetReport(
        nodes=len(fleet.current),
        snapshots=len(loaded.runs),
        bad=list(loaded.bad),
        slow=slow_metrics,
        groups=config_groups(fleet),
        outliers=outliers,
        regressions=regressions(fleet),
        rising=rising_counters(fleet),
        findings=fleet_findings(fleet),
        threshold=threshold,
        columns=columns,
        names=names,
        node_names=[run.host for run in fleet.current],
        racks=rack_view(fleet),
    )
