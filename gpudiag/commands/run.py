"""`gpudiag run KERNEL...`: run measurement kernels and print the results."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from gpudiag import inputs
from gpudiag.commands.common import UsageError
from gpudiag.kernels.plans import (
    BURN_PRECISIONS,
    DTYPE_NAMES,
    GPU_STREAM_BYTES,
    KERNELS,
    KernelPlan,
)

CPU_STREAM_BYTES = 256 * 2**20  # per array: well beyond a CPU's last-level cache

# What each kernel of `gpudiag run` measures, one line each (its --help lists them).
KERNEL_HELP = {
    "stream": "memory bandwidth: copy, scale, add, triad, dot (GB/s)",
    "gemm": "matrix multiply throughput (TFLOP/s), every product checked",
    "copy": "host-to-GPU and GPU-to-host copies, local and remote NUMA node",
    "peer": "GPU-to-GPU copies and latency, every pair, peer access",
    "allreduce": "NCCL all-reduce across the node's GPUs (bus bandwidth)",
    "burn": "one GEMM again and again (--seconds); a mismatch is FAULTY",
}


def _size(text: str) -> int:
    """--size: bytes, with a unit as --max-input ('64M', '1G', '4096'), at least 4 KiB."""
    try:
        value = inputs.parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if not 4096 <= value <= 2**62:
        raise argparse.ArgumentTypeError(f"must be between 4K and 4E bytes, got {text[:40]!r}")
    return value


def add_parser(subparsers: Any) -> None:
    """`gpudiag run`."""
    run = subparsers.add_parser(
        "run",
        description="Run measurement kernels and print the results. Kernels:\n"
        + "\n".join(f"  {name:<10} {KERNEL_HELP[name]}" for name in KERNELS),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "kernels",
        metavar="KERNEL",
        nargs="+",
        choices=KERNELS,
        help=f"one or more of: {', '.join(KERNELS)} (above)",
    )
    run.add_argument(
        "--device",
        default="cpu",
        help="cpu (every NUMA node), gpu (every GPU), all, or a GPU index",
    )
    run.add_argument(
        "--size",
        type=_size,  # and this machine's memory
        metavar="SIZE",
        help="bytes per array, a unit allowed as --max-input takes it: 64M, 1G (default 256M"
        " on CPUs; on GPUs 512M, over 4x the largest GPU L2 known: a GPU refuses STREAM arrays"
        " under 4x its L2, which measure the cache)",
    )
    run.add_argument(
        "--trials",
        type=inputs.number_option(2, 10**6, integer=True),
        default=10,
        help="measured rounds after warm-up (at least 2: statistics need two samples)",
    )
    run.add_argument(
        "--seconds",
        type=inputs.number_option(0, 7 * 86400, above=True),
        metavar="S",
        help="how long the burn runs (default 60); for STREAM and GEMM, keep running trials"
        " until S seconds have passed",
    )
    run.add_argument(
        "--dtype", choices=(*DTYPE_NAMES, "both"), default="fp64", help="STREAM's element type"
    )
    run.add_argument(
        "--until-confident",
        type=inputs.number_option(0, 86400, above=True),
        metavar="S",
        help="STREAM: after the trials, go on until every interval of the median is within"
        " 3%% of it (enough for diff to judge), or S seconds have passed",
    )
    run.add_argument(
        "--gemm-n",
        type=inputs.number_option(1, 2**31, integer=True),  # and this machine's memory
        default=4096,
        metavar="N",
        help="GEMM matrix size (N x N; default 4096)",
    )
    run.add_argument(
        "--burn-precision", choices=BURN_PRECISIONS, default="fp32", help="the GPU burn's GEMM"
    )


def run(args: argparse.Namespace) -> int:
    """Run the kernels with progress, print the results; 2 for a failure or a faulty
    burn, 3 for a burn that could not run (ERROR: no verdict), 130 when interrupted."""
    # --trials, --seconds, --until-confident, --size and --gemm-n: inputs.number_option
    import psutil

    from gpudiag.session import EXIT_CRITICAL, EXIT_UNKNOWN

    memory = psutil.virtual_memory().total
    size = CPU_STREAM_BYTES if args.size is None else args.size
    if 3 * size > memory:
        raise UsageError(
            f"--size {args.size}: three arrays of that size exceed this machine's memory"
            f" ({memory / 2**30:.1f} GiB)"
        )
    if 3 * 8 * args.gemm_n**2 > memory:
        raise UsageError(
            f"--gemm-n {args.gemm_n}: three {args.gemm_n} x {args.gemm_n} matrices exceed"
            f" this machine's memory ({memory / 2**30:.1f} GiB)"
        )
    plan = KernelPlan(
        tuple(dict.fromkeys(args.kernels)),
        args.device,
        size,
        DTYPE_NAMES if args.dtype == "both" else (args.dtype,),
        args.trials,
        args.seconds,
        args.gemm_n,
        60.0 if args.seconds is None else args.seconds,
        args.burn_precision,
        args.until_confident,
        GPU_STREAM_BYTES if args.size is None else args.size,
    )
    from gpudiag.hostfs import HostFS
    from gpudiag.kernels.runner import KernelUnavailable, PlanRun
    from gpudiag.kernels.stream import CacheResident
    from gpudiag.run_report import print_results, run_with_progress

    if not Path(args.root).is_dir():
        raise UsageError(f"--root {args.root}: no such directory")
    run = PlanRun(plan, host=HostFS(Path(args.root)))  # the bus and NUMA CPUs read there
    interrupted = False
    try:
        results, interrupted, others = run_with_progress(run)
    except KernelUnavailable as exc:
        raise UsageError(f"--device {args.device}: {exc}") from None
    except CacheResident as exc:  # STREAM's rule: arrays at least 4x the GPU's L2
        raise UsageError(f"--size {size}: {exc}") from None
    except KeyboardInterrupt:  # Ctrl-C: the results so far, then exit 130
        run.cancel.set()
        results, interrupted = run.results, True
    failed = print_results(run, results, others)
    if interrupted:
        print("gpudiag: interrupted (the results above are partial)", file=sys.stderr)
        return 130
    if failed or any(b.faulty for b in run.burns):
        return EXIT_CRITICAL
    return EXIT_UNKNOWN if any(b.error for b in run.burns) else 0  # a burn that could not run
