"""The real pynvml against the C stand-in libnvidia-ml.so.1 (tests/nvml_standin/), in
subprocesses (LD_LIBRARY_PATH): the stand-in itself first, then gpudiag's probes through it,
with the newest nvidia-ml-py the pyproject admits (this environment's) and the oldest
(installed by .ci/run into .nvml-old beside the environment). The stand-in is not a GPU."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from gpudiag import tomlcompat

from conftest import REPO
from standin import build, environment, flatten, run_python

SNAPSHOTS = REPO / "snapshots"
OLD_BINDING = REPO / ".nvml-old"


@pytest.fixture(scope="session")
def libraries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Both generations of the stand-in, built once."""
    base = tmp_path_factory.mktemp("standin")
    return {generation: build(generation, base / generation) for generation in ("current", "old")}


def recording(tmp_path: Path, name: str = "demo-hgx-h100-faulty.toml") -> Path:
    """A demo replay flattened for the stand-in."""
    path = tmp_path / "recording.flat"
    path.write_text(flatten(tomlcompat.loads((SNAPSHOTS / name).read_text())))
    return path


def bindings() -> list[object]:
    """The newest admitted binding (this environment's) and the oldest (.nvml-old)."""
    old = pytest.param(
        str(OLD_BINDING),
        id="oldest-binding",
        marks=pytest.mark.skipif(
            not (OLD_BINDING / "pynvml.py").is_file(),
            reason=f"the oldest admitted nvidia-ml-py is not installed at {OLD_BINDING} "
            "(.ci/run installs it: pip install --target .nvml-old nvidia-ml-py==12.535.161)",
        ),
    )
    return [pytest.param("", id="newest-binding"), old]


def test_pynvml_reads_the_recording(libraries, tmp_path: Path) -> None:
    log = tmp_path / "calls.log"
    env = environment(libraries["current"], recording(tmp_path), log)
    code = """
import json, pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(3)
out = {
    "count": pynvml.nvmlDeviceGetCount(),
    "name": pynvml.nvmlDeviceGetName(h),
    "bus": pynvml.nvmlDeviceGetPciInfo(h).busId,
    "width": pynvml.nvmlDeviceGetCurrPcieLinkWidth(h),
    "total": pynvml.nvmlDeviceGetMemoryInfo(h).total,
    "affinity": list(pynvml.nvmlDeviceGetCpuAffinity(h, 16)),
}
try:
    pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(7))
except pynvml.NVMLError as exc:
    out["lost"] = exc.value
print(json.dumps(out))
"""
    run = run_python(code, env)
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    bus = out["bus"].decode() if isinstance(out["bus"], bytes) else out["bus"]
    assert out["count"] == 8 and out["name"] == "NVIDIA H100 80GB HBM3"
    assert bus == "00000000:5D:00.0" and out["width"] == 8
    assert out["total"] == 81559 * 2**20
    assert out["affinity"][0] == 2**56 - 1  # CPUs 0-55
    assert out["lost"] == 15  # GpuIsLost
    calls = log.read_text()
    assert "CALL nvmlDeviceGetPciInfo_v3 gpu=3 args=- -> 0" in calls
    assert "BADPOINTER" not in calls and "UNRECORDED" not in calls


def test_a_structure_passed_by_value_is_caught(libraries, tmp_path: Path) -> None:
    """What gpudiag 0.x did with nvmlDeviceGetGpuFabricInfo: pynvml passes the argument
    through unchanged, so ctypes copies the structure and NVML gets garbage as the pointer.
    The stand-in aborts, as real NVML would crash."""
    log = tmp_path / "calls.log"
    env = environment(libraries["current"], recording(tmp_path), log)
    code = """
import pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
pynvml.nvmlDeviceGetGpuFabricInfo(h, pynvml.c_nvmlGpuFabricInfo_t())
print("NVML wrote somewhere")
"""
    run = run_python(code, env)
    assert run.returncode != 0 and "NVML wrote somewhere" not in run.stdout
    assert "BADPOINTER nvmlDeviceGetGpuFabricInfo" in log.read_text()


def test_the_old_driver_lacks_the_versioned_process_calls(libraries, tmp_path: Path) -> None:
    env = environment(libraries["old"], recording(tmp_path), tmp_path / "calls.log")
    code = """
import pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
try:
    pynvml.nvmlDeviceGetComputeRunningProcesses(h)
except Exception as exc:
    print(type(exc).__name__)
"""
    run = run_python(code, env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "NVMLLibraryMismatchError"
    assert sys.executable  # the subprocess ran this environment's Python
