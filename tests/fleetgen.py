"""Fleets of snapshots made from the demo HGX H100 replay, with planted differences, for
the fleet and baseline tests and the fleet benchmark.

The base is a real export: the probes run on the HGX-like host tree (tests/hosttree.py)
with snapshots/demo-hgx-h100-healthy.toml answering NVML. Each node then gets its own
name, serials and UUIDs, a little jitter on volatile readings (temperature, power draw),
the same configuration, and kernel results (GPU STREAM triad and host-to-device copy per
GPU, CPU STREAM triad per NUMA node) drawn around plausible medians. A plant changes one
node's configuration and, where it would, its kernel figures.
"""

from __future__ import annotations

import functools
import math
import random
import shutil
import statistics
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from gpudiag.fleet.changes import History, RunPoint
from gpudiag.fleet.table import template
from gpudiag.hostfs import HostFS
from gpudiag.model import KernelResult, ProbeStatus, Reading, ReadingStatus, Snapshot
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.probes import default_probes
from gpudiag.rulefile import load_rules
from gpudiag.session import LiveNode, with_findings
from gpudiag.snapshot import load, save

from hosttree import build_hgx_tree

REPO = Path(__file__).resolve().parent.parent
GPUS = 8
TRIAD_GBS, H2D_GBS, CPU_TRIAD_GBS = 3000.0, 55.0, 120.0


@functools.cache
def base_snapshot() -> Snapshot:
    """One probed node: the healthy demo replay on the HGX-like host tree, with rules."""
    with tempfile.TemporaryDirectory() as tree:
        root = build_hgx_tree(Path(tree))
        replay = REPO / "snapshots" / "demo-hgx-h100-healthy.toml"
        node = LiveNode(
            HostFS(root), Nvml(ReplayBackend.from_file(replay)), default_probes(), load_rules()
        )
        return node.snapshot()


def _samples(rng: random.Random, median: float, spread: float, n: int = 10) -> tuple[float, ...]:
    return tuple(round(rng.gauss(median, spread), 3) for _ in range(n))


def kernels(
    rng: random.Random, triad: dict[int, float], h2d: dict[int, float], cpu_triad: float
) -> tuple[KernelResult, ...]:
    """STREAM triad and H2D copy per GPU, CPU STREAM triad on NUMA nodes 0 and 1."""
    out = []
    for gpu in range(GPUS):
        out.append(
            KernelResult(
                "stream",
                f"gpu{gpu}",
                "triad",
                "GB/s",
                ProbeStatus.OK,
                _samples(rng, triad.get(gpu, TRIAD_GBS), 15),
                params=(("dtype", "fp64"),),
            )
        )
        out.append(
            KernelResult(
                "copy",
                f"gpu{gpu}",
                "h2d.local",
                "GB/s",
                ProbeStatus.OK,
                _samples(rng, h2d.get(gpu, H2D_GBS), 0.3),
            )
        )
    for numa in (0, 1):
        out.append(
            KernelResult(
                "stream",
                f"cpu-numa{numa}",
                "triad",
                "GB/s",
                ProbeStatus.OK,
                _samples(rng, cpu_triad, 1.0),
                params=(("dtype", "fp64"),),
            )
        )
    return tuple(out)


def with_values(snapshot: Snapshot, values: dict[str, Any]) -> Snapshot:
    """The snapshot with these readings' values replaced (status ok, unit kept)."""
    probes = []
    for probe in snapshot.probes:
        readings = tuple(
            replace(r, value=values[r.key], status=type(r.status)("ok"), reason="")
            if r.key in values
            else r
            for r in probe.readings
        )
        probes.append(replace(probe, readings=readings))
    return replace(snapshot, probes=tuple(probes))


Plant = Callable[[dict[str, Any], dict[str, dict[int, float]]], None]


def power_cap(gpu: int, watts: float = 500.0) -> Plant:
    """One GPU capped below the others: its STREAM triad suffers."""

    def plant(values: dict[str, Any], figures: dict[str, dict[int, float]]) -> None:
        values[f"gpu.{gpu}.power.limit"] = watts
        values[f"gpu.{gpu}.power.enforced_limit"] = watts
        figures["triad"][gpu] = TRIAD_GBS * 0.85

    return plant


def driver(version: str) -> Plant:
    """Another NVIDIA driver."""

    def plant(values: dict[str, Any], figures: dict[str, dict[int, float]]) -> None:
        values["nvml.driver_version"] = version

    return plant


