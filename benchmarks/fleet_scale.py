"""`gpudiag fleet` on thousands of snapshots, beside a plain `json.load` loop doing the same
configuration grouping, in the same run.

    python benchmarks/fleet_scale.py [--nodes 1000 10000] [--gpus 8] [--growth]
    python benchmarks/fleet_scale.py --smallest        (what the test runs: seconds)

The fleet is generated in a temporary directory (never committed): the healthy demo HGX
H100 replay probed on the test suite's HGX-like host tree (tests/fleetgen.py), with kernel
results, written as JSON once per node with its own name, serials and jittered
temperatures and power draw; 1% of the nodes get a 500 W power cap on one GPU and a slower
triad there, 1% another driver. For fewer GPUs per node the readings of the other GPUs
(and their GPU pairs) are left out.

The files are synced to disk and read once before anything is timed, so both sides read
them from the page cache (writing 2.5 GB and reading it back at once otherwise times the
disk's write-back). Each command runs as a subprocess, as a user runs it; the peak memory
is the largest sum of the resident sizes of the process and its children (the reading
workers), sampled every 20 ms. Targets (issue 19) on a 2-core machine: 10,000 8-GPU
snapshots in under 30 s and 4 GB, 1,000 in under 5 s. The reading floor is also printed:
msgspec parsing alone (untyped), measured on the first 200 files and scaled to all of them,
on one core. Then the fleet is written by `--parquet` (not timed) and `gpudiag fleet
FILE.parquet` times reading it back: the file's size, the time and peak memory, and whether
its report is the same as from the JSON files.
"""

from __future__ import annotations

import argparse
import copy
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import msgspec

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from gpudiag.snapshot import snapshot_to_dict  # noqa: E402

from fleetgen import GPUS, base_snapshot, kernels  # noqa: E402

REFERENCE = r"""
import json, sys
from collections import defaultdict
from pathlib import Path
from gpudiag.catalog import is_configuration

groups = defaultdict(list)
kind = {}
for path in sorted(Path(sys.argv[1]).glob("*.json")):
    with open(path, encoding="utf-8") as stream:
        data = json.load(stream)
    config = []
    for probe in data["probes"]:
        for r in probe["readings"]:
            key = r["key"]
            if key not in kind:
                kind[key] = is_configuration(key)
            if kind[key]:
                value = r.get("value")
                value = tuple(value) if isinstance(value, list) else value
                config.append((key, r["status"], value))
    groups[tuple(config)].append(data["host"])
print(len(groups), "groups")
"""


def _gpus_of(key: str) -> list[int]:
    parts = key.split(".")
    if parts[0] == "gpu" and parts[1].isdigit():
        return [int(parts[1])]
    if parts[0] == "topo" and len(parts) > 3 and parts[2].isdigit():
        return [int(p) for p in parts[2:4] if p.isdigit()]
    return []


def template(gpus: int) -> dict[str, Any]:
    """The base snapshot as plain data, cut down to `gpus` GPUs, with kernel results and
    the base's findings (an 8-GPU file is about 320 KB, as a real export)."""
    snapshot = base_snapshot()
    rng = random.Random(0)  # noqa: S311 - test data
    measured = replace(snapshot, kernels=kernels(rng, {}, {}, 120.0))
    data = snapshot_to_dict(measured)
    data["kernels"] = [
        k
        for k in data["kernels"]
        if not k["device"].startswith("gpu") or int(k["device"][3:]) < gpus
    ]
    for probe in data["probes"]:
        probe["readings"] = [
            r for r in probe["readings"] if all(g < gpus for g in _gpus_of(r["key"]))
        ]
    data["end"] = {
        "probes": len(data["probes"]),
        "readings": sum(len(p["readings"]) for p in data["probes"]),
        "kernels": len(data["kernels"]),
        "findings": len(data["findings"]),
    }
    return data


def generate(directory: Path, nodes: int, gpus: int) -> int:
    """Write the fleet; returns its size in bytes."""
    data = template(gpus)
    shared = {r["key"]: r for p in data["probes"] for r in p["readings"]}
    rng = random.Random(nodes * 100 + gpus)  # noqa: S311 - test data
    total = 0
    for number in range(1, nodes + 1):
        node, readings = data, shared
        if number % 100 in (3, 7):  # planted: a copy, so the others stay as they were
            node = copy.deepcopy(data)
            readings = {r["key"]: r for p in node["probes"] for r in p["readings"]}
        name = f"node{number:05d}"
        node["host"] = name
        readings["host.hostname"]["value"] = name
        for gpu in range(gpus):
            readings[f"gpu.{gpu}.serial"]["value"] = f"{number:07d}{gpu:03d}"
            readings[f"gpu.{gpu}.temperature.gpu"]["value"] = 38 + rng.randint(0, 5)
            readings[f"gpu.{gpu}.power.draw"]["value"] = round(rng.uniform(65.0, 75.0), 1)
        if number % 100 == 3:
            readings["gpu.0.power.limit"]["value"] = 500.0
            for k in node["kernels"]:
                if (k["kernel"], k["device"]) == ("stream", "gpu0"):
                    k["samples"] = [s * 0.85 for s in k["samples"]]
        if number % 100 == 7:
            readings["nvml.driver_version"]["value"] = "570.86.15"
        raw = msgspec.json.encode(node)
        (directory / f"{name}.json").write_bytes(raw)
        total += len(raw)
    return total


