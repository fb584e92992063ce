"""`gpudiag fleet --dataset` beside a plain Parquet write of the same rows, in the same run.

    python benchmarks/dataset_scale.py [--nodes 200 1000] [--gpus 8] [--repeat 3]

For each size, the generated fleet of benchmarks/fleet_scale.py (JSON snapshots with
kernel results, in a temporary directory, never committed) is loaded once (not timed);
then, `--repeat` times, interleaved, the least CPU time (process_time: every thread of
this process, Polars' included) of:

- append: `append_dataset` into an empty dataset folder (building the rows from the loaded
  fleet, the partitions, and one file per table and partition);
- reference: the same rows, already built, written by Polars' `write_parquet` directly as
  one file per table (no partitions, no temporary names): the floor of writing them.

The issue's target for append is 1.2 times the reference's CPU. Then the dataset is read
back (`read_dataset`: wall and CPU time), its report compared with the snapshots' (JSON,
equal or not), and one node's history (`node_history`) timed. No timing is judged in the
suite: a shared machine cannot.

    python benchmarks/dataset_scale.py --nodes --report-nodes 100000 --history-runs 52

The issue's scale targets: `--report-nodes N` makes an N-node dataset from the 1,000-node
one (copies with other node names and run ids, written as more parts: the snapshots of
100,000 nodes would take an hour to generate and load) and times `gpudiag fleet DATASET
--format json` in a child process: wall, CPU and peak memory (its maximum resident set),
stopped if it passes `--memory-limit` GiB (default 4: the machine is shared);
`--history-runs R` makes the 1,000 nodes' dataset R weekly runs deep and times one node's
history over them (`node_history`). Everything is made in a temporary folder removed at
the end; `uptime`'s load is printed before and after.
"""

from __future__ import annotations

if __name__ == "__main__":  # gpudiag as users install it (benchmarks/_wheel.py)
    from _wheel import use_the_wheel

    use_the_wheel()

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).parent))

from fleet_scale import generate

from gpudiag.fleet.analysis import analyse
from gpudiag.fleet.dataset import (
    TABLES,
    _rows,
    _time,
    append_dataset,
    node_history,
    run_id,
)
from gpudiag.fleet.dataset_read import read_dataset
from gpudiag.fleet.load import load_fleet
from gpudiag.fleet.report import report_json


def _cpu(action: object) -> float:
    start = time.process_time()
    action()  # type: ignore[operator]
    return time.process_time() - start


def reference_write(loaded: object, folder: Path) -> float:
    """The plain write's CPU: the rows are built first (not timed), then written."""
    runs = [(r, run_id(r), _time(r.created)) for r in loaded.runs]  # type: ignore[attr-defined]
    frames = _rows(loaded, runs)  # type: ignore[arg-type]
    folder.mkdir(parents=True, exist_ok=True)

    def write() -> None:
        for table in TABLES:
            frames[table].write_parquet(folder / f"{table}.parquet", statistics=True)

    return _cpu(write)


def one(nodes: int, gpus: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "snapshots").mkdir()
        generate(base / "snapshots", nodes, gpus)
        loaded = load_fleet([base / "snapshots"], workers=1)
        appends, references = [], []
        for i in range(repeat):
            target = base / f"ds{i}"
            appends.append(_cpu(lambda t=target: append_dataset(loaded, str(t))))
            references.append(reference_write(loaded, base / f"ref{i}"))
        append_cpu, reference_cpu = min(appends), min(references)
        size = sum(p.stat().st_size for p in (base / "ds0").rglob("*.parquet"))
        wall = time.perf_counter()
        cpu = time.process_time()
        back = read_dataset(base / "ds0")
        read_wall, read_cpu = time.perf_counter() - wall, time.process_time() - cpu
        same = report_json(analyse(back)) == report_json(
            analyse(load_fleet([base / "snapshots"], workers=1))
        )
        wall = time.perf_counter()
        history = node_history(base / "ds0", "node00001", "stream", "triad")
        history_s = time.perf_counter() - wall
        print(
            f"{nodes:>6} nodes x{gpus}: append CPU {append_cpu:.2f} s, reference "
            f"{reference_cpu:.2f} s, ratio {append_cpu / reference_cpu:.2f} (target 1.2); "
            f"dataset {size / 2**20:.1f} MiB; read back {read_wall:.2f} s wall "
            f"{read_cpu:.2f} s CPU, same report: {same}; one node's history "
            f"{history_s * 1000:.0f} ms ({history.height} rows)"
        )
        shutil.rmtree(base, ignore_errors=True)


