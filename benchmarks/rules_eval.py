"""Time of the full rule set on 8-GPU snapshots, beside the floor of touching every reading.

    python benchmarks/rules_eval.py [--snapshots 1000]

Target: under 2 ms per snapshot. The snapshots are the faulty demo HGX H100 replay on the
test suite's HGX-like host tree (about 1,800 readings each), each copy with its GPU
temperatures, clocks and power draws varied so no two are alike.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from gpudiag.hostfs import HostFS
from gpudiag.model import Reading
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.probe import ProbeContext
from gpudiag.probes import default_probes
from gpudiag.ruleengine import detect_profile, evaluate, load_profiles, load_rules
from gpudiag.session import probe_node

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from hosttree import build_hgx_tree  # noqa: E402

VARIED = (".temperature.gpu", ".clocks.sm", ".power.draw")


def base_readings() -> dict[str, Reading]:
    with tempfile.TemporaryDirectory() as tree:
        context = ProbeContext(
            host=HostFS(build_hgx_tree(Path(tree))),
            nvml=Nvml(ReplayBackend.from_file(REPO / "snapshots" / "demo-hgx-h100-faulty.toml")),
        )
        results = probe_node(default_probes(), context)
    return {r.key: r for result in results for r in result.readings}


def variants(readings: dict[str, Reading], count: int) -> list[dict[str, Reading]]:
    rng = random.Random(1)  # noqa: S311 - reproducible test data, not security
    out = []
    for _ in range(count):
        copy = dict(readings)
        for key, reading in readings.items():
            if reading.ok and key.endswith(VARIED) and isinstance(reading.value, (int, float)):
                copy[key] = replace(
                    reading, value=type(reading.value)(reading.value * rng.uniform(0.8, 1.2))
                )
        out.append(copy)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapshots", type=int, default=1000)
    args = parser.parse_args()
    rules, profiles = load_rules(), load_profiles()
    snapshots = variants(base_readings(), args.snapshots)
    per_snapshot, floor = [], []
    findings = 0
    for readings in snapshots:
        started = time.perf_counter()
        profile, ids = detect_profile(readings, profiles)
        findings += len(evaluate(rules, readings, (), profile, ids))
        per_snapshot.append(time.perf_counter() - started)
        started = time.perf_counter()
        sum(1 for r in readings.values() if r.ok)
        floor.append(time.perf_counter() - started)
    print(
        f"{len(rules)} rules on {len(snapshots)} snapshots of 8 GPUs "
        f"({len(snapshots[0])} readings each, {findings / len(snapshots):.0f} findings each): "
        f"median {statistics.median(per_snapshot) * 1000:.2f} ms per snapshot, "
        f"max {max(per_snapshot) * 1000:.2f} ms (target: under 2 ms)"
    )
    print(
        f"reference, one pass over the readings: median "
        f"{statistics.median(floor) * 1000:.3f} ms per snapshot"
    )


if __name__ == "__main__":
    main()