def _tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its descendants."""
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        try:
            with open(f"/proc/{current}/statm") as stream:
                total += int(stream.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as stream:
                    stack.extend(int(c) for c in stream.read().split())
        except (OSError, ValueError):
            continue
    return total


def measure(command: list[str]) -> tuple[float, int, str]:
    """Wall seconds, peak resident bytes of the process tree, and stdout."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        process = subprocess.Popen(command, stdout=out, stderr=err)
        peak = 0
        while process.poll() is None:
            peak = max(peak, _tree_rss(process.pid))
            time.sleep(0.02)
        seconds = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        text, problems = out.read().decode(), err.read().decode()
    if process.returncode not in (0, 1):
        raise SystemExit(f"{command[:4]} exited {process.returncode}: {problems}")
    return seconds, peak, text


def parse_floor(directory: Path, count: int) -> float:
    """Seconds msgspec alone needs to parse `count` files, from the first 200 (one core)."""
    paths = sorted(directory.glob("*.json"))[:200]
    started = time.perf_counter()
    for path in paths:
        msgspec.json.decode(path.read_bytes())
    return (time.perf_counter() - started) / len(paths) * count


def run(nodes: int, gpus: int) -> dict[str, Any]:
    """Generate one fleet, then time gpudiag and the reference on it."""
    with tempfile.TemporaryDirectory(prefix="gpudiag-fleet-") as tmp:
        directory = Path(tmp)
        size = generate(directory, nodes, gpus)
        os.sync()  # the written files reach the disk before anything is timed
        for path in directory.iterdir():  # and both sides read them from the page cache
            path.read_bytes()
        floor = parse_floor(directory, nodes)
        fleet_s, fleet_peak, report = measure(
            [sys.executable, "-m", "gpudiag", "fleet", str(directory), "--format", "json"]
        )
        ref_s, ref_peak, ref_out = measure([sys.executable, "-c", REFERENCE, str(directory)])
        # the same fleet written by --parquet (not timed), then read back by itself
        parquet = directory.parent / f"{directory.name}.parquet"
        try:
            measure(
                [
                    sys.executable,
                    "-m",
                    "gpudiag",
                    "fleet",
                    str(directory),
                    "--format",
                    "json",
                    "--parquet",
                    str(parquet),
                ]
            )
            pq_size = parquet.stat().st_size
            pq_s, pq_peak, pq_report = measure(
                [sys.executable, "-m", "gpudiag", "fleet", str(parquet), "--format", "json"]
            )
        finally:
            parquet.unlink(missing_ok=True)
    return {
        "nodes": nodes,
        "gpus": gpus,
        "gb": size / 1e9,
        "floor": floor,
        "fleet_s": fleet_s,
        "fleet_mb": fleet_peak / 2**20,
        "groups": len(msgspec.json.decode(report)["groups"]),
        "ref_s": ref_s,
        "ref_mb": ref_peak / 2**20,
        "ref_groups": int(ref_out.split()[0]),
        "pq_mb": pq_size / 1e6,
        "pq_s": pq_s,
        "pq_peak_mb": pq_peak / 2**20,
        "pq_same": msgspec.json.decode(pq_report) == msgspec.json.decode(report),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--gpus", type=int, nargs="+", default=[GPUS])
    parser.add_argument(
        "--growth", action="store_true", help="also 2 and 4 GPUs per node at the smallest N"
    )
    parser.add_argument("--smallest", action="store_true", help="50 nodes of 2 and of 8 GPUs")
    args = parser.parse_args()
    cases = [(n, g) for g in args.gpus for n in args.nodes]
    if args.growth:
        cases += [(min(args.nodes), g) for g in (2, 4) if g not in args.gpus]
    if args.smallest:
        cases = [(50, 2), (50, 8)]
    load = os.getloadavg()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {os.cpu_count()} CPUs")
    print(
        f"{'nodes':>6} {'GPUs':>4} {'JSON GB':>7} {'parse floor s':>13} {'gpudiag s':>9} "
        f"{'peak MB':>8} {'json.load s':>11} {'peak MB':>8} groups           "
        f"{'Parquet MB':>10} {'from Parquet s':>14} {'peak MB':>8} report"
    )
    for nodes, gpus in cases:
        r = run(nodes, gpus)
        print(
            f"{r['nodes']:>6} {r['gpus']:>4} {r['gb']:>7.2f} {r['floor']:>13.1f} "
            f"{r['fleet_s']:>9.1f} {r['fleet_mb']:>8.0f} {r['ref_s']:>11.1f} {r['ref_mb']:>8.0f} "
            f"{r['groups']} (reference {r['ref_groups']})  {r['pq_mb']:>10.2f} "
            f"{r['pq_s']:>14.1f} {r['pq_peak_mb']:>8.0f} "
            + ("same" if r["pq_same"] else "DIFFERENT"),
            flush=True,
        )
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
