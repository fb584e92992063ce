"""A longer fuzzing run of every loader than the suite's (tests/test_fuzz_loaders.py):
mutated seed files (tests/fuzz_inputs.py; plus real nvidia-smi outputs from
../shared/realdata when present) fed to every loader of tests/fuzz_inputs.py: snapshot,
nvidia-smi import, rules, NVML replay, capture, a capture's NVML answers through the
probes, rules and export (nvml), the fleet's fast path and report, a capture's samples as
watch reads them, and the Slurm health check's settings file. The edits include numbers
no reading holds (10**400, 2**1024, ...) and line breaks put at the start of strings.
Prints, per loader, the iterations, how many inputs were accepted and refused (with the
loader's one-line error), the crashes (any other exception, a control character let
through, a line break in a one-line field, a report line a line break forged) and the
slowest input; the first crashing input of each loader is written to
fuzz-crash-LOADER.txt.

    python benchmarks/fuzz_loaders.py [--seconds 30 | --inputs 10000] [--seed 1]
                                      [--only fleet,samples]

Exit code 1 when anything crashed or one input took more than 2 s.
"""

from __future__ import annotations

if __name__ == "__main__":  # gpudiag as users install it (benchmarks/_wheel.py)
    from _wheel import use_the_wheel

    use_the_wheel()

import argparse
import random
import shutil
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fuzz_inputs import LOADERS, REPO, mutate, random_edits, seeds, work_dir

SLOW_S = 2.0


def realdata_seeds() -> dict[str, list[str]]:
    """A few real nvidia-smi outputs, when ../shared/realdata is beside the checkout."""
    base = REPO.parent / "shared" / "realdata"
    found: dict[str, list[str]] = {"import": []}
    for folder in ("nvidia-smi-xml", "nvidia-smi-q", "topo", "nvlink"):
        for path in sorted((base / folder).glob("*"))[:3]:
            if path.is_file() and path.stat().st_size < 2_000_000:
                found["import"].append(path.read_text(errors="replace"))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--seconds", type=float, default=30.0, help="per loader (default 30)")
    budget.add_argument("--inputs", type=int, help="inputs per loader, whatever they take")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", help="comma-separated loaders (default: every one)")
    args = parser.parse_args()
    chosen = args.only.split(",") if args.only else list(LOADERS)
    rng = random.Random(args.seed)  # noqa: S311 (reproducible inputs, not secrets)
    all_seeds = seeds()
    for loader, extra in realdata_seeds().items():
        all_seeds[loader] += extra
    work = work_dir()
    failed = False
    print(
        f"{'loader':<10} {'iterations':>10} {'per s':>7} {'accepted':>9} {'refused':>8} "
        f"{'crashes':>8} {'slowest':>8}"
    )
    total = crashes_total = 0
    try:
        for loader, load in ((name, LOADERS[name]) for name in chosen):
            counts = {"accepted": 0, "refused": 0, "crashes": 0}
            slowest = 0.0
            load(all_seeds[loader][0], work)  # warm up: imports (Polars) are not an input's
            started = time.perf_counter()
            iterations = 0
            while (
                iterations < args.inputs
                if args.inputs
                else time.perf_counter() - started < args.seconds
            ):
                text = mutate(rng.choice(all_seeds[loader]), random_edits(rng))
                t0 = time.perf_counter()
                try:
                    counts["accepted" if load(text, work) else "refused"] += 1
                except Exception:
                    if counts["crashes"] == 0:
                        crash = Path(f"fuzz-crash-{loader}.txt")
                        crash.write_text(text + "\n\n" + traceback.format_exc(), errors="replace")
                        print(
                            f"  crash in {loader}: {traceback.format_exc().splitlines()[-1]}"
                            f" (input in {crash})"
                        )
                    counts["crashes"] += 1
                slowest = max(slowest, time.perf_counter() - t0)
                iterations += 1
            elapsed = time.perf_counter() - started
            print(
                f"{loader:<10} {iterations:>10} {iterations / elapsed:>7.0f} "
                f"{counts['accepted']:>9} {counts['refused']:>8} {counts['crashes']:>8} "
                f"{slowest * 1000:>6.0f}ms"
            )
            total += iterations
            crashes_total += counts["crashes"]
            failed = failed or counts["crashes"] > 0 or slowest > SLOW_S
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"total: {total} iterations, {crashes_total} crashes")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
