"""The fleet's long table: the latest run of each node (Fleet), its numbers as NumPy
columns (Columns: one row a number, with the group of rows it is compared with), the
strings they stand for (TableNames), and how readings and node sets are named (template,
fold). The questions asked of it are outliers.py's, whyslow.py's and history.py's; the
report that gathers them is analysis.py's."""

from __future__ import annotations

import functools
import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from ClusterShell.NodeSet import NodeSet

from gpudiag import catalog, shipped
from gpudiag.derive import PROFILE_KEY
from gpudiag.fleet.records import Layout, LoadedFleet, NodeRun
from gpudiag.hostfs import natural_key
from gpudiag.profiles import load_profiles

if TYPE_CHECKING:
    import polars as pl

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
    if not all(_FOLDABLE.match(name) for name in names):
        return ",".join(sorted(names, key=natural_key))
    shapes: dict[str, list[str]] = defaultdict(list)  # ClusterShell's pattern: node%s-c%s
    for name in names:
        shapes[_DIGITS.sub("%s", name)].append(name)
    folded = NodeSet()
    for shape, members in shapes.items():
        folded.update(_product(shape, members) or NodeSet.fromlist(members))
    return str(folded)


_DIGITS = re.compile(r"\d+")


def _product(shape: str, members: list[str]) -> str | None:
    """Names of one pattern that are every combination of their numbers (node[1-9]-c[1-4]:
    a fleet's names, or all but whole rows of them) as one NodeSet vector's text, which
    ClusterShell parses without folding; None otherwise. NodeSet.fromlist parses each
    name (about 45 us) and folds two-number names pairwise (100,000 names: 9.5 s); a
    product's fold is the vector of its axes, the same string. An axis whose numbers
    differ in length and start with 0 (mixed padding) is left to ClusterShell."""
    if shape.count("%s") == 0:
        return None
    axes: list[set[str]] = [set() for _ in range(shape.count("%s"))]
    for name in members:
        for axis, number in zip(axes, _DIGITS.findall(name), strict=True):
            axis.add(number)
    if len(members) != math.prod(len(axis) for axis in axes):
        return None
    for axis in axes:
        if len({len(n) for n in axis}) > 1 and any(n[0] == "0" for n in axis):
            return None
    return shape % tuple(f"[{','.join(axis)}]" for axis in axes)


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
        self.per_node: tuple[Any, np.ndarray, np.ndarray, dict[int, list[int]]] | None = None

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
        """The node's type: its GPU model (the profile its judgment stored, node.profile;
        for older snapshots the profile its most common PCI device id selects, else that
        id) and GPU count, and ', virtual (kvm)' for a virtual machine (host.virt.vm read
        and not 'none'): nodes are compared only with nodes of the same type."""
        if config not in self._models:
            label = self._gpu_model(config)
            virtual = self.config_value(config, "host.virt.vm")
            if virtual is not None and virtual[2] == "ok" and virtual[0] not in ("none", ""):
                label += f", virtual ({virtual[0]})"
            self._models[config] = label
        return self._models[config]

    def _gpu_model(self, config: int) -> str:
        layout = self.loaded.layouts[self.loaded.config_layout[config]]
        gpus = len(catalog.gpu_indices(layout.keys))
        stored = self.config_value(config, PROFILE_KEY)
        if stored is not None and stored[2] == "ok" and gpus:
            return f"{stored[0]} x{gpus}"
        ids = []
        for key in layout.keys:
            if DEVICE_ID.match(key):
                found = self.config_value(config, key)
                if found and found[2] == "ok":
                    ids.append(str(found[0]))
        if not ids:
            return "no GPUs"
        common = Counter(ids).most_common(1)[0][0]
        name = next((p.name for p in self.profiles.values() if common in p.device_ids), common)
        return f"{name} x{gpus}"


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
    kinds: dict[int, catalog.Kind] = field(default_factory=dict)  # reading id -> kind

    def kind_array(self) -> np.ndarray:
        """Per reading id, its Kind's value (for masks over a column of reading ids)."""
        return np.asarray(
            [
                self.kinds.get(i, catalog.Kind.MEASUREMENT).value
                for i in range(len(self.readings.items))
            ],
            dtype=object,
        )


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


# a layout's numbers for some of its nodes and slots: (layout, nodes, slots) -> matrix
Numbers = Callable[[int, list[int], np.ndarray], np.ndarray]


