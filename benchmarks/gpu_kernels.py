"""gpudiag's GPU kernels beside their references, in the same run: the one command a GPU node gets.

    python benchmarks/gpu_kernels.py [--gpus 0,1,...] [--gemm-n 8192] [--mib 1024]
                                     [--burn-seconds 20] [--no-plans]

Per GPU, every figure with its reference measured the same minute by CuPy alone (what
gpudiag already depends on), event time beside the wall clock, and a one-line verdict
against the issue-25 targets; where torch is installed, a second line gives its reference:

    STREAM triad FP64     >= 0.98 of one fused CuPy ElementwiseKernel triad (event-timed)
    STREAM copy FP64      >= 0.98 of cupy.ndarray.copy (event-timed); torch `copy_`
    GEMM n=8192           >= 0.97 of cupy.matmul in every precision it has (FP64, FP32
                          with CuPy's FP32 compute type, TF32 with its TF32 compute type,
                          FP16; NumPy and so CuPy have no BF16: that line says so), then
                          torch.matmul in all five; the figure also under the model's
                          physical peak, and its CUDA events within 10% of the wall clock
                          between device synchronisations
    burn FP32 and BF16    0 confirmed mismatches, 0 NaNs (unreproduced ones are listed)
    h2d local             >= 0.95 of a pinned cudaMemcpy of CuPy's (a target set here,
                          never measured), and nvbandwidth's host_to_device_memcpy_ce
                          beside it (where on PATH)
    peer copy 0 -> 1      >= 0.95 of cudaMemcpyPeer of CuPy's runtime (2+ GPUs; the same
                          unmeasured target)
    all-reduce busbw      beside nccl-tests' all_reduce_perf (where on PATH, 2+ GPUs)
    --kernels quick/full  the whole `gpudiag --export --kernels` command timed (full < 150 s)

torch is no dependency of gpudiag: without it the torch lines are left out, and a figure
whose only reference is torch's prints "no torch: reference skipped", never a guess.
THIS SCRIPT HAS NEVER RUN ON A GPU: it was written without one (no GPU figure is claimed;
its CuPy references were checked only against CuPy's API, not run); exits 3 with one line
where CUDA sees no GPU.
"""

from __future__ import annotations

if __name__ == "__main__":  # gpudiag as users install it (benchmarks/_wheel.py)
    from _wheel import use_the_wheel

    use_the_wheel()

import argparse
import contextlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from gpudiag.hostfs import HostFS
from gpudiag.kernels import allreduce, burn, copies, device, gemm, stream
from gpudiag.kernels.readings import impossible
from gpudiag.kernels.runner import (
    KernelUnavailable,
    gpu_count,
    gpu_numa_nodes,
    gpu_peaks,
    numa_cpus,
    usable_cpus,
)
from gpudiag.model import KernelResult

NO_TORCH = "no torch: reference skipped"
NO_CUPY_BF16 = "CuPy has no bfloat16 (NumPy has none): torch's is the reference"
TORCH_DTYPES = {"fp64": "float64", "fp32": "float32", "tf32": "float32", "fp16": "float16",
                "bf16": "bfloat16"}  # fmt: skip


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def event_timed(run: Callable[[], None], batch: int, events: Callable[[], Any]) -> float:
    """Median seconds per call of `run`, batches of `batch` between two events (`events`
    makes one: CuPy's or torch's), five batches after a warm-up call."""
    run()
    seconds = []
    for _ in range(5):
        start, stop = events(), events()
        start.record()
        for _ in range(batch):
            run()
        stop.record()
        stop.synchronize()
        elapsed = (
            start.elapsed_time(stop) / 1000.0
            if hasattr(start, "elapsed_time")
            else _cupy_elapsed(start, stop)
        )
        seconds.append(elapsed / batch)
    return statistics.median(seconds)


def _cupy_elapsed(start: Any, stop: Any) -> float:
    import cupy

    return float(cupy.cuda.get_elapsed_time(start, stop)) / 1000.0


def fused_triad_gbs(gpu: int, n: int) -> float:
    """One fused CuPy ElementwiseKernel `a = b + s * c` on float64, event-timed."""
    import cupy

    with cupy.cuda.Device(gpu):
        triad = cupy.ElementwiseKernel("T b, T c, T s", "T a", "a = b + s * c", "gpudiag_ref")
        b, c = cupy.full(n, 0.2), cupy.full(n, 0.1)
        a = cupy.empty(n)
        s = np.float64(0.4)
        seconds = event_timed(lambda: triad(b, c, s, a), 20, cupy.cuda.Event)
    return 3 * 8 * n / seconds / 1e9


