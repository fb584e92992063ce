"""`gpudiag fleet` on thousands of snapshots beside its decode floor, in the same run.

    python benchmarks/fleet_scale.py [--nodes 1000 10000] [--gpus 8] [--fleet demo generated]
                                     [--repeat 3] [--growth]
    python benchmarks/fleet_scale.py --smallest        (what the test runs: seconds)

Two fleets, each generated in a temporary directory (never committed):
- demo: the 8-GPU export of the healthy demo replay (`gpudiag --replay snapshots/demo-hgx-
  h100-healthy.capture.json --export x.json`, about 2,550 readings, no kernel results),
  copied once per node with the node's own host name (issue 29's fleet);
- generated: the healthy demo HGX H100 replay probed on the test suite's HGX-like host tree
  (tests/fleetgen.py), with kernel results, written as JSON once per node with its own
  name, serials and jittered temperatures and power draw; 1% of the nodes get a 500 W
  power cap on one GPU and a slower triad there, 1% another driver. For fewer GPUs per node
  the readings of the other GPUs (and their GPU pairs) are left out.

The files are synced to disk and read once before anything is timed, so every side reads
them from the page cache. Each command runs as a subprocess, as a user runs it, `--repeat`
times, interleaved with its reference; times are the least of the runs, memory the most.
CPU time is user + system of the whole process tree (the command and the reading workers it starts,
all reaped: RUSAGE_CHILDREN); peak memory is the largest sum of the resident sizes of the
process and its descendants, sampled every 20 ms. The reference, the decode floor, is one
process that reads each file's bytes and decodes them with `msgspec.json.decode`
(untyped); issue 29's target is `gpudiag fleet` within 1.5 times its CPU time, and 10,000
8-GPU nodes under 30 s and 2 GB on an idle 2-core machine. Then the fleet is written by
`--parquet` (not timed; its peak memory is the last column, target at 10,000 8-GPU nodes:
under 1.5 GB) and `gpudiag fleet FILE.parquet` is timed reading it back (target: 10,000
nodes under 5 s), with whether its report is the report from the JSON files. The
configuration groups found are checked against the groups planted (1 in the demo fleet;
in the generated one, the power cap and the driver make 2 more where N reaches them).
"""

from __future__ import annotations

if __name__ == "__main__":  # gpudiag as users install it (benchmarks/_wheel.py)
    from _wheel import use_the_wheel

    use_the_wheel()

import argparse
import copy
import os
import random
import resource
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

from gpudiag.snapshot import snapshot_to_dict

from fleetgen import GPUS, base_snapshot, kernels

FLOOR = r"""
import sys
from pathlib import Path

import msgspec

decode = msgspec.json.decode
for path in sorted(Path(sys.argv[1]).glob("*.json")):
    decode(path.read_bytes())
"""
DEMO_CAPTURE = REPO / "snapshots" / "demo-hgx-h100-healthy.capture.json"


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


def generate_demo(directory: Path, nodes: int) -> int:
    """The demo export copied once per node with its own host name; returns its size."""
    export = directory.parent / f"{directory.name}-demo.json"
    subprocess.run(
        [sys.executable, "-m", "gpudiag", "--replay", str(DEMO_CAPTURE), "--export", str(export)],
        check=True,
        capture_output=True,
        cwd=directory.parent,  # not the checkout: `-m gpudiag` would find its sources there
    )
    raw = export.read_bytes()
    export.unlink()
    host = msgspec.json.decode(raw)["host"].encode()
    total = 0
    for number in range(1, nodes + 1):
        name = f"node{number:05d}"
        copy_ = raw.replace(b'"' + host + b'"', b'"' + name.encode() + b'"')
        (directory / f"{name}.json").write_bytes(copy_)
        total += len(copy_)
    return total


def planted_groups(kind: str, nodes: int) -> int:
    """The configuration groups the generator made: the demo fleet's nodes are alike; the
    generated one plants a power cap on node N where N % 100 == 3, a driver where 7."""
    if kind == "demo":
        return 1
    return (
        1
        + any(n % 100 == 3 for n in range(1, nodes + 1))
        + any(n % 100 == 7 for n in range(1, nodes + 1))
    )


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


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(command: list[str]) -> tuple[float, float, int, str]:
    """CPU seconds of the process tree (user + system, workers included), wall seconds,
    peak resident bytes of the tree, and stdout."""
    cpu = _children_cpu()
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        # from outside the checkout, where `-m gpudiag` would find its sources instead
        process = subprocess.Popen(command, stdout=out, stderr=err, cwd=tempfile.gettempdir())
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
    return _children_cpu() - cpu, seconds, peak, text


