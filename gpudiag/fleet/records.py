"""The records a loaded fleet is made of, shared by both of its readers: the snapshot
files' (load.py) and the Parquet file's (parquet.py), which import this module and not
each other.

A LoadedFleet holds the readings' layouts (one per readings shape), the configuration
tuples, and one NodeRun per snapshot: its numbers, its kernel figures (KernelValue, from
`kernel_values`) and its kernel results, as model.KernelResult or in the fast path's parsed
form (ParsedKernel).
"""

from __future__ import annotations

import gc
import hashlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Union

import msgspec
import numpy as np
from msgspec import UNSET, UnsetType

from gpudiag.catalog import kernel_key
from gpudiag.model import ProbeStatus

Scalar = Union[bool, int, float, str]  # noqa: UP007 - msgspec reads the typing form
ProbeStatusName = Literal[tuple(s.value for s in ProbeStatus)]  # type: ignore[valid-type]


@dataclass(frozen=True)
class Layout:
    """The shape of a node's readings: which keys, with which status and unit. Nodes of
    one SKU share one. `numeric` and `config` index into `keys`."""

    keys: tuple[str, ...]
    statuses: tuple[str, ...]
    units: tuple[str, ...]
    numeric: tuple[int, ...]
    config: tuple[int, ...]
    # readings that move with load (not configuration) which rules/explanations.toml
    # names, and whose values are no numbers (the throttle reasons): kept per run
    # (NodeRun.explain) to explain a slow node, never to group nodes (whyslow.py)
    explain: tuple[int, ...] = ()

    def position(self) -> dict[str, int]:
        """key -> index."""
        return {key: i for i, key in enumerate(self.keys)}


class KernelValue(NamedTuple):
    """One kernel figure of a node as a reading-like key (gpu.3.kernel.stream.triad.fp64,
    topo.gpu.0.1.copy_gbs), with what explains it: the kernel's name and device. A named
    tuple: a node has one per result, made while reading and sent from the reading
    workers, where a frozen dataclass costs several times as much to make and to pickle."""

    key: str
    value: float
    unit: str
    name: str
    device: str


@dataclass
class NodeRun:
    """One snapshot of one node, in compact form."""

    path: str
    host: str
    created: str
    layout: int
    config: int
    numbers: np.ndarray
    kernel_values: tuple[KernelValue, ...]
    kernels: tuple[Any, ...]  # KernelResult, or the fast path's parsed form of one
    findings: tuple[tuple[str, str, str], ...]  # rule id, severity, subject
    explain: tuple[Any, ...] = ()  # the values at its layout's `explain` positions


@dataclass
class LoadedFleet:
    """Every snapshot read, with the layouts and configuration tuples they refer to,
    and the files that could not be read (path: reason)."""

    layouts: list[Layout] = field(default_factory=list)
    configs: list[tuple[Any, ...]] = field(default_factory=list)
    config_layout: list[int] = field(default_factory=list)
    runs: list[NodeRun] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)


def run_id(run: NodeRun) -> str:
    """A snapshot's id: its node, time and file, hashed (16 hex digits). A dataset keeps
    it (dataset.py), and a fleet read twice over is told by it (`drop_repeats`)."""
    text = f"{run.host}\0{run.created}\0{run.path}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def drop_repeats(fleet: LoadedFleet) -> int:
    """Each run of `fleet` kept once by its run id, the first read (a folder named twice,
    a dataset beside the snapshots it was written from, a Parquet file twice); how many
    were dropped. A repeat has its first's layout and configuration (FleetMerger)."""
    seen: set[str] = set()
    kept = []
    for run in fleet.runs:
        rid = run_id(run)
        if rid not in seen:
            seen.add(rid)
            kept.append(run)
    dropped = len(fleet.runs) - len(kept)
    if dropped:
        fleet.runs[:] = kept
    return dropped


