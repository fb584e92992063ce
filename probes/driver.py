"""NVML presence: whether NVML answers, the driver and CUDA versions, the GPU count.
The GPUs themselves are the gpu probe's."""

from __future__ import annotations

from collections.abc import Iterator

from gpudiag import catalog
from gpudiag.model import Reading, ReadingStatus
from gpudiag.nvml import Nvml, NvmlError, ReplayBackend
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
    yield host_files_match(context)
    binding = getattr(nvml.backend, "binding", None)
    if binding is not None:  # a replay says nothing of the binding; a capture does
        yield from _binding(nvml, binding)
    else:
        yield Reading.failed(
            "nvml.binding_branch",
            ReadingStatus.UNSUPPORTED,
            "an NVML replay records no nvidia-ml-py version (a capture does)",
            "python:nvidia-ml-py",
        )


def host_files_match(context: ProbeContext) -> Reading:
    """nvml.host_files_match: whether NVML and the host files describe the same node.
    False only for an NVML replay read beside this machine's own files (`--nvml-replay`
    without `--root`): then the rules that compare the two (GPU002, GPU003, GPU031) do
    not apply. A replay with a captured tree (--root), or a capture (`--replay`, whose
    host files are its own node's), is taken as that node's whole record."""
    source = "gpudiag:--nvml-replay and --root"
    if isinstance(context.nvml.backend, ReplayBackend) and context.host.is_this_machine:
        reason = "NVML answers from a replay file, the host files are this machine's"
        return Reading("nvml.host_files_match", False, source=source, reason=reason)
    return Reading("nvml.host_files_match", True, source=source)


def binding_branch(version: str) -> int:
    """The driver branch an nvidia-ml-py release was made for: 12.535.161 -> 535."""
    return int(version.split(".")[1])


def _binding(nvml: Nvml, version: str) -> Iterator[Reading]:
    if not version:
        yield Reading.failed(
            "nvml.binding_branch",
            ReadingStatus.MISSING,
            "nvidia-ml-py is not installed",
            "python:nvidia-ml-py",
        )
        return
    yield Reading("nvml.binding_version", version, source="python:nvidia-ml-py")
    yield Reading("nvml.binding_branch", binding_branch(version), source="python:nvidia-ml-py")
    yield nvml.reading(
        "nvml.driver_branch",
        "nvmlSystemGetDriverVersion",
        convert=lambda v: int(str(v).split(".")[0]),
    )


# the readings this probe makes (gpudiag/catalog.py)
READINGS = (
    *catalog.declare(
        "Driver (NVML)",
        catalog.config("nvml.cuda_driver_version"),
        catalog.config("nvml.driver_version"),
        catalog.config("nvml.gpu_count", "GPUs"),
        catalog.config("nvml.host_files_match"),
        catalog.config("nvml.init"),
        catalog.config("nvml.nvml_version"),
        catalog.config("nvml.binding_version", help="nvidia-ml-py's version"),
        catalog.config("nvml.binding_branch", help="the driver branch nvidia-ml-py is for"),
        catalog.config("nvml.driver_branch", help="the loaded driver's branch"),
    ),
)

PROBE = Probe(
    name="driver",
    title="NVIDIA driver and NVML",
    cost=Cost.INSTANT,
    needs=frozenset(),
    collect=collect,
    timeout_s=15.0,
    readings=READINGS,
)
