"""Which kernel runs where: `gpudiag run KERNEL... --device cpu|gpu|all|N`.

So far STREAM. On the CPU it runs once per NUMA node, one thread per CPU of the node,
pinned there, with the node's memory first touched by those threads. The GPU path needs
CuPy; where CuPy or a GPU is absent it says so (KernelUnavailable) rather than guess.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpudiag.hostfs import HostFS
from gpudiag.kernels import burn, gemm, stream
from gpudiag.model import KernelResult
from gpudiag.textparse import parse_cpulist

KERNELS = ("stream", "gemm", "burn")
DTYPES = {"fp64": np.float64, "fp32": np.float32}


class KernelUnavailable(Exception):
    """A kernel cannot run on the device asked for; str() says why in one line."""


def numa_cpus(host: HostFS) -> dict[int, list[int]]:
    """CPUs of every NUMA node that has some; {} where sysfs shows no nodes."""
    nodes: dict[int, list[int]] = {}
    for name in host.listdir("/sys/devices/system/node"):
        if name.startswith("node") and name[4:].isdigit():
            text = host.read(f"/sys/devices/system/node/{name}/cpulist")
            cpus = parse_cpulist(text.text or "") if text.ok else []
            if cpus:
                nodes[int(name[4:])] = cpus
    return nodes


def run_cpu_stream(
    size_bytes: int, dtype: str, trials: int, progress: Callable[[float], None] | None = None
) -> list[KernelResult]:
    """STREAM on every NUMA node's CPUs (or on all CPUs where NUMA is not shown)."""
    n = max(1024, size_bytes // np.dtype(DTYPES[dtype]).itemsize)
    nodes = numa_cpus(HostFS("/")) or {-1: []}
    results: list[KernelResult] = []
    for node, cpus in nodes.items():
        device = "cpu" if node < 0 else f"cpu-numa{node}"
        ops = stream.CpuOperations(n, DTYPES[dtype], [[cpu] for cpu in cpus])
        try:
            results += stream.run_stream(ops, device=device, trials=trials, progress=progress)
        finally:
            ops.close()
    return results


def gpu_count() -> int:
    """GPUs CuPy sees; KernelUnavailable (with the reason) where it cannot look."""
    try:
        import cupy
    except ImportError:
        raise KernelUnavailable(
            "CuPy is not installed: pip install 'gpudiag[cuda12]' (or [cuda13])"
        ) from None
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # CUDA runtime errors have no common base class here
        raise KernelUnavailable(f"no usable GPU: {exc}") from None


def run_gpu_stream(device: int, size_bytes: int, dtype: str, trials: int) -> list[KernelResult]:
    """STREAM on one GPU through CuPy. Never run on a GPU in this project's CI."""
    count = gpu_count()
    if not 0 <= device < count:
        raise KernelUnavailable(f"no GPU {device} (this node has {count})")
    n = max(1024, size_bytes // np.dtype(DTYPES[dtype]).itemsize)
    ops = stream.CudaOperations(n, DTYPES[dtype], device)
    return stream.run_stream(ops, device=f"gpu{device}", trials=trials)


def run_cpu_gemm(n: int, trials: int) -> list[KernelResult]:
    """GEMM with NumPy's BLAS in every precision (those it lacks are reported skipped)."""
    return [
        gemm.run_gemm(np, precision, n, device="cpu", trials=trials)
        for precision in gemm.PRECISIONS
    ]


def run_gpu_gemm(device: int, n: int, trials: int) -> list[KernelResult]:
    """GEMM with cuBLAS through CuPy. Never run on a GPU in this project's CI."""
    count = gpu_count()
    if not 0 <= device < count:
        raise KernelUnavailable(f"no GPU {device} (this node has {count})")
    return [gemm.run_gpu_gemm(device, precision, n, trials) for precision in gemm.PRECISIONS]


def run_burn(devices: str, gpus: list[int], n: int, seconds: float) -> list[burn.BurnReport]:
    """The burn on the CPU (NumPy) and/or every GPU asked for (CuPy, NVML sampled)."""
    reports = []
    if devices in ("cpu", "all"):
        reports.append(burn.burn_device(np, n, seconds, "cpu"))
    if gpus:
        from gpudiag.nvml import open_nvml

        nvml = open_nvml(None)
        try:
            reports += burn.burn_gpus(gpus, n, seconds, nvml)
        finally:
            nvml.close()
    return reports
