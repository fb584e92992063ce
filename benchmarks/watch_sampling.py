"""What `gpudiag watch` costs: CPU time per sample of an 8-GPU node, and memory over a
long run (the history is a ring buffer), beside a reference in the same run.

    python benchmarks/watch_sampling.py [--rounds 2000] [--long 100000]

Target: under 1% of one core at a 1 s interval, i.e. under 10 ms of CPU per round of 8
GPUs. The node is the faulty demo HGX H100 replay (8 GPUs, one lost), so what is timed is
gpudiag's own work per sample (the calls, conversions, the row and the history), not
NVML's: no GPU exists here, and the driver's own cost per call cannot be measured without
one. The reference is the bare replay backend answering the same calls in a loop, the
floor gpudiag's layer adds to. Memory: the history's size (tracemalloc) after a tenth of
the long run and after all of it; a ring buffer keeps them equal.
"""

from __future__ import annotations

if __name__ == "__main__":  # gpudiag as users install it (benchmarks/_wheel.py)
    from _wheel import use_the_wheel

    use_the_wheel()

import argparse
import time
import tracemalloc

from gpudiag.demo import demo_file
from gpudiag.nvml import Nvml, NvmlError, ReplayBackend
from gpudiag.watch import COLUMNS, NUMERIC, History, Sample, format_rows, sample_node


def cpu_per_round(rounds: int, work) -> float:
    start = time.process_time()
    for _ in range(rounds):
        work()
    return (time.process_time() - start) / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2000, help="sampling rounds timed")
    parser.add_argument("--long", type=int, default=100_000, help="rounds of the memory run")
    args = parser.parse_args()
    backend = ReplayBackend.from_file(demo_file("faulty"))
    nvml = Nvml(backend)
    gpus = int(nvml.call("nvmlDeviceGetCount"))
    history = History()

    def ours() -> None:
        samples = sample_node(nvml, gpus)
        for sample in samples:
            history.add(sample)
        for _line in format_rows(samples, "table", first=False):
            pass

    def bare() -> None:
        for gpu in range(gpus):
            for column in COLUMNS:
                try:  # noqa: SIM105 (suppress() would add its own cost to the floor)
                    backend.call(column.function, gpu, *column.args)
                except NvmlError:
                    pass

    ours_s = cpu_per_round(args.rounds, ours)
    bare_s = cpu_per_round(args.rounds, bare)
    print(f"watch sampling of {gpus} GPUs (demo replay), CPU per round, {args.rounds} rounds:")
    print(
        f"  gpudiag watch round (sample, history, table row): {ours_s * 1e3:.3f} ms "
        f"= {ours_s * 100:.3f}% of one core at a 1 s interval (target under 1%)"
    )
    print(f"  reference, bare replay calls of the same columns: {bare_s * 1e3:.3f} ms")

    long_history = History(length=300)
    values = dict.fromkeys(NUMERIC, 1.0) | {"throttle": "idle"}
    tracemalloc.start()
    sizes = []
    for i in range(args.long):
        for gpu in range(gpus):
            long_history.add(Sample(float(i), gpu, dict(values)))
        if i + 1 in (args.long // 10, args.long):
            sizes.append(tracemalloc.get_traced_memory()[0])
    tracemalloc.stop()
    print(f"history memory over {args.long} rounds of {gpus} GPUs (ring of 300):")
    print(
        f"  after {args.long // 10} rounds {sizes[0] / 2**20:.2f} MiB, "
        f"after {args.long} rounds {sizes[1] / 2**20:.2f} MiB"
    )


if __name__ == "__main__":
    main()