def replicate(source: Path, target: Path, copies: int, weeks: bool) -> None:
    """`copies` copies of a dataset's rows: other nodes (node-cNNN), or with `weeks` the
    same nodes a week later each (a run's history), each copy more part files."""
    import polars as pl

    from gpudiag.fleet.dataset import MARKER, scan

    target.mkdir(parents=True)
    shutil.copy(source / MARKER, target / MARKER)
    for table in TABLES:
        frame = scan(source, table).collect()
        for i in range(copies):
            tag = f"c{i:03d}"
            changed = frame.with_columns(pl.col("run_id") + tag)
            if weeks:
                shift = pl.duration(days=7 * i)
                changed = changed.with_columns(
                    pl.col("time") + shift, pl.col("date") + pl.duration(days=7 * i)
                )
                if table == "runs":
                    changed = changed.with_columns(pl.col("path") + tag)
            else:
                changed = changed.with_columns(pl.col("node") + f"-{tag}")
                if table == "runs":
                    changed = changed.with_columns(pl.col("path") + tag)
            for (day, model), part in changed.group_by("date", "model"):
                folder = target / table / f"date={day}" / f"model={quote(str(model), safe='')}"
                folder.mkdir(parents=True, exist_ok=True)
                part.drop("date", "model").write_parquet(folder / f"part-{tag}.parquet")


def report_child(dataset: Path, limit_gib: float) -> tuple[float, float, float, bool]:
    """`gpudiag fleet DATASET --format json` in a child: wall s, CPU s, peak GiB, and
    whether it was stopped at the memory limit (its resident set polled every 20 ms).
    The peak is the child's own high-water mark (VmHWM, polled): its rusage's ru_maxrss
    starts at this process's resident set when forked (2 GiB here, after the fleet is
    generated and replicated), which Linux keeps across exec."""
    command = [sys.executable, "-m", "gpudiag", "fleet", str(dataset), "--format", "json"]
    start = time.perf_counter()
    child = subprocess.Popen(  # not from the checkout: `-m gpudiag` would find its sources
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=dataset.parent
    )
    stopped = False
    status = Path(f"/proc/{child.pid}/status")
    peak = 0
    while True:  # this child's own usage, not RUSAGE_CHILDREN's (any child's so far)
        pid, code, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            child.returncode = os.waitstatus_to_exitcode(code)
            break
        try:
            fields = dict(
                line.split(":", 1) for line in status.read_text().splitlines() if ":" in line
            )
            rss = int(fields["VmRSS"].split()[0])
            peak = max(peak, int(fields["VmHWM"].split()[0]))
        except (OSError, KeyError, ValueError):
            rss = 0
        if rss > limit_gib * 2**20:
            child.kill()
            stopped = True
        time.sleep(0.02)
    wall = time.perf_counter() - start
    return wall, usage.ru_utime + usage.ru_stime, peak / 2**20, stopped


def scale(
    report_nodes: int, history_runs: int, gpus: int, limit_gib: float, nodes: int = 1000
) -> None:
    """The issue's 100,000-node report and 52-run history (see the module's notes), from
    a dataset of `nodes` generated nodes."""
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "snapshots").mkdir()
        generate(base / "snapshots", nodes, gpus)
        append_dataset(load_fleet([base / "snapshots"], workers=1), str(base / "ds"))
        shutil.rmtree(base / "snapshots")
        if report_nodes:
            copies = max(1, report_nodes // nodes)
            cpu = time.process_time()
            replicate(base / "ds", base / "wide", copies, weeks=False)
            made = time.process_time() - cpu
            size = sum(p.stat().st_size for p in (base / "wide").rglob("*.parquet"))
            wall, child_cpu, peak, stopped = report_child(base / "wide", limit_gib)
            print(
                f"report over {copies * nodes} nodes ({size / 2**20:.0f} MiB of Parquet, made "
                f"in {made:.1f} s CPU): "
                + (
                    f"stopped at the {limit_gib:g} GiB memory limit after {wall:.1f} s"
                    if stopped
                    else f"{wall:.1f} s wall, {child_cpu:.1f} s CPU, peak {peak:.2f} GiB"
                )
                + " (targets: 60 s, 2 GB)"
            )
            shutil.rmtree(base / "wide")
        if history_runs:
            replicate(base / "ds", base / "deep", history_runs, weeks=True)
            best = math.inf
            for _ in range(3):
                wall = time.perf_counter()
                history = node_history(base / "deep", "node00001", "stream", "triad")
                best = min(best, time.perf_counter() - wall)
            runs = history["run_id"].n_unique()
            print(
                f"one node's history over {runs} runs of {nodes} nodes "
                f"({history.height} rows): {best * 1000:.0f} ms, the best of 3 (target 1 s)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="*", default=[200, 1000])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--report-nodes", type=int, default=0)
    parser.add_argument("--history-runs", type=int, default=0)
    parser.add_argument("--memory-limit", type=float, default=4.0, metavar="GIB")
    parser.add_argument("--base-nodes", type=int, default=1000, help="nodes copied to scale")
    args = parser.parse_args()
    print(f"before: {_uptime()}")
    for nodes in args.nodes:
        one(nodes, args.gpus, args.repeat)
    if args.report_nodes or args.history_runs:
        scale(args.report_nodes, args.history_runs, args.gpus, args.memory_limit, args.base_nodes)
    print(f"after: {_uptime()}")


def _uptime() -> str:
    """`uptime`'s load (the machine is shared: the figures depend on it)."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


if __name__ == "__main__":
    main()
