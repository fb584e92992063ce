"""The host identity and driver probes: pure parsers and fixture trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudiag.model import ReadingStatus
from gpudiag.probes import driver, host

from conftest import probe_readings

FIXTURES = Path(__file__).parent / "fixtures"


def test_parse_os_release_handles_quotes_and_comments() -> None:
    text = (
        '# comment\nNAME="Ubuntu"\nVERSION_ID="22.04"\nID=ubuntu\n'
        "PRETTY_NAME='Ubuntu 22.04.4 LTS'\n"
    )
    assert host.parse_os_release(text) == {
        "NAME": "Ubuntu",
        "VERSION_ID": "22.04",
        "ID": "ubuntu",
        "PRETTY_NAME": "Ubuntu 22.04.4 LTS",
    }


def test_parse_proc_version() -> None:
    assert (
        host.parse_proc_version("Linux version 6.1.0-18-amd64 (debian-kernel@...) #1")
        == "6.1.0-18-amd64"
    )
    assert host.parse_proc_version("garbage") is None


def test_parse_uptime() -> None:
    assert host.parse_uptime("86400.25 1300000.50\n") == 86400.25


def test_cpuinfo_flag_lookup() -> None:
    assert (
        host.cpuinfo_has_flag("processor : 0\nflags : fpu hypervisor sse\n", "hypervisor") is True
    )
    assert host.cpuinfo_has_flag("processor : 0\nflags : fpu sse\n", "hypervisor") is False
    assert host.cpuinfo_has_flag("processor : 0\ncpu : POWER9\n", "hypervisor") is None


@pytest.mark.parametrize(
    ("vendor", "product", "expected"),
    [
        ("QEMU", "Standard PC (Q35 + ICH9, 2009)", "qemu"),
        ("Microsoft Corporation", "Virtual Machine", "hyper-v"),
        ("Amazon EC2", "p5.48xlarge", "aws-nitro"),
        ("Amazon EC2", "g4dn.metal", None),
        ("Supermicro", "SYS-821GE-TNHR", None),
    ],
)
def test_vm_from_dmi(vendor: str, product: str, expected: str | None) -> None:
    assert host.vm_from_dmi(vendor, product) == expected


def test_cuda_version_text() -> None:
    assert driver.cuda_version_text(13010) == "13.1"
    assert driver.cuda_version_text(12040) == "12.4"


def test_fixture_tree_and_replay() -> None:
    readings = probe_readings(FIXTURES / "host-basic", "replay-2gpu.toml")
    values = {k: r.value for k, r in readings.items() if r.ok}
    assert values["host.hostname"] == "gpunode01"
    assert values["host.kernel.release"] == "5.15.0-105-generic"
    assert values["host.os.pretty_name"] == "Ubuntu 22.04.4 LTS"
    assert values["host.uptime"] == 86400.25 and readings["host.uptime"].unit == "s"
    assert values["host.virt.cpu_hypervisor_flag"] is False
    assert values["host.virt.vm"] == "none"
    assert values["dmi.sys_vendor"] == "Supermicro"
    assert values["nvml.driver_version"] == "590.48.01"
    assert values["nvml.cuda_driver_version"] == "13.1"
    assert values["nvml.gpu_count"] == 2
    assert values["gpu.0.name"] == "NVIDIA H100 80GB HBM3"
    assert readings["gpu.1.health"].status is ReadingStatus.ERROR
    assert "gpu.1.name" not in readings  # a lost GPU is asked once, not once per reading
    assert readings["host.kernel.release"].source == "procfs:sys/kernel/osrelease"


def test_empty_tree_gives_statuses_not_errors(tmp_path: Path) -> None:
    readings = probe_readings(tmp_path, "replay-no-driver.toml")
    assert readings["host.hostname"].status is ReadingStatus.MISSING
    assert readings["host.hostname"].reason == "/proc/sys/kernel/hostname not found"
    assert readings["host.virt.vm"].status is ReadingStatus.MISSING
    assert readings["nvml.init"].status is ReadingStatus.MISSING
    assert "DriverNotLoaded" in readings["nvml.init"].reason
    assert "nvml.gpu_count" in readings and not readings["nvml.gpu_count"].ok