def hot_gpu(gpu: int, celsius: int = 88) -> Plant:
    """One GPU running hot."""

    def plant(values: dict[str, Any], figures: dict[str, dict[int, float]]) -> None:
        values[f"gpu.{gpu}.temperature.gpu"] = celsius

    return plant


def powersave() -> Plant:
    """The CPU governor left at powersave: CPU STREAM is slow."""

    def plant(values: dict[str, Any], figures: dict[str, dict[int, float]]) -> None:
        values["cpu.freq.governor"] = "powersave"
        figures["cpu"][0] = CPU_TRIAD_GBS * 0.7

    return plant


def pcie_x8(gpu: int) -> Plant:
    """One GPU trained at x8: its host-to-device copies are half as fast."""

    def plant(values: dict[str, Any], figures: dict[str, dict[int, float]]) -> None:
        values[f"gpu.{gpu}.pcie.link_width"] = 8
        figures["h2d"][gpu] = H2D_GBS / 2

    return plant


def make_node(
    base: Snapshot,
    name: str,
    seed: int,
    plants: tuple[Plant, ...] = (),
    created: str = "2026-11-01T00:00:00Z",
) -> Snapshot:
    """One node of the fleet: `base` renamed, jittered, with kernels, then planted."""
    rng = random.Random(seed)
    values: dict[str, Any] = {"host.hostname": name, "cpu.freq.governor": "performance"}
    for gpu in range(GPUS):
        values[f"gpu.{gpu}.serial"] = f"{seed:07d}{gpu:03d}"
        values[f"gpu.{gpu}.uuid"] = f"GPU-{seed:08d}-0000-0000-0000-{gpu:012d}"
        values[f"gpu.{gpu}.temperature.gpu"] = 38 + rng.randint(0, 5)
        values[f"gpu.{gpu}.power.draw"] = round(rng.uniform(65.0, 75.0), 1)
    figures: dict[str, dict[int, float]] = {"triad": {}, "h2d": {}, "cpu": {}}
    for plant in plants:
        plant(values, figures)
    snapshot = with_values(base, values)
    cpu = figures["cpu"].get(0, CPU_TRIAD_GBS)
    snapshot = replace(
        snapshot,
        host=name,
        created=created,
        kernels=kernels(rng, figures["triad"], figures["h2d"], cpu),
    )
    return with_findings(snapshot, load_rules())


def write_fleet(
    directory: Path,
    count: int,
    plants: dict[int, tuple[Plant, ...]] | None = None,
    toml_every: int = 5,
) -> list[Path]:
    """`count` nodes node001... in `directory`, every `toml_every`-th as TOML, the rest
    JSON; `plants` by node number (1-based)."""
    base = base_snapshot()
    paths = []
    for number in range(1, count + 1):
        name = f"node{number:03d}"
        snapshot = make_node(base, name, number, (plants or {}).get(number, ()))
        suffix = ".toml" if number % toml_every == 0 else ".json"
        path = directory / f"{name}{suffix}"
        save(snapshot, path)
        paths.append(path)
    return paths


def reading(snapshot: Snapshot, key: str) -> Reading | None:
    """A reading of a snapshot, by key."""
    return snapshot.readings_by_key.get(key)


# ------------------------------------------------------------------ shared fixtures

PLANTS = {
    3: (power_cap(2),),
    7: (driver("570.86.15"),),
    8: (driver("570.86.15"),),
    11: (hot_gpu(5),),
    14: (powersave(),),
    15: (powersave(),),
    19: (pcie_x8(3),),
}
COUNT = 20


@pytest.fixture(scope="session")
def fleet_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """20 nodes (every 5th TOML), the plants above, and node005 snapshotted twice: its
    second run (later) has GPU 1's triad 10% lower."""
    directory = tmp_path_factory.mktemp("fleet")
    write_fleet(directory, COUNT, PLANTS)
    first = load(directory / "node005.toml")
    later = make_node(base_snapshot(), "node005", 5, created="2026-11-20T00:00:00Z")
    slower = tuple(
        replace(k, samples=tuple(s * 0.9 for s in k.samples))
        if (k.kernel, k.device) == ("stream", "gpu1")
        else k
        for k in later.kernels
    )
    (directory / "history").mkdir()
    save(replace(later, kernels=slower), directory / "history" / "node005-later.json")
    assert first.created < later.created
    return directory


