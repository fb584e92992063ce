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
"""

from __future__ import annotations

if __name__ == "__main__":  # gpudiag as users install it (benchmarks/_wheel.py)
    from _wheel import use_the_wheel

    use_the_wheel()

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from fleet_scale import generate

from gpudiag.fleet.analysis import analyse
from gpudiag.fleet.dataset import (
    TABLES,
    _rows,
    _time,
    append_dataset,
    node_history,
    read_dataset,
    run_id,
)
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[200, 1000])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for nodes in args.nodes:
        one(nodes, args.gpus, args.repeat)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
