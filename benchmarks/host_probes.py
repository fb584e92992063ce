"""How long all host probes take together, beside a reference measured in the same run.

    python benchmarks/host_probes.py [--root DIR] [--repeat N]

Target: under 0.5 s of wall time for every host probe together. The reference is
py-cpuinfo's get_cpu_info(), the obvious library for the CPU part alone, whose
frequency measurement sleeps about a second; gpudiag reads /proc and /sys instead.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from gpudiag.hostfs import HostFS
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.probe import ProbeContext, run_probes
from gpudiag.probes import default_probes

NO_DRIVER = {"format": "gpudiag-nvml-replay", "version": 1, "init": {"error": "DriverNotLoaded"}}


def time_host_probes(root: Path, repeat: int) -> list[float]:
    """Wall seconds of each run of every host probe (NVML left out: it is not a host probe)."""
    probes = [p for p in default_probes() if p.name != "driver"]
    times = []
    for _ in range(repeat):
        context = ProbeContext(host=HostFS(root), nvml=Nvml(ReplayBackend(NO_DRIVER)))
        started = time.perf_counter()
        results = run_probes(probes, context)
        times.append(time.perf_counter() - started)
        failed = [r.name for r in results if r.status.value != "ok"]
        if failed:
            raise SystemExit(f"probes did not finish: {failed}")
    return times


def time_reference() -> float:
    """Wall seconds of one py-cpuinfo get_cpu_info() call."""
    import cpuinfo

    started = time.perf_counter()
    cpuinfo.get_cpu_info()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/"))
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    times = time_host_probes(args.root, args.repeat)
    probes = len(default_probes()) - 1
    print(
        f"gpudiag host probes ({probes} probes, root {args.root}, {args.repeat} runs): "
        f"median {statistics.median(times) * 1000:.1f} ms, min {min(times) * 1000:.1f} ms, "
        f"max {max(times) * 1000:.1f} ms (target: under 500 ms)"
    )
    reference = time_reference()
    print(f"reference, py-cpuinfo get_cpu_info() (CPU only, 1 run): {reference * 1000:.1f} ms")


if __name__ == "__main__":
    main()
