"""Pieces of the reading-key grammar that producers (probes, importers, the kernel
readings) and readers (views, diff, fleet) share, kept in the core so that no core module
imports a plugin for them. The declared catalog of readings is to take these over."""

from __future__ import annotations

import re

from gpudiag.model import KernelResult

# the name of the snapshot's result that holds the derived readings (gpudiag/derive.py)
DERIVED = "derived"
_GPU_DEVICE = re.compile(r"^gpu(\d+)$")
_NUMA_DEVICE = re.compile(r"^cpu-numa(\d+)$")
# the kernels a KernelResult can name (kernels/plans.KERNELS; tests/test_derive.py checks)
KERNEL_NAMES = ("stream", "gemm", "copy", "peer", "allreduce", "burn")
# readings derived from kernel results (kernels/readings.py): a device's figures, their
# intervals, shares and verdicts, `kernel.verified`, and the GPU pairs' peer copies; never
# host.kernel.release or kernel.modules (the operating system's kernel)
_KERNEL_READING = re.compile(
    r"^(?:(?:gpu|numa)\.\d+|host|node)\.kernel\.(?:"
    + "|".join(KERNEL_NAMES)
    + r"|verified)(?:\.|$)"
    r"|^topo\.gpu\.\d+\.\d+\.(?:copy_gbs|copy_bidir_gbs|copy_latency_us"
    r"|copy_share_of_median|peer_access)$"
)


def normalize_bus_id(bus_id: str) -> str:
    """NVML's '00000000:18:00.0' -> '0000:18:00.0', the form sysfs uses."""
    domain, _, rest = bus_id.strip().lower().partition(":")
    return f"{int(domain, 16):04x}:{rest}" if rest else bus_id.strip().lower()


def device_prefix(device: str) -> str | None:
    """Where a device's kernel readings go: gpu.N., numa.N. or host.; None if unknown."""
    if m := _GPU_DEVICE.match(device):
        return f"gpu.{m.group(1)}."
    if m := _NUMA_DEVICE.match(device):
        return f"numa.{m.group(1)}."
    if device == "gpus":  # all the node's GPUs together (all-reduce)
        return "node."
    return "host." if device == "cpu" else None


def metric_key(result: KernelResult) -> str:
    """The kernel-relative part of the key: stream.triad.fp64, gemm.bf16, copy.h2d.local."""
    if result.kernel == "stream":
        dtype = dict(result.params).get("dtype", "fp64")
        return f"stream.{result.metric}.{dtype}"
    return f"{result.kernel}.{result.metric}"


def is_kernel_reading(key: str) -> bool:
    """Whether a reading is derived from kernel results (a measured figure, which differs
    from run to run: the diff and the fleet compare the results themselves instead)."""
    return _KERNEL_READING.match(key) is not None