def cupy_copy_gbs(gpu: int, n: int) -> float:
    """cupy.ndarray.copy of n float64 (a device-to-device copy), event-timed."""
    import cupy

    with cupy.cuda.Device(gpu):
        a = cupy.full(n, 0.1)
        seconds = event_timed(lambda: a.copy(), 20, cupy.cuda.Event)
    return 2 * 8 * n / seconds / 1e9


# CuPy's matmul compute type per precision (cupy._core._routines_linalg); FP32 pinned to
# FP32 so that TF32 is only where asked
CUPY_COMPUTE = {"fp64": "COMPUTE_TYPE_FP64", "fp32": "COMPUTE_TYPE_FP32",
                "tf32": "COMPUTE_TYPE_TF32", "fp16": "COMPUTE_TYPE_FP16"}  # fmt: skip
CUPY_DTYPES = {"fp64": np.float64, "fp32": np.float32, "tf32": np.float32, "fp16": np.float16}


def cupy_gemm_tflops(gpu: int, precision: str, n: int) -> float | None:
    """cupy.matmul on n x n arrays of the precision, with CuPy's compute type for it,
    event-timed; None for BF16 (CuPy has no such dtype)."""
    if precision not in CUPY_DTYPES:
        return None
    import cupy
    from cupy._core import _routines_linalg as linalg

    dtype = np.dtype(CUPY_DTYPES[precision])
    before = linalg.get_compute_type(dtype)
    linalg.set_compute_type(dtype, getattr(linalg, CUPY_COMPUTE[precision]))
    try:
        with cupy.cuda.Device(gpu):
            rng = cupy.random.default_rng(0)
            a = (rng.random((n, n), dtype=np.float64) * 2 - 1).astype(dtype)
            b = (rng.random((n, n), dtype=np.float64) * 2 - 1).astype(dtype)
            out = cupy.empty((n, n), dtype=dtype)
            batch = max(2, min(50, int(5e12 / n**3)))
            seconds = event_timed(lambda: cupy.matmul(a, b, out=out), batch, cupy.cuda.Event)
    finally:
        linalg.set_compute_type(dtype, before)
    return 2.0 * n**3 / seconds / 1e12


def cupy_h2d_gbs(gpu: int, nbytes: int) -> float:
    """cudaMemcpy from pinned host memory (CuPy's pinned pool) to the GPU, event-timed."""
    import cupy

    runtime = cupy.cuda.runtime
    with cupy.cuda.Device(gpu):
        pinned = cupy.cuda.alloc_pinned_memory(nbytes)
        target = cupy.empty(nbytes, dtype=np.uint8)

        def copy() -> None:
            runtime.memcpy(target.data.ptr, pinned.ptr, nbytes, runtime.memcpyHostToDevice)

        seconds = event_timed(copy, 10, cupy.cuda.Event)
    return nbytes / seconds / 1e9


def cupy_peer_gbs(source: int, target: int, nbytes: int) -> float:
    """cudaMemcpyPeer of CuPy's runtime from GPU `source` to GPU `target`, event-timed on
    the source (peer access enabled where the pair allows it, as gpudiag's copies do)."""
    import cupy

    runtime = cupy.cuda.runtime
    with cupy.cuda.Device(target):
        there = cupy.empty(nbytes, dtype=np.uint8)
    with cupy.cuda.Device(source):
        if runtime.deviceCanAccessPeer(source, target):
            with contextlib.suppress(runtime.CUDARuntimeError):  # already enabled
                runtime.deviceEnablePeerAccess(target)
        here = cupy.full(nbytes, 7, dtype=np.uint8)

        def copy() -> None:
            runtime.memcpyPeer(there.data.ptr, target, here.data.ptr, source, nbytes)

        seconds = event_timed(copy, 10, cupy.cuda.Event)
    return nbytes / seconds / 1e9


def reference(measure: Callable[[], float | None]) -> float | str | None:
    """A CuPy reference's figure, or why it could not be measured (one line)."""
    try:
        return measure()
    except Exception as exc:  # a reference that fails says so; gpudiag's figure stands
        return f"reference failed: {type(exc).__name__}: {exc}"[:160]


def torch_copy_gbs(gpu: int, n: int) -> float | None:
    """torch `copy_` of n float64, event-timed; None without torch."""
    torch = _torch()
    if torch is None:
        return None
    with torch.cuda.device(gpu):
        a = torch.full((n,), 0.1, dtype=torch.float64, device="cuda")
        c = torch.empty_like(a)
        seconds = event_timed(lambda: c.copy_(a), 20, lambda: torch.cuda.Event(True))
    return 2 * 8 * n / seconds / 1e9


