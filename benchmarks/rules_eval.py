"""What judging an 8-GPU snapshot costs, as a `gpudiag check` process pays it, beside the
floor of touching every reading once, in the same run.

    python benchmarks/rules_eval.py [--snapshots 1000]

Target (issue 29): under 2 ms per snapshot with the rule plan built. The figures are
`session.with_findings` (what `check`, `--export` and the TUI call): first with nothing
cached from an earlier snapshot (the profiles parsed and the rule plan built afresh, as
in a new `gpudiag check` process), then the same snapshot again with the plan cached, as
when a fleet of one shape is judged in one process, or the TUI judges again. The three
are taken in turn for each snapshot, so that a machine loaded by others weighs on all
alike; the ratios are each snapshot's to its own floor. The snapshots are the faulty
demo HGX H100 replay on the test suite's HGX-like host tree (about 2,000 readings each),
each copy with its GPU temperatures, clocks and power draws varied so no two are alike.
"""

from __future__ import annotations

if __name__ == "__main__":  # gpudiag as users install it (benchmarks/_wheel.py)
    from _wheel import use_the_wheel

    use_the_wheel()

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from gpudiag import catalog, profiles, ruleengine, shipped
from gpudiag.hostfs import HostFS
from gpudiag.model import ProbeResult, ProbeStatus, Reading, Snapshot
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.probe import ProbeContext
from gpudiag.probes import default_probes
from gpudiag.rulefile import load_rules
from gpudiag.session import probe_node, with_findings

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from hosttree import build_hgx_tree

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


def as_snapshot(readings: dict[str, Reading]) -> Snapshot:
    probe = ProbeResult("all", ProbeStatus.OK, 0.0, tuple(readings.values()))
    return Snapshot("node", "2026-01-01T00:00:00Z", "bench", probes=(probe,))


def forget_caches() -> None:
    """What a new process starts without: the parsed profiles, the rule plans and the
    catalog of readings."""
    profiles._shipped_profiles.cache_clear()
    ruleengine._PLANS.clear()
    catalog.key_former.cache_clear()
    shipped.catalog.cache_clear()
    shipped._known_sources.cache_clear()


def median_ms(times: list[float]) -> str:
    return (
        f"median {statistics.median(times) * 1000:.2f} ms, min {min(times) * 1000:.2f} ms, "
        f"max {max(times) * 1000:.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapshots", type=int, default=1000)
    args = parser.parse_args()
    rules = load_rules()
    snapshots = [as_snapshot(r) for r in variants(base_readings(), args.snapshots)]
    cold, warm, floor = [], [], []
    findings = 0
    for snapshot in snapshots:
        forget_caches()
        started = time.perf_counter()
        findings += len(with_findings(snapshot, rules).findings)
        cold.append(time.perf_counter() - started)
        started = time.perf_counter()
        with_findings(snapshot, rules)
        warm.append(time.perf_counter() - started)
        started = time.perf_counter()
        sum(1 for r in snapshot.readings_by_key.values() if r.ok)
        floor.append(time.perf_counter() - started)
    shape = (
        f"{len(rules)} rules on {len(snapshots)} snapshots of 8 GPUs "
        f"({len(snapshots[0].readings_by_key)} readings, "
        f"{findings / len(snapshots):.0f} findings each)"
    )
    ratio = [w / f for w, f in zip(warm, floor, strict=True)]
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{shape}, load average {load}")
    print(f"as a `gpudiag check` process pays it (plan built afresh): {median_ms(cold)}")
    print(
        f"the same with the rule plan cached (one process, many nodes): {median_ms(warm)} "
        f"(target: 2 ms), {statistics.median(ratio):.1f}x the floor"
    )
    print(f"reference, one pass over the readings: {median_ms(floor)}")


if __name__ == "__main__":
    main()
