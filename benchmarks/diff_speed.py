"""Time of `gpudiag diff A B` on two 8-GPU snapshots, as a user runs it, and where that time
goes, beside a Python process that only starts and exits, in the same run; then the CPU
time of the whole command at each size of `--gpus` beside its reference.

    python benchmarks/diff_speed.py [--repeat 20] [--gpus 1,8,32,64] [--runs 7]

Target: under 200 ms for the diff step. The whole command (a process of its own, JSON
files, text report) is timed too, beside its reference (a Python process that json.loads
both files; target <= 3x), and split into: Python's start, importing gpudiag's
command line, loading the two files, the diff, and writing the report. The snapshots are
the healthy and faulty demo HGX H100 replays on the test suite's HGX-like host tree (about
2,100-2,300 readings each), with kernel results of 20 samples for 16 metrics on each side so the
bootstrap runs too.

By size (issue 44: `diff` <= 3x its reference at 1, 8, 32 and 64 GPUs, linear in size,
its cost a reading within 2x of `check`'s): the pairs `benchmarks/cli_speed.py` makes, the
demo HGX H100 exports (8 GPUs: the healthy and the faulty one, which differ in about 300
readings) and their GPU 0 copied to N GPUs for other sizes, each GPU its own bus id. CPU
time of the process tree (user + system), the minimum of `--runs` runs interleaved with
the reference's, a Python process that json.loads both files; the text report, as in a
pipe. The cost a reading is the slope between the smallest and the largest size over the
readings of both files; `check`'s, of the healthy file alone, beside it.
"""

from __future__ import annotations

if __name__ == "__main__":  # gpudiag as users install it (benchmarks/_wheel.py)
    from _wheel import use_the_wheel

    use_the_wheel()