def torch_gemm_tflops(gpu: int, precision: str, n: int) -> float | None:
    """torch.matmul on n x n tensors of the precision (TF32 allowed for tf32 only),
    event-timed; None without torch."""
    torch = _torch()
    if torch is None:
        return None
    allowed = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    try:
        with torch.cuda.device(gpu):
            dtype = getattr(torch, TORCH_DTYPES[precision])
            a = torch.rand((n, n), device="cuda", dtype=dtype) * 2 - 1
            b = torch.rand((n, n), device="cuda", dtype=dtype) * 2 - 1
            batch = max(2, min(50, int(5e12 / n**3)))
            seconds = event_timed(lambda: torch.matmul(a, b), batch, lambda: torch.cuda.Event(True))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allowed
    return 2.0 * n**3 / seconds / 1e12


def external(command: list[str], pattern: str) -> str:
    """The first capture of `pattern` in a tool's output, or why not."""
    if shutil.which(command[0]) is None:
        return f"not measured ({command[0]} is not on PATH)"
    out = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    found = re.search(pattern, out.stdout, re.M)
    return found.group(1) if found else f"not measured ({command[0]} printed no figure)"


def median(result: KernelResult) -> float | None:
    return result.stats.median if result.stats is not None else None


def row(figure: str, ours: KernelResult | float | None, reference: float | str | None,
        target: float, note: str = "", peaks: dict[str, Any] | None = None,
        missing: str = NO_TORCH) -> float | None:  # fmt: skip
    """One figure: gpudiag's, the reference, their ratio and the verdict in one line;
    returns gpudiag's figure (None where there is none). `missing`: what a reference of
    None means; a string reference is why it could not be measured."""
    if isinstance(ours, KernelResult):
        why = ours.error if ours.error else impossible(ours, peaks or {})
        value = None if why else median(ours)
    else:
        why, value = "", ours
    if value is None:
        print(f"{figure:<36} {'ERROR':>10}   {why or 'no figure'}")
        return None
    if reference is None or isinstance(reference, str):
        print(f"{figure:<36} {value:>10.4g}   {note}: {reference or missing}, no verdict")
        return value
    ratio = value / reference
    verdict = "target met" if ratio >= target else f"below the target {target:g}"
    print(f"{figure:<36} {value:>10.4g}   reference {reference:.4g}, {ratio:.3f}: {verdict}"
          + (f" ({note})" if note else ""))  # fmt: skip
    return value


def torch_row(figure: str, value: float | None, reference: float | None, target: float,
              note: str) -> None:  # fmt: skip
    """torch's reference for the figure above, on its own line; nothing without torch."""
    if value is None or reference is None:
        return
    ratio = value / reference
    verdict = "target met" if ratio >= target else f"below the target {target:g}"
    print(f"{'  ' + figure + ' (torch)':<36} {'':>10}   reference {reference:.4g}, "
          f"{ratio:.3f}: {verdict} ({note})")  # fmt: skip


def burn_line(gpu: int, n: int, seconds: float, precision: str) -> None:
    report = burn.burn_gpu(gpu, n, seconds, precision=precision)
    verdict = "FAULTY" if report.faulty else "ok"
    print(
        f"{f'gpu{gpu} burn {precision}':<36} {verdict:>10}   {report.mismatches} mismatches, "
        f"{report.nans} NaNs, {report.unreproduced} not reproduced, {report.iterations} "
        f"products, {report.gflops / 1000:.4g} TFLOP/s"
        + (f", {report.error}" if report.error else "")
    )


