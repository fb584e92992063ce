"""Time to diff two 8-GPU snapshots, beside the time to load them.

    python benchmarks/diff_speed.py [--repeat 20]

Target: under 200 ms for the diff. The snapshots are the healthy and faulty demo HGX H100
replays on the test suite's HGX-like host tree (about 1,800 readings each), with kernel
results of 20 samples for 16 metrics on each side so the bootstrap runs too.
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

from gpudiag.diff import diff_snapshots
from gpudiag.hostfs import HostFS
from gpudiag.model import KernelResult, ProbeStatus, Snapshot
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.probes import default_probes
from gpudiag.ruleengine import load_rules
from gpudiag.session import LiveNode
from gpudiag.snapshot import dumps, loads

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from hosttree import build_hgx_tree  # noqa: E402


def snapshot(replay: str, tree: Path, seed: int) -> Snapshot:
    node = LiveNode(
        HostFS(tree),
        Nvml(ReplayBackend.from_file(REPO / "snapshots" / replay)),
        default_probes(),
        load_rules(),
    )
    rng = random.Random(seed)  # noqa: S311 - test data
    kernels = tuple(
        KernelResult(
            kernel,
            f"gpu{g}",
            metric,
            "GB/s",
            ProbeStatus.OK,
            tuple(rng.gauss(3000, 15) for _ in range(20)),
        )
        for g in range(8)
        for kernel, metric in (("stream", "triad"), ("h2d", "copy"))
    )
    return replace(node.snapshot(), kernels=kernels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tree:
        root = build_hgx_tree(Path(tree))
        a = snapshot("demo-hgx-h100-healthy.toml", root, 1)
        b = snapshot("demo-hgx-h100-faulty.toml", root, 2)
    text_a, text_b = dumps(a), dumps(b)
    diff_times, load_times = [], []
    for _ in range(args.repeat):
        started = time.perf_counter()
        loaded_a, loaded_b = loads(text_a), loads(text_b)
        load_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        result = diff_snapshots(loaded_a, loaded_b)
        diff_times.append(time.perf_counter() - started)
    print(
        f"diff of two 8-GPU snapshots ({len(a.readings_by_key)} and {len(b.readings_by_key)} "
        f"readings, {len(result.metrics)} metrics bootstrapped): median "
        f"{statistics.median(diff_times) * 1000:.0f} ms over {args.repeat} runs "
        f"(target: under 200 ms)"
    )
    print(
        f"reference, loading the two TOML files: median "
        f"{statistics.median(load_times) * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