@pytest.fixture(scope="session")
def clean_dir(fleet_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Only the nodes nothing was planted on, one run each."""
    directory = tmp_path_factory.mktemp("clean")
    for path in fleet_dir.glob("node*.*"):
        number = int(path.stem.removeprefix("node"))
        if number not in PLANTS and number != 5:
            shutil.copy(path, directory / path.name)
    return directory


# ------------------------------------------------------------------ realistic fleets
#
# A fleet that looks like a real one: figures spread node to node and GPU to GPU, clocks
# and temperatures that vary, outliers near the robust-z threshold as well as far from
# it, findings on several nodes, several runs of some nodes with reboots between some,
# two drivers and three GPU models, and a few damaged files. Every figure a node gets is
# held in its NodeSpec, so that a test computes what the report should say from the specs
# (a second method), never from the code under test.
#
# The spread of each figure, and where it comes from:
# - host-to-device copy, GPU to GPU: the coefficient of variation of the 8-GPU row that
#   nvbandwidth measured (realdata/benchmarks, host_to_device_memcpy_ce; about 0.3%),
#   held in H2D_ROW;
# - HBM (STREAM triad), GPU to GPU: 2%, chosen: FIGURES.md's H100 measured 2903 GB/s with
#   gpudiag's kernel and 3030 with a fused one (4% between two ways of measuring one
#   GPU); DCGM's floor for 0x2330 (reference-thresholds/dcgm__diag-skus.yaml.in) is 0.75
#   of its typical figure, so a healthy GPU 2% off is nowhere near the vendor's floor;
# - CPU STREAM per NUMA node: 3%, chosen; trial to trial inside one run: 0.5%, chosen;
# - temperature at idle: 38 C, sd 3 C; SM clock under load: 1980 MHz less up to a few
#   tens of MHz of boost lost; power draw 65-75 W: chosen, as the demo replay's values.

H2D_FILE = "benchmarks/nvbandwidth-README__host_to_device_memcpy_ce__8gpu_GPU-unstated.txt"
NHC_H100 = "reference-thresholds/azurehpc-nhc__nd96isr_h100_v5.conf"
TRIAD_CV, CPU_CV, TRIAL_CV = 0.02, 0.03, 0.005
DRIVERS = ("590.48.01", "570.86.15")
MODELS = {
    "h100": ("0x2330", "h100-sxm5"),
    "h200": ("0x2335", "h200-sxm"),
    "h100nvl": ("0x2321", "h100-nvl"),
}
MODEL_TRIAD = {"h100": TRIAD_GBS, "h200": 4300.0, "h100nvl": 3400.0}


# nvbandwidth's host-to-device row (GB/s) of 8 GPUs (realdata/benchmarks, H2D_FILE; a test
# checks this copy against the file)
H2D_ROW = (26.03, 25.94, 25.97, 26.00, 26.19, 25.95, 26.00, 25.97)


def h2d_row(realdata: Path) -> tuple[float, ...]:
    """The 8-GPU row of nvbandwidth's host-to-device figures, read from the file."""
    lines = (realdata / H2D_FILE).read_text().splitlines()
    row = next(line for line in lines if line.startswith("0 "))
    return tuple(float(v) for v in row.split()[1:])


def h2d_cv() -> float:
    """GPU-to-GPU spread of host-to-device copies: nvbandwidth's 8 GPUs of one node."""
    mean = sum(H2D_ROW) / len(H2D_ROW)
    return (sum((v - mean) ** 2 for v in H2D_ROW) / (len(H2D_ROW) - 1)) ** 0.5 / mean


def nhc_h2d_floor(realdata: Path) -> float:
    """Azure's host-to-device floor for ND H100 v5 (`check_gpu_bw 48 335`: GB/s)."""
    for line in (realdata / NHC_H100).read_text().splitlines():
        if "check_gpu_bw" in line:
            return float(line.split("check_gpu_bw")[1].split()[0])
    raise AssertionError("no check_gpu_bw line")


@dataclass
class NodeSpec:
    """What one snapshot of a node holds, as the generator set it."""

    name: str
    created: str
    model: str = "h100"
    driver: str = DRIVERS[0]
    triad: dict[int, float] = field(default_factory=dict)  # per GPU: the trials' median
    h2d: dict[int, float] = field(default_factory=dict)
    cpu: dict[int, float] = field(default_factory=dict)  # per NUMA node
    temperature: dict[int, int] = field(default_factory=dict)
    clock: dict[int, int] = field(default_factory=dict)  # gpu.N.clocks.sm
    max_clock: dict[int, int] = field(default_factory=dict)  # gpu.N.clocks.max_sm
    draw: dict[int, float] = field(default_factory=dict)
    limit: dict[int, float] = field(default_factory=dict)
    link_width: dict[int, int] = field(default_factory=dict)
    corrected: dict[int, int] = field(default_factory=dict)  # gpu.N.ecc.volatile.corrected
    lost: set[int] = field(default_factory=set)
    uptime: float = 86400.0
    without: tuple[str, ...] = ()  # readings this node lacks altogether
    unread: tuple[str, ...] = ()  # readings taken that failed (status error)
    device_ids: dict[int, str] = field(default_factory=dict)  # a GPU of another model
    latency: dict[int, float] = field(default_factory=dict)  # GPU 0 -> GPU n copy, us
    seed: int = 0
    # more readings per GPU: reading (without gpu.N.) -> {gpu: value} (link generation,
    # NUMA node, counters); and node-wide readings: key -> value
    extra: dict[str, dict[int, Any]] = field(default_factory=dict)
    node_values: dict[str, Any] = field(default_factory=dict)
    factor: float = 1.0  # the node's kernel factor (the operator fleet's)

    def values(self) -> dict[str, dict[str, float]]:
        """Reading template -> {device: value}, as the fleet report keys them (a GPU's
        device is `GPU n`, a NUMA node's `NUMA node n`, a node-wide reading's '')."""
        gpu = {
            "gpu.{gpu}.kernel.stream.triad.fp64": self.triad,
            "gpu.{gpu}.kernel.copy.h2d.local": self.h2d,
            "gpu.{gpu}.temperature.gpu": self.temperature,
            "gpu.{gpu}.clocks.sm": self.clock,
            "gpu.{gpu}.clocks.max_sm": self.max_clock,
            "gpu.{gpu}.power.draw": self.draw,
            "gpu.{gpu}.power.limit": self.limit,
            "gpu.{gpu}.pcie.link_width": self.link_width,
            "gpu.{gpu}.ecc.volatile.corrected": self.corrected,
        }
        out: dict[str, dict[str, float]] = {
            name: {f"GPU {g}": float(v) for g, v in per.items() if g not in self.lost}
            for name, per in gpu.items()
        }
        out["host.uptime"] = {"": self.uptime}
        return out


def healthy_spec(
    name: str, seed: int, created: str, model: str = "h100", cv_h2d: float = 0.003
) -> NodeSpec:
    """A healthy node: every figure drawn around its model's median with its spread."""
    rng = random.Random(seed)
    triad = MODEL_TRIAD[model]
    return NodeSpec(
        name,
        created,
        model,
        triad={g: round(rng.gauss(triad, triad * TRIAD_CV), 2) for g in range(GPUS)},
        h2d={g: round(rng.gauss(H2D_GBS, H2D_GBS * cv_h2d), 3) for g in range(GPUS)},
        cpu={n: round(rng.gauss(CPU_TRIAD_GBS, CPU_TRIAD_GBS * CPU_CV), 2) for n in (0, 1)},
        temperature={g: round(rng.gauss(38, 3)) for g in range(GPUS)},
        clock={g: 1980 - 15 * rng.randint(0, 4) for g in range(GPUS)},
        max_clock=dict.fromkeys(range(GPUS), 1980),
        draw={g: round(rng.uniform(65.0, 75.0), 1) for g in range(GPUS)},
        limit=dict.fromkeys(range(GPUS), 700.0),
        link_width=dict.fromkeys(range(GPUS), 16),
        corrected=dict.fromkeys(range(GPUS), 0),
        uptime=float(rng.randint(2, 60) * 86400),
        seed=seed,
    )


def _trials(rng: random.Random, median: float, n: int = 15) -> tuple[float, ...]:
    """`n` (odd) trials whose median is exactly `median`: as many above as below."""
    half = [abs(rng.gauss(0, median * TRIAL_CV)) for _ in range(n // 2)]
    return (median, *(median + d for d in half), *(median - d for d in reversed(half)))


@functools.cache
def _rules() -> tuple[Any, ...]:
    return tuple(load_rules())


def snapshot_of(spec: NodeSpec) -> Snapshot:
    """The spec as a snapshot of the demo's node, with the shipped rules' findings."""
    rng = random.Random(spec.seed * 7919 + len(spec.created))
    device_id, profile = MODELS[spec.model]
    values: dict[str, Any] = {
        "host.hostname": spec.name,
        "cpu.freq.governor": "performance",
        "nvml.driver_version": spec.driver,
        "node.profile": profile,
        "host.uptime": spec.uptime,
        **spec.node_values,
    }
    per_gpu = {
        "temperature.gpu": spec.temperature,
        "clocks.sm": spec.clock,
        "clocks.max_sm": spec.max_clock,
        "power.draw": spec.draw,
        "power.limit": spec.limit,
        "power.enforced_limit": spec.limit,
        "pcie.link_width": spec.link_width,
        "ecc.volatile.corrected": spec.corrected,
        **spec.extra,
    }
    for gpu in range(GPUS):
        values[f"gpu.{gpu}.serial"] = f"{spec.seed:07d}{gpu:03d}"
        values[f"gpu.{gpu}.uuid"] = f"GPU-{spec.seed:08d}-0000-0000-0000-{gpu:012d}"
        values[f"gpu.{gpu}.pci.device_id"] = spec.device_ids.get(gpu, device_id)
        for reading, per in per_gpu.items():
            if gpu in per:
                values[f"gpu.{gpu}.{reading}"] = per[gpu]
    lost = {f"gpu.{g}.{r}" for g in spec.lost for r in ("health", *per_gpu) if r != "power.limit"}
    lost |= set(spec.unread)
    probes = []
    for probe in with_values(base_snapshot(), values).probes:
        readings = tuple(
            replace(r, value=None, status=ReadingStatus.ERROR, reason="GpuIsLost")
            if r.key in lost
            else r
            for r in probe.readings
            if r.key not in spec.without
        )
        probes.append(replace(probe, readings=readings))
    out = []
    for gpu in range(GPUS):
        if gpu in spec.lost:
            out.append(
                KernelResult("stream", f"gpu{gpu}", "all", "", ProbeStatus.ERROR, error="lost")
            )
            continue
        out.append(
            KernelResult(
                "stream", f"gpu{gpu}", "triad", "GB/s", ProbeStatus.OK,
                _trials(rng, spec.triad[gpu]), params=(("dtype", "fp64"),),
            )
        )  # fmt: skip
        out.append(
            KernelResult(
                "copy", f"gpu{gpu}", "h2d.local", "GB/s", ProbeStatus.OK,
                _trials(rng, spec.h2d[gpu]),
            )
        )  # fmt: skip
    for peer, figure in spec.latency.items():
        out.append(
            KernelResult(
                "peer", "gpu0", f"latency.gpu{peer}", "us", ProbeStatus.OK, _trials(rng, figure)
            )
        )
    for numa, figure in spec.cpu.items():
        out.append(
            KernelResult(
                "stream", f"cpu-numa{numa}", "triad", "GB/s", ProbeStatus.OK,
                _trials(rng, figure), params=(("dtype", "fp64"),),
            )
        )  # fmt: skip
    snapshot = replace(
        base_snapshot(),
        probes=tuple(probes),
        host=spec.name,
        created=spec.created,
        kernels=tuple(out),
    )
    return with_findings(snapshot, list(_rules()))


def robust_z(values: list[float], value: float) -> float:
    """The fleet's robust z of `value` among `values`, by hand: (value - median) /
    (1.4826 MAD), +-inf where the MAD is 0 and the value is off the median."""
    ordered = sorted(values)
    median = statistics.median(ordered)
    mad = statistics.median(sorted(abs(v - median) for v in ordered))
    if mad == 0:
        return 0.0 if value == median else math.copysign(math.inf, value - median)
    return (value - median) / (1.4826 * mad)


def expected_outliers(specs: list[NodeSpec], threshold: float = 5.0) -> set[tuple[str, str, str]]:
    """(reading template, node, device) of every unit the report should call odd among
    the specs' readings: per model, GPUs pooled, NUMA nodes by position; at least 3
    comparable figures; more than 1% off the median; robust z beyond the threshold.
    Counters (ECC counts) are judged by rate, not here."""
    groups: dict[tuple[str, str, str], list[tuple[str, str, float]]] = {}
    for spec in specs:
        for reading, per in spec.values().items():
            if ".ecc." in reading:
                continue
            for device, value in per.items():
                position = device if reading.startswith("numa.") else ""
                groups.setdefault((spec.model, reading, position), []).append(
                    (spec.name, device, value)
                )
        for numa, value in spec.cpu.items():
            key = (spec.model, "numa.{node}.kernel.stream.triad.fp64", f"NUMA node {numa}")
            groups.setdefault(key, []).append((spec.name, f"NUMA node {numa}", value))
    odd = set()
    for (_, reading, _), units in groups.items():
        values = [v for _, _, v in units]
        if len(values) < 3:
            continue
        median = statistics.median(values)
        for node, device, value in units:
            z = robust_z(values, value)
            if abs(value - median) > abs(median) * 0.01 and abs(z) > threshold:
                odd.add((reading, node, device))
    return odd


# ------------------------------------------------------------------ an operator's fleet
#
# Issue 38's fleet: healthy nodes with the spread of a real H100 fleet, and sixteen faults
# planted on fifteen nodes and not told to the tool. The spread:
# - kernel figures: a factor per node N(1, 2%) (a node's clocks, cooling, memory parts)
#   times a factor per GPU N(1, 1.5%), on every GPU kernel figure (STREAM triad, H2D copy);
# - counters: 4% of GPUs with a few (1-4) volatile corrected ECC errors, 12% with lifetime
#   (aggregate) corrected errors (1 + an exponential of mean 5), 2% with one correctable
#   row remap, 5% with PCIe replays (1 + an exponential of mean 10): all normal on healthy
#   H100 fleets, none of them a reason to call a person.
# The faults (FAULTS): 3 GPUs trained at PCIe Gen4 (their H2D copy at half), 2 GPUs power
# capped at 500 W (their triad at 85%), 1 GPU with uncorrectable ECC errors, 1 lost GPU,
# 2 nodes on another driver, 5 nodes 8% slower on every GPU (the node's factor 0.92: 8%
# below the fleet's typical node), 1 damaged file, 1 node with its GPUs' NUMA layout
# swapped (GPUs 0-3 on NUMA node 1 and CPUs 56-111, 4-7 on node 0).

NODE_CV, GPU_CV = 0.02, 0.015
SLOW_NODE = 0.92
FAULTS = (
    ("gen4", 3),
    ("power", 2),
    ("uncorrectable", 1),
    ("lost", 1),
    ("driver", 2),
    ("slow", 5),
    ("damaged", 1),
    ("numa", 1),
)
AFFINITY = ("0-55,112-167", "56-111,168-223")


def _counts(rng: random.Random, share: float, draw: Callable[[], int]) -> dict[int, int]:
    return {g: draw() if rng.random() < share else 0 for g in range(GPUS)}


def operator_spec(name: str, seed: int, created: str = "2026-11-01T06:00:00Z") -> NodeSpec:
    """A healthy node of issue 38's fleet (the spread above)."""
    rng = random.Random(seed * 104729 + 38)
    node = rng.gauss(1.0, NODE_CV)
    spec = healthy_spec(name, seed, created)
    spec.factor = node
    spec.triad = {g: round(TRIAD_GBS * node * rng.gauss(1.0, GPU_CV), 2) for g in range(GPUS)}
    spec.h2d = {g: round(H2D_GBS * node * rng.gauss(1.0, GPU_CV), 3) for g in range(GPUS)}
    volatile = _counts(rng, 0.04, lambda: rng.randint(1, 4))
    lifetime = _counts(rng, 0.12, lambda: 1 + int(rng.expovariate(1 / 5)))
    spec.corrected = volatile
    spec.extra = {
        "ecc.aggregate.corrected": {g: volatile[g] + lifetime[g] for g in range(GPUS)},
        "remapped_rows.correctable": _counts(rng, 0.02, lambda: 1),
        "pcie.replay_counter": _counts(rng, 0.05, lambda: 1 + int(rng.expovariate(1 / 10))),
        "pcie.link_gen": dict.fromkeys(range(GPUS), 5),
        "numa_node": {g: g * 2 // GPUS for g in range(GPUS)},
        "cpu_affinity": {g: AFFINITY[g * 2 // GPUS] for g in range(GPUS)},
    }
    return spec


def plant_fault(spec: NodeSpec, fault: str, rng: random.Random) -> None:
    """One of FAULTS on a node's spec ('damaged' is the file's, written by the caller)."""
    gpu = rng.randrange(GPUS)
    if fault == "gen4":
        spec.extra["pcie.link_gen"][gpu] = 4
        spec.h2d[gpu] = round(spec.h2d[gpu] * 0.5, 3)
    elif fault == "power":
        spec.limit = {**spec.limit, gpu: 500.0}
        spec.triad[gpu] = round(spec.triad[gpu] * 0.85, 2)
    elif fault == "uncorrectable":
        spec.extra["ecc.volatile.uncorrected"] = {g: 2 if g == gpu else 0 for g in range(GPUS)}
        spec.extra["ecc.aggregate.uncorrected"] = {g: 2 if g == gpu else 0 for g in range(GPUS)}
    elif fault == "lost":
        spec.lost = {gpu}
    elif fault == "driver":
        spec.driver = DRIVERS[1]
    elif fault == "slow":
        for figures in (spec.triad, spec.h2d):  # its factor SLOW_NODE, its GPUs' kept
            for g in figures:
                figures[g] = round(figures[g] / spec.factor * SLOW_NODE, 3)
        spec.factor = SLOW_NODE
    elif fault == "numa":
        spec.extra["numa_node"] = {g: 1 - g * 2 // GPUS for g in range(GPUS)}
        spec.extra["cpu_affinity"] = {g: AFFINITY[1 - g * 2 // GPUS] for g in range(GPUS)}


def operator_fleet(count: int, faults: bool = True) -> tuple[list[NodeSpec], dict[str, list[str]]]:
    """`count` nodes node0001... of issue 38's fleet, and which nodes got which fault
    (fault -> node names; empty without faults). The faulty nodes are drawn with a fixed
    seed, one fault a node."""
    specs = [operator_spec(f"node{n:04d}", n) for n in range(1, count + 1)]
    planted: dict[str, list[str]] = {}
    if faults:
        rng = random.Random(3800 + count)
        chosen = iter(rng.sample(range(count), sum(n for _, n in FAULTS)))
        for fault, n in FAULTS:
            for _ in range(n):
                spec = specs[next(chosen)]
                plant_fault(spec, fault, rng)
                planted.setdefault(fault, []).append(spec.name)
    return specs, planted


def vm_spec(name: str, seed: int) -> NodeSpec:
    """A healthy virtual machine of the operator fleet: the same 8 GPUs passed through
    (same PCI device id), no NVLink or NVSwitch readings (the VM does not see them),
    the hypervisor flagged, host-to-device copies through the IOMMU at 90%."""
    spec = operator_spec(name, seed)
    spec.node_values = {"host.virt.vm": "kvm", "host.virt.cpu_hypervisor_flag": True}
    spec.without = tuple(
        r.key
        for r in base_snapshot().readings_by_key.values()
        if ".nvlink." in r.key or ".fabric." in r.key or r.key.startswith(("topo.gpu.", "pcie."))
    )
    spec.h2d = {g: round(v * 0.9, 3) for g, v in spec.h2d.items()}
    return spec


def write_specs(directory: Path, specs: list[NodeSpec]) -> list[Path]:
    """Each spec's snapshot as JSON in `directory`."""
    paths = []
    for spec in specs:
        paths.append(directory / f"{spec.name}.json")
        save(snapshot_of(spec), paths[-1])
    return paths


def write_operator_fleet(directory: Path, count: int, faults: bool = True) -> dict[str, list[str]]:
    """issue 38's fleet written as JSON snapshots (the damaged node's file cut short);
    which nodes got which fault."""
    specs, planted = operator_fleet(count, faults)
    damaged = set(planted.get("damaged", ()))
    for spec in specs:
        path = directory / f"{spec.name}.json"
        save(snapshot_of(spec), path)
        if spec.name in damaged:
            text = path.read_text()
            path.write_text(text[: len(text) // 2])
    return planted


# ------------------------------------------------------------------ histories (issue 41)

HISTORY_KEYS = ("gpu.{gpu}.kernel.stream.triad.fp64", "gpu.{gpu}.kernel.copy.h2d.local")
HISTORY_BASE = {HISTORY_KEYS[0]: TRIAD_GBS, HISTORY_KEYS[1]: H2D_GBS}
DRIFT_CV = 0.01  # a node's run-to-run drift of each metric (clocks, temperature): all GPUs
RUN_CV = 0.003  # a GPU's own run-to-run noise: the trials' median moves by about this


@dataclass
class HistoryPlant:
    """A change planted in a generated history: `factor` on `nodes` from run `start`
    (1-based) on (growing by `per_run` each run after: a drift; or at that run only: an
    odd run), on one GPU or all (gpu None), on the metrics named (all when empty), with
    the configuration readings that change with it."""

    nodes: tuple[str, ...]
    factor: float
    start: int
    gpu: int | None = None
    metrics: tuple[str, ...] = ()
    config: dict[str, str] = field(default_factory=dict)
    per_run: float = 0.0  # a drift: factor * (1 + per_run) ** (runs since start)
    once: bool = False  # an outlier: run `start` only


def history_fleet(
    count: int,
    runs: int,
    plants: tuple[HistoryPlant, ...] = (),
    drift_cv: float = DRIFT_CV,
    run_cv: float = RUN_CV,
    seed: int = 41,
    gpus: int = GPUS,
) -> History:
    """`count` nodes node0001... measured `runs` times a day apart, as a fleet History
    (gpudiag/fleet/changes.py): each GPU's STREAM triad and host-to-device copy around
    the operator fleet's spread (NODE_CV, GPU_CV), times the node's drift of each run
    (drift_cv for each metric, all its GPUs alike) and each GPU's own noise (run_cv),
    times the plants."""
    rng = random.Random(seed)
    out = History()
    for template_key, name in zip(HISTORY_KEYS, ("stream.triad", "copy.h2d.local"), strict=True):
        out.names[template_key] = (name, "gpu0")
        for g in range(gpus):
            out.units[template_key.format(gpu=g)] = "GB/s"
    for n in range(1, count + 1):
        name = f"node{n:04d}"
        node = rng.gauss(1.0, NODE_CV)
        base = {
            t.format(gpu=g): HISTORY_BASE[t] * node * rng.gauss(1.0, GPU_CV)
            for t in HISTORY_KEYS
            for g in range(gpus)
        }
        points = []
        for run in range(1, runs + 1):
            day = f"2026-10-{run:02d}" if run <= 31 else f"2026-11-{run - 31:02d}"
            config = {"nvml.driver_version": DRIVERS[0], "node.profile": "h100-sxm5"}
            drift = {t: rng.gauss(1.0, drift_cv) for t in HISTORY_KEYS}
            values = {
                k: v * drift[template(k)[0]] * rng.gauss(1.0, run_cv) for k, v in base.items()
            }
            for plant in plants:
                if name not in plant.nodes or run < plant.start:
                    continue
                if plant.once and run != plant.start:
                    continue
                config.update(plant.config)
                factor = plant.factor * (1.0 + plant.per_run) ** (run - plant.start)
                for key in values:
                    if plant.metrics and template(key)[0] not in plant.metrics:
                        continue
                    if plant.gpu is None or key.startswith(f"gpu.{plant.gpu}."):
                        values[key] *= factor
            points.append(RunPoint(f"{day}T06:00:00Z", config, values))
        out.nodes[name] = points
    return out


def write_history(directory: Path, history: History) -> list[Path]:
    """A History as snapshot files (one per node and run, JSON), from one snapshot of the
    operator fleet's node edited per run: host, time, driver and the kernel samples
    (trials around each figure), so that the fleet reads it as it reads any snapshots."""
    import json

    reference = directory / "reference.json"
    save(snapshot_of(operator_spec("node0000", 0)), reference)
    text = json.loads(reference.read_text())
    reference.unlink()
    rng = random.Random(4100)
    paths = []
    for name, runs in history.nodes.items():
        for i, run in enumerate(runs):
            snap = dict(text, host=name, created=run.created)
            probes = []
            for probe in snap["probes"]:
                readings = []
                for r in probe.get("readings", []):
                    if r["key"] in run.config:
                        r = dict(r, value=run.config[r["key"]])
                    elif r["key"] == "host.hostname":
                        r = dict(r, value=name)
                    readings.append(r)
                probes.append(dict(probe, readings=readings))
            snap["probes"] = probes
            kernels = []
            for k in snap["kernels"]:
                metric = {"triad": HISTORY_KEYS[0], "h2d.local": HISTORY_KEYS[1]}.get(k["metric"])
                key = metric.format(gpu=k["device"][3:]) if metric else None
                if key in run.values and k["device"].startswith("gpu"):
                    k = dict(k, samples=list(_trials(rng, run.values[key], 5)))
                    k.pop("stats", None)
                kernels.append(k)
            snap["kernels"] = kernels
            path = directory / f"{name}-{i + 1:02d}.json"
            path.write_text(json.dumps(snap))
            paths.append(path)
    return paths