def numeric_columns(
    fleet: Fleet,
    names: TableNames,
    only: Collection[str] | None = None,
    numbers: Numbers | None = None,
    kernels: bool = True,
) -> Columns:
    """The long table (Columns) of the fleet's latest runs. Nodes of one layout are one
    matrix, so a layout's rows are its matrix raveled and its column ids tiled; GPUs of one
    model are pooled (one group a reading template), except for positional readings (the
    catalog's Kind.POSITIONAL: a GPU's NUMA node is GPU 3's across alike nodes, and a lost
    GPU leaves its own position only); NUMA nodes are not pooled either (a CPU-less memory
    node differs): their position is their device.

    `only`: the reading templates kept (all where None), the rows of the whole table's in
    its order; `numbers` gives a layout's matrix where the runs do not hold their numbers
    (a dataset's report: fleet/dataset_scan.py); `kernels=False` leaves the kernel figures
    out (none of their templates is in `only`)."""
    loaded = fleet.loaded
    model_of, config_of, by_layout = _per_node(fleet, names)
    group_ids: dict[tuple[int, int, int], int] = {}
    by_position: dict[int, bool] = {}

    def position(reading_id: int, device_id: int) -> int:
        if reading_id not in by_position:
            by_position[reading_id] = (
                names.readings.items[reading_id].startswith("numa.")
                or names.kinds.get(reading_id) is catalog.Kind.POSITIONAL
            )
        return device_id if by_position[reading_id] else 0

    def group_of(model_id: int, reading_id: int, device_id: int) -> int:
        key = (model_id, reading_id, position(reading_id, device_id))
        return group_ids.setdefault(key, len(group_ids))

    plans: list[tuple[int, np.ndarray, list[int], np.ndarray, np.ndarray, np.ndarray, np.ndarray]]
    plans = []
    for layout_id, members in by_layout.items():
        layout = loaded.layouts[layout_id]
        slots = [
            s
            for s, p in enumerate(layout.numeric)
            if only is None or template(layout.keys[p])[0] in only
        ]
        if not slots:
            continue
        reading_ids, device_ids = [], []
        for p in (layout.numeric[s] for s in slots):
            name, device = template(layout.keys[p])
            reading_ids.append(names.readings.id(name))
            device_ids.append(names.devices.id(device))
            names.units.setdefault(reading_ids[-1], layout.units[p])
            names.kinds.setdefault(reading_ids[-1], shipped.kind_of(layout.keys[p]))
        rows = np.asarray(members, dtype=np.uint32)
        models, model_index = np.unique(model_of[rows], return_inverse=True)
        group_table = np.asarray(
            [
                [group_of(int(m), r, d) for r, d in zip(reading_ids, device_ids, strict=True)]
                for m in models
            ],
            dtype=np.uint32,
        )
        plans.append(
            (
                layout_id,
                np.asarray(slots, dtype=np.intp),
                members,
                np.asarray(reading_ids, dtype=np.uint32),
                np.asarray(device_ids, dtype=np.uint32),
                group_table,
                model_index.ravel(),
            )
        )
    kernel_rows: tuple[list[int], ...] = ([], [], [], [], [])
    ids: dict[str, tuple[int, int]] = {}
    groups: dict[tuple[int, str], int] = {}  # (model, key) -> group, asked once
    models = model_of.tolist()
    for i, run in enumerate(fleet.current if kernels else ()):
        for kv in run.kernel_values:
            found = ids.get(kv.key)
            if found is None:
                name, device = template(kv.key)
                if only is not None and name not in only:
                    continue
                found = ids[kv.key] = (names.readings.id(name), names.devices.id(device))
                names.units.setdefault(found[0], kv.unit)
                names.kinds.setdefault(found[0], catalog.Kind.MEASUREMENT)
            group = groups.get((models[i], kv.key))
            if group is None:
                group = groups[(models[i], kv.key)] = group_of(models[i], *found)
            kernel_rows[0].append(i)
            kernel_rows[1].append(found[0])
            kernel_rows[2].append(found[1])
            kernel_rows[3].append(kv.value)  # type: ignore[arg-type]
            kernel_rows[4].append(group)
    # Each column made once at its full length and each layout's rows written into it as
    # a (nodes, readings) view: no per-layout copies to concatenate (at 10,000 8-GPU
    # nodes, 13 million rows, the copies and their concatenation were 1.6 s).
    total = sum(len(m) * len(r) for _, _, m, r, _, _, _ in plans) + len(kernel_rows[0])
    node_id, reading_id, device_id, slot, group = (
        np.empty(total, dtype=np.uint32) for _ in range(5)
    )
    value = np.empty(total, dtype=np.float64)
    at = 0
    for layout_id, slots, members, reading_array, device_array, group_table, model_index in plans:
        count, width = len(members), len(reading_array)
        end = at + count * width
        node_id[at:end].reshape(count, width)[:] = np.asarray(members, dtype=np.uint32)[:, None]
        reading_id[at:end].reshape(count, width)[:] = reading_array
        device_id[at:end].reshape(count, width)[:] = device_array
        out = value[at:end].reshape(count, width)
        if numbers is not None:
            out[:] = numbers(layout_id, members, slots)
        elif only is None:
            np.stack([fleet.current[i].numbers for i in members], out=out)
        else:
            np.stack([fleet.current[i].numbers[slots] for i in members], out=out)
        slot[at:end].reshape(count, width)[:] = slots
        np.take(group_table, model_index, axis=0, out=group[at:end].reshape(count, width))
        at = end
    node_id[at:] = kernel_rows[0]
    reading_id[at:] = kernel_rows[1]
    device_id[at:] = kernel_rows[2]
    value[at:] = kernel_rows[3]
    slot[at:] = NO_SLOT
    group[at:] = kernel_rows[4]
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


def _per_node(
    fleet: Fleet, names: TableNames
) -> tuple[np.ndarray, np.ndarray, dict[int, list[int]]]:
    """Each node's model id and configuration, and the nodes of each layout: made once a
    fleet and TableNames (a table made a part at a time asks for them per part)."""
    found = fleet.per_node
    if found is not None and found[0] is names:
        return found[1:]
    model_of = np.asarray(
        [names.models.id(fleet.model(run.config)) for run in fleet.current], dtype=np.uint32
    )
    config_of = np.asarray([run.config for run in fleet.current], dtype=np.uint32)
    by_layout: dict[int, list[int]] = defaultdict(list)
    for i, run in enumerate(fleet.current):
        by_layout[run.layout].append(i)
    fleet.per_node = (names, model_of, config_of, dict(by_layout))
    return model_of, config_of, dict(by_layout)


def numeric_table(fleet: Fleet, names: TableNames) -> pl.DataFrame:
    """The long table as a Polars frame: node_id, reading_id, device_id, value, model_id,
    config, slot (Columns.frame)."""
    return numeric_columns(fleet, names).frame()
