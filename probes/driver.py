"""NVML presence: whether NVML answers, the driver and CUDA versions, the GPU count.
The GPUs themselves are the gpu probe's."""

from __future__ import annotations

from collections.abc import Iterator

from gpudiag.model import Reading
from gpudiag.nvml import NvmlError
from gpudiag.probe import Cost, Probe, ProbeContext


def cuda_version_text(encoded: int) -> str:
    """NVML's CUDA driver version integer as text: 12040 -> '12.4'."""
    return f"{encoded // 1000}.{encoded % 1000 // 10}"


def collect(context: ProbeContext) -> Iterator[Reading]:
    """NVML's own state."""
    nvml = context.nvml
    try:
        nvml.ensure_init()
    except NvmlError as exc:
        yield Reading.failed("nvml.init", exc.status, exc.reason, "nvml:nvmlInit")
    else:
        yield Reading("nvml.init", "ok", source="nvml:nvmlInit")
    yield nvml.reading("nvml.driver_version", "nvmlSystemGetDriverVersion")
    yield nvml.reading("nvml.nvml_version", "nvmlSystemGetNVMLVersion")
    yield nvml.reading(
        "nvml.cuda_driver_version", "nvmlSystemGetCudaDriverVersion_v2", convert=cuda_version_text
    )
    yield nvml.reading("nvml.gpu_count", "nvmlDeviceGetCount", unit="GPUs")


PROBE = Probe(
    name="driver",
    title="NVIDIA driver and NVML",
    cost=Cost.INSTANT,
    needs=frozenset(),
    collect=collect,
    timeout_s=15.0,
)