class FleetMerger:
    """Adds parts read elsewhere (a worker's chunk, a Parquet file, a dataset) to one
    LoadedFleet: a layout or configuration it already has is the same one, and each part's
    runs are renumbered to the fleet's."""

    def __init__(self, fleet: LoadedFleet) -> None:
        self.fleet = fleet
        self.layout_ids = {
            (la.keys, la.statuses, la.units): i for i, la in enumerate(fleet.layouts)
        }
        self.config_ids = {(fleet.config_layout[i], c): i for i, c in enumerate(fleet.configs)}

    def add(
        self,
        layouts: Iterable[Layout],
        configs: Iterable[tuple[int, tuple[Any, ...]]],
        runs: Iterable[NodeRun],
        bad: Iterable[str],
        layout_map: list[int] | None = None,
        config_map: list[int] | None = None,
    ) -> None:
        """Add a part: its new `layouts`, its new configurations as (its layout, values),
        its `runs` and `bad` files. `layout_map`/`config_map`: the part's ids to the
        fleet's, extended here (a worker sends each layout once and its later chunks
        refer to it); fresh where the part stands alone."""
        fleet = self.fleet
        layout_map = [] if layout_map is None else layout_map
        config_map = [] if config_map is None else config_map
        for layout in layouts:
            signature = (layout.keys, layout.statuses, layout.units)
            if signature not in self.layout_ids:
                self.layout_ids[signature] = len(fleet.layouts)
                fleet.layouts.append(layout)
            layout_map.append(self.layout_ids[signature])
        for local_layout, config in configs:
            key = (layout_map[local_layout], config)
            if key not in self.config_ids:
                self.config_ids[key] = len(fleet.configs)
                fleet.configs.append(config)
                fleet.config_layout.append(key[0])
            config_map.append(self.config_ids[key])
        for run in runs:
            run.layout = layout_map[run.layout]
            run.config = config_map[run.config]
            fleet.runs.append(run)
        fleet.bad.extend(bad)


class ParsedStats(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A kernel result's statistics as the schema has them (model.Statistics)."""

    count: int
    median: float
    minimum: float
    maximum: float
    mean: float
    cv: float
    ci95_low: float
    ci95_high: float


class ParsedKernel(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """A kernel result as the fast path parses it (load.py) and a Parquet fleet stores it
    (parquet.py): the schema's fields, without building a model.KernelResult."""

    kernel: str
    device: str
    metric: str
    status: ProbeStatusName
    unit: str = ""
    error: str = ""
    samples: list[float] = msgspec.field(default_factory=list)
    params: dict[str, Scalar] = msgspec.field(default_factory=dict)
    stats: Union[ParsedStats, UnsetType] = UNSET  # noqa: UP007


_KERNEL_KEYS: dict[tuple[Any, ...], tuple[str | None, str]] = {}


def _kernel_key(result: Any) -> tuple[str | None, str]:
    """(catalog.kernel_key, 'kernel.metric') of a kernel result, remembered by what they
    depend on (kernel, device, metric, and a STREAM result's dtype with its type, so that
    1 and True stay apart); bounded: a file of made-up
    kernels cannot grow it without end."""
    dtype: Any = None
    if result.kernel == "stream":
        params = result.params
        dtype = (params if type(params) is dict else dict(params)).get("dtype", "fp64")
    identity = (result.kernel, result.device, result.metric, type(dtype), dtype)
    found = _KERNEL_KEYS.get(identity)
    if found is None:
        found = (kernel_key(result), f"{result.kernel}.{result.metric}")
        if len(_KERNEL_KEYS) < 65536:
            _KERNEL_KEYS[identity] = found
    return found


def kernel_values(kernels: Iterable[Any]) -> tuple[KernelValue, ...]:
    """Each measured kernel result's median under the key its derived reading has
    (kernels/readings.py): gpu.N.kernel.stream.triad.fp64, topo.gpu.I.J.copy_gbs, ...
    The median without stats is statistics.median's, inline (a fleet asks it of every
    result of every node: 180,000 at 10,000 nodes)."""
    out = []
    known = _KERNEL_KEYS
    for result in kernels:
        samples = result.samples
        if result.status != "ok" or not samples:
            continue
        kernel = result.kernel
        dtype: Any = None
        if kernel == "stream":
            params = result.params
            dtype = (params if type(params) is dict else dict(params)).get("dtype", "fp64")
        found = known.get((kernel, result.device, result.metric, type(dtype), dtype))
        key, name = _kernel_key(result) if found is None else found
        if key is None:
            continue
        stats = result.stats
        if stats:
            median = stats.median
        else:
            ordered = sorted(samples)
            half = len(ordered) // 2
            median = ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2
        out.append(KernelValue(key, float(median), result.unit, name, result.device))
    return tuple(out)


@contextmanager
def no_gc() -> Iterator[None]:
    """The cyclic garbage collector paused: reading makes no cycles, and a collection
    every 700 new containers walks everything read so far (a quarter of the reading time
    at 1,000 nodes; a third of reading 10,000 nodes from Parquet). Reference counting
    still frees what is let go."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
