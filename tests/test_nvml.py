"""The NVML interface: the replay backend, error statuses, and the real backend here."""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib.metadata
from pathlib import Path

import pytest

from gpudiag.model import ReadingStatus
from gpudiag.nvml import (
    Nvml,
    NvmlError,
    PynvmlBackend,
    ReplayBackend,
    ReplayError,
    open_nvml,
    plain,
)

FIXTURES = Path(__file__).parent / "fixtures"


def _replay(name: str = "replay-2gpu.toml") -> Nvml:
    return Nvml(ReplayBackend.from_file(FIXTURES / name))


def test_replay_answers_recorded_calls() -> None:
    nvml = _replay()
    assert nvml.call("nvmlSystemGetDriverVersion") == "590.48.01"
    assert nvml.call("nvmlDeviceGetCount") == 2
    assert nvml.call("nvmlDeviceGetName", 0) == "NVIDIA H100 80GB HBM3"
    assert nvml.call("nvmlDeviceGetClockInfo", 0, 2) == 2619


def test_replay_errors_become_reading_statuses() -> None:
    nvml = _replay()
    lost = nvml.reading("gpu.1.name", "nvmlDeviceGetName", 1)
    assert lost.status is ReadingStatus.ERROR
    assert lost.reason.startswith("nvmlDeviceGetName: GpuIsLost (the GPU is lost")
    assert lost.source == "nvml:nvmlDeviceGetName"
    unrecorded = nvml.reading("gpu.0.power", "nvmlDeviceGetPowerUsage", 0, unit="mW")
    assert unrecorded.status is ReadingStatus.MISSING
    assert "NotRecorded" in unrecorded.reason
    unrecorded_args = nvml.reading("gpu.0.clock", "nvmlDeviceGetClockInfo", 0, 1)
    assert unrecorded_args.status is ReadingStatus.MISSING
    assert "arguments (1) not recorded" in unrecorded_args.reason


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("NotSupported", ReadingStatus.UNSUPPORTED),
        ("NoPermission", ReadingStatus.NEEDS_ROOT),
        ("FunctionNotFound", ReadingStatus.UNSUPPORTED),
        ("GpuIsLost", ReadingStatus.ERROR),
        ("Unknown", ReadingStatus.ERROR),
        ("LibraryNotFound", ReadingStatus.MISSING),
    ],
)
def test_each_error_code_maps_to_a_status(code: str, status: ReadingStatus) -> None:
    backend = ReplayBackend(
        {
            "format": "gpudiag-nvml-replay",
            "version": 1,
            "devices": [{"nvmlDeviceGetPowerUsage": {"error": code}}],
        }
    )
    reading = Nvml(backend).reading("gpu.0.power", "nvmlDeviceGetPowerUsage", 0)
    assert reading.status is status
    assert code in reading.reason


def test_init_failure_is_reported_once_in_full_then_briefly() -> None:
    nvml = _replay("replay-no-driver.toml")
    with pytest.raises(NvmlError) as error:
        nvml.ensure_init()
    assert error.value.code == "DriverNotLoaded"
    later = nvml.reading("nvml.driver_version", "nvmlSystemGetDriverVersion")
    assert later.status is ReadingStatus.MISSING
    assert later.reason == "NVML unavailable (DriverNotLoaded, see nvml.init)"


def test_json_replay_loads() -> None:
    nvml = _replay("replay-no-gpus.json")
    assert nvml.call("nvmlDeviceGetCount") == 0


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("", "file is empty"),
        ("format = 'other'\nversion = 1\n", "not an NVML replay file"),
        ("format = 'gpudiag-nvml-replay'\nversion = 2\n", "replay version 2 is not supported"),
        (
            "format = 'gpudiag-nvml-replay'\nversion = 1\ngpus = []\n",
            "unknown top-level key(s) gpus",
        ),
        (
            "format = 'gpudiag-nvml-replay'\nversion = 1\n[[devices]]\n"
            "nvmlDeviceGetName = { error = 'Exploded' }\n",
            "unknown NVML error code 'Exploded'",
        ),
        ("format = = 1", "not valid TOML"),
    ],
)
def test_bad_replay_files_give_one_line(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "replay.toml"
    path.write_text(content)
    with pytest.raises(ReplayError) as error:
        ReplayBackend.from_file(path)
    assert expected in str(error.value)
    assert "\n" not in str(error.value)


def test_missing_replay_file(tmp_path: Path) -> None:
    with pytest.raises(ReplayError, match="no such file"):
        open_nvml(tmp_path / "absent.toml")


@pytest.mark.skipif(
    ctypes.util.find_library("nvidia-ml") is not None,
    reason="this machine has libnvidia-ml; the check is for machines without it",
)
def test_real_backend_without_driver_reports_library_not_found() -> None:
    nvml = Nvml(PynvmlBackend())
    reading = nvml.reading("nvml.driver_version", "nvmlSystemGetDriverVersion")
    assert reading.status is ReadingStatus.MISSING
    assert "LibraryNotFound" in reading.reason
    with pytest.raises(NvmlError) as error:
        nvml.ensure_init()
    assert "NVML library not found (libnvidia-ml.so.1)" in error.value.reason
    nvml.close()


def test_plain_converts_ctypes_structures() -> None:
    class Memory(ctypes.Structure):
        _fields_ = [
            ("total", ctypes.c_ulonglong),
            ("used", ctypes.c_ulonglong),
            ("name", ctypes.c_char * 8),
        ]

    memory = Memory(80, 1, b"hbm3")
    assert plain(memory) == {"total": 80, "used": 1, "name": "hbm3"}
    assert plain([memory]) == [{"total": 80, "used": 1, "name": "hbm3"}]


def test_binding_branch_and_real_backend_readings() -> None:
    from gpudiag.probes import driver

    assert driver.binding_branch("12.535.161") == 535
    assert driver.binding_branch("13.615.71") == 615
    backend = PynvmlBackend()
    readings = {r.key: r for r in driver._binding(Nvml(backend), backend.binding)}
    # the nvidia-ml-py installed here, as its own metadata gives it
    installed = importlib.metadata.version("nvidia-ml-py")
    assert readings["nvml.binding_version"].value == installed
    assert readings["nvml.binding_branch"].value == int(installed.split(".")[1])
    if ctypes.util.find_library("nvidia-ml") is None:
        assert readings["nvml.driver_branch"].status is ReadingStatus.MISSING
