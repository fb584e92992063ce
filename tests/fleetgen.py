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
import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpudiag.hostfs import HostFS
from gpudiag.model import KernelResult, ProbeStatus, Reading, Snapshot
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
