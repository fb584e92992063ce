"""The GPU screen's pure parts: each GPU's health from its findings, and why a snapshot
has no GPU (no NVIDIA device on the bus, no driver, no NVML library)."""

from __future__ import annotations

from gpudiag import views
from gpudiag.model import (
    Finding,
    ProbeResult,
    ProbeStatus,
    Reading,
    ReadingStatus,
    Severity,
    Snapshot,
)


def _snapshot(*readings: Reading, findings: tuple[Finding, ...] = ()) -> Snapshot:
    probe = ProbeResult("pcie", ProbeStatus.OK, 0.1, tuple(readings))
    return Snapshot("n1", "2026-01-01T00:00:00Z", "0.1.0", probes=(probe,), findings=findings)


def _init_failed(code: str) -> Reading:
    return Reading.failed("nvml.init", ReadingStatus.MISSING, f"nvmlInit: {code} (hint)")


def _finding(severity: Severity, subject: str) -> Finding:
    return Finding("X001", severity, subject, "t", "m")


def test_health_is_each_gpus_worst_finding_and_pairs_count_for_both() -> None:
    findings = (
        _finding(Severity.WARNING, "GPU 1"),
        _finding(Severity.CRITICAL, "GPU 1 NVLink 3"),
        _finding(Severity.INFO, "GPU 2"),
        _finding(Severity.WARNING, "GPU 4 and GPU 5"),
        _finding(Severity.CRITICAL, "node"),
    )
    assert views.gpu_health(findings) == {
        1: Severity.CRITICAL,
        2: Severity.INFO,
        4: Severity.WARNING,
        5: Severity.WARNING,
    }


def test_no_nvidia_device_on_the_bus() -> None:
    text = views.no_gpu_reason(
        _snapshot(Reading("pcie.0000:00:03.0.vendor", "0x1af4"), _init_failed("LibraryNotFound"))
    )
    assert text.startswith("No NVIDIA device on the PCIe bus")
    assert text.endswith("gpudiag demo faulty")


def test_devices_but_no_driver() -> None:
    text = views.no_gpu_reason(
        _snapshot(
            Reading("pcie.0000:18:00.0.vendor", "0x10de"),
            Reading("pcie.0000:2a:00.0.vendor", "0x10de"),
            _init_failed("DriverNotLoaded"),
        )
    )
    assert text.startswith(
        "2 NVIDIA device(s) on the PCIe bus (0000:18:00.0, 0000:2a:00.0) but no driver loaded"
    )


def test_driver_but_no_nvml_library() -> None:
    text = views.no_gpu_reason(
        _snapshot(Reading("pcie.0000:18:00.0.vendor", "0x10de"), _init_failed("LibraryNotFound"))
    )
    assert "but the NVML library (libnvidia-ml.so.1) is missing" in text
