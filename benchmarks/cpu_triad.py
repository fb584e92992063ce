"""gpudiag's CPU triad beside a C OpenMP triad (gcc -O3 -fopenmp) in the same run.

    python benchmarks/cpu_triad.py [--mib 256] [--trials 10] [--rounds 5]

Target: gpudiag's triad at least 90% of the C figure on this machine. Both use the same
array size, the same byte count (3 arrays) and the median of the trials after one warm-up;
C, gpudiag and its NumPy fallback run in turn, several rounds, since a shared VM's memory
bandwidth moves by a quarter from minute to minute.
"""

from __future__ import annotations

if __name__ == "__main__":  # gpudiag as users install it (benchmarks/_wheel.py)
    from _wheel import use_the_wheel

    use_the_wheel()

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from gpudiag.kernels import stream

C_SOURCE = r"""
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
static int cmp(const void* x, const void* y) {
  double a = *(const double*)x, b = *(const double*)y; return (a > b) - (a < b);
}
int main(int argc, char** argv) {
  long n = atol(argv[1]); int trials = atoi(argv[2]);
  double *a = malloc(n * sizeof(double)), *b = malloc(n * sizeof(double)),
         *c = malloc(n * sizeof(double));
  #pragma omp parallel for
  for (long i = 0; i < n; i++) { a[i] = 0.1; b[i] = 0.2; c[i] = 0.0; }
  double *gbs = malloc(trials * sizeof(double));
  for (int t = -1; t < trials; t++) {
    double start = omp_get_wtime();
    #pragma omp parallel for
    for (long i = 0; i < n; i++) a[i] = b[i] + 0.4 * c[i];
    double seconds = omp_get_wtime() - start;
    if (t >= 0) gbs[t] = 3.0 * sizeof(double) * n / seconds / 1e9;
  }
  qsort(gbs, trials, sizeof(double), cmp);
  printf("%f %f\n", gbs[trials / 2], a[n / 2]);
  return 0;
}
"""


def build_c_triad(directory: Path) -> Path:
    """The C reference, compiled with gcc -O3 -march=native -fopenmp."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise SystemExit("gcc is not installed: the C reference cannot be built")
    source, binary = directory / "triad.c", directory / "triad"
    source.write_text(C_SOURCE)
    subprocess.run(
        [gcc, "-O3", "-march=native", "-fopenmp", str(source), "-o", str(binary)], check=True
    )
    return binary


def c_triad(binary: Path, n: int, trials: int) -> float:
    out = subprocess.run(
        [str(binary), str(n), str(trials)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ},
    )
    return float(out.stdout.split()[0])


def gpudiag_triad(n: int, trials: int, engine: str) -> float:
    """The triad as `gpudiag run stream --device cpu` runs it: one pinned thread per CPU."""
    ops = stream.CpuOperations(
        n, np.float64, [[cpu] for cpu in sorted(os.sched_getaffinity(0))], engine=engine
    )
    try:
        results = stream.run_stream(ops, device="cpu", trials=trials, warmup=1)
    finally:
        ops.close()
    triad = next(r for r in results if r.metric == "triad")
    if triad.stats is None:
        raise SystemExit(f"gpudiag's triad failed: {triad.error}")
    return triad.stats.median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256, help="MiB per array")
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument(
        "--rounds", type=int, default=5, help="C, gpudiag and the fallback, in turn, this often"
    )
    args = parser.parse_args()
    n = args.mib * 2**20 // 8
    threads = os.cpu_count()
    figures: dict[str, list[float]] = {"c": [], "numba": [], "numpy": []}
    with tempfile.TemporaryDirectory() as tmp:
        binary = build_c_triad(Path(tmp))
        # in turn, so that a neighbour's load on a shared machine hits all three alike
        for _ in range(args.rounds):
            figures["c"].append(c_triad(binary, n, args.trials))
            figures["numba"].append(gpudiag_triad(n, args.trials, "numba"))
            figures["numpy"].append(gpudiag_triad(n, args.trials, "numpy"))
    median = {name: statistics.median(values) for name, values in figures.items()}
    ratios = [ours / c for ours, c in zip(figures["numba"], figures["c"], strict=True)]
    print(
        f"triad, {args.mib} MiB per array, FP64, {threads} threads; median over {args.rounds}"
        f" rounds of each one's median of {args.trials} trials:"
    )
    print(f"  C OpenMP (gcc -O3 -fopenmp):      {median['c']:.2f} GB/s")
    print(
        f"  gpudiag CPU (Numba loops):        {median['numba']:.2f} GB/s  ratio"
        f" {median['numba'] / median['c']:.1%} (per round {min(ratios):.0%}-{max(ratios):.0%})"
    )
    share = median["numpy"] / median["c"]
    print(f"  gpudiag fallback (NumPy blocks):   {median['numpy']:.2f} GB/s  ratio {share:.1%}")
    print("  target: gpudiag at least 90% of C (the fallback runs only where Numba is absent)")


if __name__ == "__main__":
    main()