import argparse
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from gpudiag.diff import diff_snapshots, report_text
from gpudiag.hostfs import HostFS
from gpudiag.model import KernelResult, ProbeStatus, Snapshot
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.probes import default_probes
from gpudiag.rulefile import load_rules
from gpudiag.session import LiveNode
from gpudiag.snapshot import dumps, loads, save

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
from hosttree import build_hgx_tree


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
    parser.add_argument(
        "--gpus", default="1,8,32,64", help="sizes of the whole command's pairs ('': none)"
    )
    parser.add_argument("--runs", type=int, default=7, help="runs of each size (minimum taken)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tree:
        root = build_hgx_tree(Path(tree))
        a = snapshot("demo-hgx-h100-healthy.toml", root, 1)
        b = snapshot("demo-hgx-h100-faulty.toml", root, 2)
    text_a, text_b = dumps(a, as_json=True), dumps(b, as_json=True)
    diff_times, load_times, report_times = [], [], []
    for _ in range(args.repeat):
        started = time.perf_counter()
        loaded_a, loaded_b = loads(text_a), loads(text_b)
        load_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        result = diff_snapshots(loaded_a, loaded_b)
        diff_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        report_text(result, loaded_a, loaded_b, False, False)
        report_times.append(time.perf_counter() - started)
    with tempfile.TemporaryDirectory() as folder:
        path_a, path_b = Path(folder) / "a.json", Path(folder) / "b.json"
        save(a, path_a)  # JSON, as pipelines keep them
        save(b, path_b)
        gpudiag = Path(sys.executable).with_name("gpudiag")  # the wheel's script
        command = [str(gpudiag), "diff", str(path_a), str(path_b)]
        loading = "import json\n" + "".join(
            f"with open({str(p)!r}) as f: json.load(f)\n" for p in (path_a, path_b)
        )
        whole, loaded = [], []
        for _ in range(args.repeat):  # interleaved: a loaded machine slows both alike
            whole += process_times(command, 1, allowed=(0, 1, 2))
            loaded += process_times([sys.executable, "-c", loading], 1)
    bare = process_times([sys.executable, "-c", "pass"], args.repeat)
    imports = process_times([sys.executable, "-c", "import gpudiag.cli"], args.repeat)
    ms = {
        name: statistics.median(times) * 1000
        for name, times in (
            ("whole", whole),
            ("loaded", loaded),
            ("bare", bare),
            ("imports", imports),
            ("load", load_times),
            ("diff", diff_times),
            ("report", report_times),
        )
    }
    rest = ms["whole"] - ms["imports"] - ms["load"] - ms["diff"] - ms["report"]
    print(
        f"diff step of two 8-GPU snapshots ({len(a.readings_by_key)} and "
        f"{len(b.readings_by_key)} readings, {len(result.metrics)} metrics bootstrapped): "
        f"median {ms['diff']:.0f} ms over {args.repeat} runs (target: under 200 ms)"
    )
    print(
        f"the whole `gpudiag diff a.json b.json` command: median {ms['whole']:.0f} ms wall"
        f" | reference, a Python process that json.loads both files: median"
        f" {ms['loaded']:.0f} ms | ratio {ms['whole'] / ms['loaded']:.2f} (target <= 3)"
    )
    print(
        f"  where it goes: Python's start {ms['bare']:.0f} ms, importing gpudiag's command "
        f"line {ms['imports'] - ms['bare']:.0f} ms, loading the two JSON snapshots "
        f"{ms['load']:.0f} ms, the diff {ms['diff']:.0f} ms, the text report "
        f"{ms['report']:.0f} ms; the rest (imports made on use: NumPy for the bootstrap, "
        f"the diff module) {rest:.0f} ms"
    )
    print(f"reference, a Python process that starts and exits: median {ms['bare']:.0f} ms")
    sizes = sorted(int(n) for n in args.gpus.split(",") if n.strip())
    if sizes:
        by_size(sizes, args.runs)


def by_size(sizes: list[int], runs: int) -> None:
    """The whole `gpudiag diff` at each size beside its reference (CPU, minimum of runs),
    and its cost a reading beside `check`'s."""
    import json
    import os

    from cli_speed import export, gpudiag_command, loading, many_gpus

    load = os.getloadavg()
    print(
        f"by size: CPU time, minimum of {runs} interleaved runs; load average {load[0]:.2f} "
        f"{load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs"
    )
    gpudiag = gpudiag_command()
    costs: dict[str, list[tuple[int, float]]] = {"diff": [], "check": []}
    with tempfile.TemporaryDirectory() as folder:
        exported = {}
        for name in ("healthy", "faulty"):
            exported[name] = Path(folder) / f"{name}.json"
            export(f"demo-hgx-h100-{name}.capture.json", exported[name])
        for gpus in sizes:
            pair = []
            for name, path in exported.items():
                if gpus == 8:  # the exports themselves
                    pair.append(path)
                    continue
                pair.append(Path(folder) / f"{name}-{gpus}.json")
                data = many_gpus(json.loads(path.read_text()), gpus)
                pair[-1].write_text(json.dumps(data, indent=1))
            readings = [json.loads(p.read_text())["end"]["readings"] for p in pair]
            command = [*gpudiag, "diff", str(pair[0]), str(pair[1]), "--format", "text"]
            cpu, ref = interleaved(command, loading(*pair), runs)
            print(
                f"  {gpus} GPU{'s' * (gpus != 1)} ({readings[0]} + {readings[1]} readings): "
                f"diff {cpu:.0f} ms"
                f" | reference {ref:.0f} ms | ratio {cpu / ref:.2f} (target <= 3:"
                f" {'met' if cpu <= 3 * ref else 'NOT met'})"
            )
            costs["diff"].append((sum(readings), cpu))
            if gpus in (min(sizes), max(sizes)) and len(sizes) > 1:
                cpu, _ = interleaved([*gpudiag, "check", str(pair[0])], loading(pair[0]), runs)
                costs["check"].append((readings[0], cpu))
    if len(sizes) > 1:
        slope = {
            what: (points[-1][1] - points[0][1]) / (points[-1][0] - points[0][0]) * 1000
            for what, points in costs.items()
        }
        print(
            f"  cost a reading ({min(sizes)} to {max(sizes)} GPUs): diff {slope['diff']:.1f} us"
            f" of the two files' readings, check {slope['check']:.1f} us | ratio "
            f"{slope['diff'] / slope['check']:.2f} (target <= 2)"
        )


def interleaved(command: list[str], reference: list[str], runs: int) -> tuple[float, float]:
    """(ms CPU of the command, ms CPU of the reference), the minima of `runs` runs of
    each, interleaved, after one uncounted run of each (bytecode caches written)."""
    from cli_speed import cpu_and_wall

    cpu_and_wall(command), cpu_and_wall(reference)
    mine, theirs = [], []
    for n in range(runs):
        pair = [(mine, command), (theirs, reference)]
        for times, argv in pair if n % 2 == 0 else reversed(pair):
            times.append(cpu_and_wall(argv)[0])
    return min(mine) * 1000, min(theirs) * 1000


def process_times(command: list[str], repeat: int, allowed: tuple[int, ...] = (0,)) -> list[float]:
    """Wall seconds of each run of a command, its output discarded."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run = subprocess.run(command, capture_output=True, check=False)
        times.append(time.perf_counter() - started)
        if run.returncode not in allowed:
            raise SystemExit(f"{command}: exit {run.returncode}: {run.stderr.decode()[-300:]}")
    return times


if __name__ == "__main__":
    main()