def run(kind: str, nodes: int, gpus: int, repeat: int) -> dict[str, Any]:
    """Generate one fleet, then time gpudiag and the floor on it, interleaved."""
    with tempfile.TemporaryDirectory(prefix="gpudiag-fleet-") as tmp:
        directory = Path(tmp) / "fleet"
        directory.mkdir()
        size = (
            generate_demo(directory, nodes) if kind == "demo" else generate(directory, nodes, gpus)
        )
        os.sync()  # the written files reach the disk before anything is timed
        for path in directory.iterdir():  # and every side reads them from the page cache
            path.read_bytes()
        fleet = [sys.executable, "-m", "gpudiag", "fleet", str(directory), "--format", "json"]
        floor, ours = [], []
        for _ in range(repeat):
            floor.append(measure([sys.executable, "-c", FLOOR, str(directory)]))
            ours.append(measure(fleet))
        report = ours[0][3]
        # the same fleet written by --parquet (not timed), then read back by itself
        parquet = Path(tmp) / "fleet.parquet"
        written = measure([*fleet, "--parquet", str(parquet)])
        pq_size = parquet.stat().st_size
        pq = [
            measure([sys.executable, "-m", "gpudiag", "fleet", str(parquet), "--format", "json"])
            for _ in range(repeat)
        ]
    floor_cpu, cpu = min(r[0] for r in floor), min(r[0] for r in ours)
    return {
        "kind": kind,
        "nodes": nodes,
        "gpus": gpus,
        "gb": size / 1e9,
        "floor": floor_cpu,
        "cpu": cpu,
        "ratio": cpu / floor_cpu,
        "wall": min(r[1] for r in ours),
        "peak": max(r[2] for r in ours) / 2**20,
        "groups": len(msgspec.json.decode(report)["groups"]),
        "planted": planted_groups(kind, nodes),
        "pq_mb": pq_size / 1e6,
        "pq_cpu": min(r[0] for r in pq),
        "pq_wall": min(r[1] for r in pq),
        "pq_peak": max(r[2] for r in pq) / 2**20,
        "write_peak": written[2] / 2**20,
        "pq_same": all(msgspec.json.decode(r[3]) == msgspec.json.decode(report) for r in pq),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--gpus", type=int, nargs="+", default=[GPUS])
    parser.add_argument(
        "--fleet", nargs="+", choices=("demo", "generated"), default=["demo", "generated"]
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs of each side (least taken)")
    parser.add_argument(
        "--growth", action="store_true", help="also 2 and 4 GPUs per node at the smallest N"
    )
    parser.add_argument("--smallest", action="store_true", help="50 nodes, each fleet, once")
    args = parser.parse_args()
    cases = [
        (kind, n, g)
        for kind in args.fleet
        for g in (args.gpus if kind == "generated" else [GPUS])
        for n in args.nodes
    ]
    if args.growth:
        cases += [("generated", min(args.nodes), g) for g in (2, 4) if g not in args.gpus]
    repeat = args.repeat
    if args.smallest:
        cases, repeat = [("demo", 50, 8), ("generated", 50, 2)], 1
    load = os.getloadavg()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {os.cpu_count()} CPUs")
    print(
        f"{'fleet':>9} {'nodes':>6} {'GPUs':>4} {'JSON GB':>7} {'floor CPU s':>11} "
        f"{'gpudiag CPU s':>13} {'ratio':>5} {'(target':>7} {'wall s':>6} {'peak MB':>7} "
        f"groups (planted) {'Parquet MB':>10} {'CPU s':>5} {'wall s':>6} {'peak MB':>7} report "
        "--parquet-peak-MB"
    )
    for kind, nodes, gpus in cases:
        r = run(kind, nodes, gpus, repeat)
        print(
            f"{r['kind']:>9} {r['nodes']:>6} {r['gpus']:>4} {r['gb']:>7.2f} {r['floor']:>11.2f} "
            f"{r['cpu']:>13.2f} {r['ratio']:>5.2f} {'1.5)':>7} {r['wall']:>6.1f} "
            f"{r['peak']:>7.0f} {r['groups']} (planted {r['planted']}) {r['pq_mb']:>10.2f} "
            f"{r['pq_cpu']:>5.2f} {r['pq_wall']:>6.1f} {r['pq_peak']:>7.0f} "
            + ("same" if r["pq_same"] else "DIFFERENT")
            + f" {r['write_peak']:.0f}",
            flush=True,
        )
    load = os.getloadavg()
    print(f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