def time_plan(plan: str, limit: float | None) -> None:
    """The whole `gpudiag --export FILE --kernels PLAN` command, timed."""
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "gpudiag", "--export", str(Path(folder) / "node.toml"),
             "--kernels", plan],
            capture_output=True, text=True, timeout=1800, check=False,
        )  # fmt: skip
        took = time.perf_counter() - started
    verdict = "" if limit is None else (": target met" if took < limit else f": over {limit:g} s")
    print(f"{f'--kernels {plan} (whole export) s':<36} {took:>10.1f}   exit {done.returncode}"
          f"{verdict}")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", help="CUDA indices, comma-separated (default: all)")
    parser.add_argument("--gemm-n", type=int, default=8192)
    parser.add_argument("--mib", type=int, default=1024, help="STREAM array and copy size")
    parser.add_argument("--burn-seconds", type=float, default=20.0)
    parser.add_argument("--no-plans", action="store_true", help="skip timing --kernels quick/full")
    args = parser.parse_args()
    try:
        count = gpu_count()
    except KernelUnavailable as exc:
        print(f"gpu_kernels: {exc}", file=sys.stderr)
        return 3
    gpus = [int(g) for g in args.gpus.split(",")] if args.gpus else list(range(count))
    size, host = args.mib * 2**20, HostFS("/")
    print(f"{'figure':<36} {'gpudiag':>10}   reference, ratio: verdict")
    for gpu in gpus:
        cuda = device.api()
        peaks = gpu_peaks(host, cuda.deviceGetPCIBusId(gpu))
        ops = stream.CudaOperations(size // 8, np.float64, gpu)
        try:
            by = {r.metric: r for r in stream.run_stream(ops, device=f"gpu{gpu}")}
        finally:
            ops.close()
        row(f"gpu{gpu} STREAM triad fp64 GB/s", by["triad"],
            reference(lambda g=gpu: fused_triad_gbs(g, size // 8)), 0.98, "fused CuPy triad",
            peaks)  # fmt: skip
        name = f"gpu{gpu} STREAM copy fp64 GB/s"
        value = row(name, by["copy"], reference(lambda g=gpu: cupy_copy_gbs(g, size // 8)),
                    0.98, "cupy.ndarray.copy", peaks)  # fmt: skip
        torch_row(name, value, torch_copy_gbs(gpu, size // 8), 0.98, "torch copy_")
        for precision in gemm.PRECISIONS:
            result = gemm.run_gpu_gemm(gpu, precision, args.gemm_n, 5)
            ratio = dict(result.params).get("event_over_wall")
            torch_ref = torch_gemm_tflops(gpu, precision, args.gemm_n)
            name = f"gpu{gpu} {precision.upper()} GEMM TFLOP/s"
            ours = reference(lambda g=gpu, p=precision: cupy_gemm_tflops(g, p, args.gemm_n))
            if ours is None:  # BF16: torch's is the only reference
                note = f"torch.matmul ({NO_CUPY_BF16}); events/wall {ratio}"
                row(name, result, torch_ref, 0.97, note, peaks)
                continue
            value = row(name, result, ours, 0.97, f"cupy.matmul; events/wall {ratio}", peaks)
            torch_row(name, value, torch_ref, 0.97, "torch.matmul")
        for precision in ("fp32", "bf16"):
            burn_line(gpu, args.gemm_n, args.burn_seconds, precision)
    nodes = usable_cpus(numa_cpus(host))
    engine = copies.CudaEngine(gpus[:1], nodes)
    try:
        h2d = copies.run_host_copies(
            engine, gpu_numa_nodes(host, gpus[:1]), sorted(nodes), nbytes=size
        )[0]
    finally:
        engine.close()
    first_peaks = gpu_peaks(host, device.api().deviceGetPCIBusId(gpus[0]))
    row(f"gpu{gpus[0]} h2d local GB/s", h2d, reference(lambda: cupy_h2d_gbs(gpus[0], size)),
        0.95, "pinned cudaMemcpy (CuPy)", first_peaks)  # fmt: skip
    nvbw = external(["nvbandwidth", "-t", "host_to_device_memcpy_ce"], r"SUM \S+ ([\d.]+)")
    print(f"{'  h2d (nvbandwidth)':<36} {'':>10}   nvbandwidth: {nvbw}")
    if len(gpus) >= 2:
        engine = copies.CudaEngine(gpus[:2], nodes)
        try:
            peer = copies.run_peer_matrix(engine, nbytes=size)
        finally:
            engine.close()
        one_way = next(r for r in peer if r.device == f"gpu{gpus[0]}" and
                       r.metric == f"to.gpu{gpus[1]}")  # fmt: skip
        row(f"gpu{gpus[0]} -> gpu{gpus[1]} peer copy GB/s", one_way,
            reference(lambda: cupy_peer_gbs(gpus[0], gpus[1], size)), 0.95,
            "cudaMemcpyPeer (CuPy)")  # fmt: skip
        results = allreduce.run_allreduce(gpus, max_bytes=size)
        busbw = {r.metric: r for r in results}["busbw"]
        top = dict(busbw.params)["bytes"]
        nccl = external(
            ["all_reduce_perf", "-b", str(top), "-e", str(top), "-g", str(len(gpus))],
            # size count type redop root, out-of-place time algbw busbw #wrong, then the
            # in-place time algbw busbw: in-place, as gpudiag's
            rf"^\s*{top}\s+\d+\s+float\s+sum\s+-?\d+(?:\s+\S+){{4}}\s+\S+\s+\S+\s+([\d.]+)",
        )
        print(f"{'all-reduce busbw GB/s':<36} {median(busbw) or 0:>10.4g}   "
              f"nccl-tests all_reduce_perf: {nccl}")  # fmt: skip
    device.use(None)
    if not args.no_plans:
        time_plan("quick", None)
        time_plan("full", 150.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
