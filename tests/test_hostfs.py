"""The host root: one join, statuses instead of exceptions."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from gpudiag.hostfs import HostFS, source_name
from gpudiag.model import ReadingStatus


def test_paths_join_onto_the_root_once(tmp_path: Path) -> None:
    host = HostFS(tmp_path)
    assert host.path("/sys/class/dmi/id/bios_version") == tmp_path / "sys/class/dmi/id/bios_version"
    assert host.path("/") == tmp_path


@pytest.mark.parametrize("bad", ["sys/class", "/sys/../../etc/shadow", "/proc/.."])
def test_relative_and_climbing_paths_are_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError):
        HostFS(tmp_path).path(bad)


def test_read_ok_and_missing(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/uptime").write_text("12.5 3.0\n")
    host = HostFS(tmp_path)
    ok = host.read("/proc/uptime")
    assert ok.ok and ok.text == "12.5 3.0\n" and ok.source == "procfs:uptime"
    missing = host.read("/sys/class/dmi/id/bios_version")
    assert not missing.ok
    assert missing.status is ReadingStatus.MISSING
    assert missing.reading("bios").reason == "/sys/class/dmi/id/bios_version not found"


def test_permission_denied_is_needs_root_for_users_and_error_for_root(tmp_path: Path) -> None:
    denied = PermissionError(errno.EACCES, "Permission denied")
    user = HostFS(tmp_path, is_root_user=False)._failure("/sys/firmware/dmi/tables/DMI", denied)
    root = HostFS(tmp_path, is_root_user=True)._failure("/sys/firmware/dmi/tables/DMI", denied)
    assert user.status is ReadingStatus.NEEDS_ROOT
    assert root.status is ReadingStatus.ERROR


def test_unsupported_errno_is_unsupported(tmp_path: Path) -> None:
    result = HostFS(tmp_path)._failure(
        "/sys/x", OSError(errno.EOPNOTSUPP, "Operation not supported")
    )
    assert result.status is ReadingStatus.UNSUPPORTED


def test_directory_is_an_error_not_an_exception(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    assert HostFS(tmp_path).read("/proc").status is ReadingStatus.ERROR


def test_sources_name_the_filesystem() -> None:
    assert source_name("/sys/bus/pci/devices/0000:1b:00.0/current_link_width") == (
        "sysfs:bus/pci/devices/0000:1b:00.0/current_link_width"
    )
    assert source_name("/proc/cpuinfo") == "procfs:cpuinfo"
    assert source_name("/etc/os-release") == "file:/etc/os-release"


@pytest.mark.skipif(not Path("/proc/sys/kernel/hostname").exists(), reason="needs a Linux /proc")
def test_live_sysctl_files_read() -> None:
    # A single multi-megabyte read() of a sysctl file fails with ENOMEM; this one must not.
    result = HostFS("/").read("/proc/sys/kernel/hostname")
    assert result.ok and result.text.strip()
