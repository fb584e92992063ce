"""gpudiag's GPU kernels beside their references, in the same run, on a GPU node.

    python benchmarks/gpu_kernels.py [--gpus 0,1,...] [--gemm-n 8192] [--mib 1024]

The issue-17 targets, each measured here the day a GPU node is lent (this script has NEVER
RUN ON A GPU: no GPU was available while it was written, so no figure is claimed):

    STREAM triad FP64        >= 90% of the GPU model's datasheet memory bandwidth
    BF16 GEMM                within 3% of torch.matmul on bf16 tensors (where PyTorch is)
    host-to-device (local)   >= 50 GB/s on PCIe Gen5 x16; nvbandwidth's
                             host_to_device_memcpy_ce beside it where nvbandwidth is on PATH
    all-reduce busbw         within 5% of nccl-tests' all_reduce_perf at the same size
                             (where all_reduce_perf is on PATH; two or more GPUs)

A reference that is not installed is printed as "not measured" with the reason, never
guessed. Exits 3 with one line where CUDA sees no GPU.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys

import numpy as np

from gpudiag.hostfs import HostFS
from gpudiag.kernels import allreduce, copies, device, gemm, stream
from gpudiag.kernels.runner import KernelUnavailable, gpu_count, numa_cpus, usable_cpus


def torch_bf16_tflops(gpu: int, n: int, batch: int = 50) -> str:
    """torch.matmul on n x n bf16 tensors, CUDA-event timed batches; or why not."""
    try:
        import torch
    except ImportError:
        return "not measured (PyTorch is not installed)"
    with torch.cuda.device(gpu):
        a = torch.rand((n, n), device="cuda", dtype=torch.bfloat16)
        b = torch.rand((n, n), device="cuda", dtype=torch.bfloat16)
        torch.matmul(a, b)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        samples = []
        for _ in range(5):
            start.record()
            for _ in range(batch):
                torch.matmul(a, b)
            stop.record()
            stop.synchronize()
            samples.append(2.0 * n**3 * batch / (start.elapsed_time(stop) / 1000) / 1e12)
    return f"{np.median(samples):.1f} TFLOP/s"


def external(command: list[str], pattern: str) -> str:
    """The first capture of `pattern` in a tool's output, or why not."""
    if shutil.which(command[0]) is None:
        return f"not measured ({command[0]} is not on PATH)"
    out = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    found = re.search(pattern, out.stdout, re.M)
    return found.group(1) if found else f"not measured ({command[0]} printed no figure)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", help="CUDA indices, comma-separated (default: all)")
    parser.add_argument("--gemm-n", type=int, default=8192)
    parser.add_argument("--mib", type=int, default=1024, help="STREAM array and copy size")
    args = parser.parse_args()
    try:
        count = gpu_count()
    except KernelUnavailable as exc:
        print(f"gpu_kernels: {exc}", file=sys.stderr)
        return 3
    gpus = [int(g) for g in args.gpus.split(",")] if args.gpus else list(range(count))
    size = args.mib * 2**20
    print(f"{'figure':<34} {'gpudiag':>14}   reference")
    for gpu in gpus:
        ops = stream.CudaOperations(size // 8, np.float64, gpu)
        try:
            triad = {r.metric: r for r in stream.run_stream(ops, device=f"gpu{gpu}")}["triad"]
        finally:
            ops.close()
        print(
            f"{f'gpu{gpu} STREAM triad fp64 GB/s':<34} {triad.stats.median:>14.1f}   "
            "the model's datasheet bandwidth (gpudiag --export --kernels full: share_of_peak)"
        )
        bf16 = gemm.run_gpu_gemm(gpu, "bf16", args.gemm_n, 5)
        print(
            f"{f'gpu{gpu} BF16 GEMM TFLOP/s':<34} {bf16.stats.median:>14.1f}   "
            f"torch.matmul: {torch_bf16_tflops(gpu, args.gemm_n)}"
        )
    nodes = usable_cpus(numa_cpus(HostFS("/")))
    engine = copies.CudaEngine(gpus[:1], nodes)
    try:
        from gpudiag.kernels.runner import gpu_numa_nodes

        h2d = copies.run_host_copies(
            engine, gpu_numa_nodes(HostFS("/"), gpus[:1]), sorted(nodes), nbytes=size
        )[0]
    finally:
        engine.close()
    nvbw = external(["nvbandwidth", "-t", "host_to_device_memcpy_ce"], r"SUM \S+ ([\d.]+)")
    print(
        f"{f'gpu{gpus[0]} h2d local GB/s':<34} {h2d.stats.median:>14.1f}   "
        f"target 50 (Gen5 x16); nvbandwidth: {nvbw}"
    )
    if len(gpus) >= 2:
        results = allreduce.run_allreduce(gpus, max_bytes=size)
        busbw = {r.metric: r for r in results}["busbw"]
        top = dict(busbw.params)["bytes"]
        nccl = external(
            ["all_reduce_perf", "-b", str(top), "-e", str(top), "-g", str(len(gpus))],
            # size count type redop root, out-of-place time algbw busbw #wrong, then the
            # in-place time algbw busbw: in-place, as gpudiag's
            rf"^\s*{top}\s+\d+\s+float\s+sum\s+-?\d+(?:\s+\S+){{4}}\s+\S+\s+\S+\s+([\d.]+)",
        )
        print(
            f"{'all-reduce busbw GB/s':<34} {busbw.stats.median:>14.1f}   "
            f"nccl-tests all_reduce_perf: {nccl}"
        )
    device.use(None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
