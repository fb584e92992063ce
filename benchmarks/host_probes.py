"""How long every host probe takes together, beside the tools a user would run instead, timed
the same way in the same run.

    python benchmarks/host_probes.py [--root DIR] [--repeat N]

Target: under 0.5 s of wall time for every host probe together. Two figures for gpudiag:
the probes inside a running gpudiag (what the TUI and `--export` wait for), and a whole
process that imports gpudiag and runs them (what a one-shot command pays, as lscpu does).
The references are `lscpu` and `lstopo` (hwloc), where installed, each run as a process
N times: they read less (CPU and topology only) than gpudiag's probes do.
"""

from __future__ import annotations

if __name__ == "__main__":  # gpudiag as users install it (benchmarks/_wheel.py)
    from _wheel import use_the_wheel

    use_the_wheel()

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from gpudiag.hostfs import HostFS
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.probe import Need, ProbeContext, run_probes
from gpudiag.probes import default_probes

NO_DRIVER = {"format": "gpudiag-nvml-replay", "version": 1, "init": {"error": "DriverNotLoaded"}}
ONE_PROCESS = """
import sys
from pathlib import Path
from gpudiag.hostfs import HostFS
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.probe import Need, ProbeContext, run_probes
from gpudiag.probes import default_probes
replay = {"format": "gpudiag-nvml-replay", "version": 1, "init": {"error": "DriverNotLoaded"}}
probes = [p for p in default_probes() if Need.NVML not in p.needs]
context = ProbeContext(host=HostFS(Path(sys.argv[1])), nvml=Nvml(ReplayBackend(replay)))
results = run_probes(probes, context)
sys.exit(sum(r.status.value != "ok" for r in results))
"""


def host_probes() -> list:
    """Every probe that reads the host (the NVML ones need a GPU driver, not the host)."""
    return [p for p in default_probes() if Need.NVML not in p.needs]


def time_in_process(root: Path, repeat: int) -> list[float]:
    """Wall seconds of each run of every host probe inside this process."""
    times = []
    for _ in range(repeat):
        context = ProbeContext(host=HostFS(root), nvml=Nvml(ReplayBackend(NO_DRIVER)))
        started = time.perf_counter()
        results = run_probes(host_probes(), context)
        times.append(time.perf_counter() - started)
        failed = [r.name for r in results if r.status.value != "ok"]
        if failed:
            raise SystemExit(f"probes did not finish: {failed}")
    return times


def time_command(command: list[str], repeat: int) -> list[float]:
    """Wall seconds of each run of a command, its output discarded."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append(time.perf_counter() - started)
    return times


def line(label: str, times: list[float]) -> str:
    return (
        f"{label}: median {statistics.median(times) * 1000:.1f} ms, "
        f"min {min(times) * 1000:.1f} ms, max {max(times) * 1000:.1f} ms ({len(times)} runs)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/"))
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    count = len(host_probes())
    inside = time_in_process(args.root, args.repeat)
    print(line(f"gpudiag, {count} host probes inside gpudiag (root {args.root})", inside))
    process = time_command([sys.executable, "-c", ONE_PROCESS, str(args.root)], args.repeat)
    print(line("gpudiag, the same as a process of its own (Python start and imports)", process))
    print("target: under 500 ms for the probes inside gpudiag")
    references = {
        "lscpu": ["lscpu"],
        "lstopo (hwloc)": [shutil.which("lstopo-no-graphics") or "lstopo", "--of", "console"],
    }
    for name, command in references.items():
        if shutil.which(command[0]) is None:
            print(f"reference, {name}: not installed here")
            continue
        print(line(f"reference, {name} as a process", time_command(command, args.repeat)))


if __name__ == "__main__":
    main()
