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
from gpudiag.hostfs import HostFS
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.probe import ProbeContext
from gpudiag.probes import driver, gpu

from conftest import FIXTURES, REPO
from standin import PROBE_SCRIPT, build, environment, flatten, run_python

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


def probe_through_standin(
    library: Path, flat: Path, log: Path, binding: str
) -> dict[str, list[object]]:
    """The driver and GPU probes' readings through the real pynvml and the stand-in."""
    env = environment(library, flat, log, binding)
    run = run_python(PROBE_SCRIPT, env, str(FIXTURES / "host-basic"))
    assert run.returncode == 0, run.stderr[-3000:]
    assert "BADPOINTER" not in log.read_text()
    return json.loads(run.stdout)


def probe_through_replay(name: str) -> dict[str, list[object]]:
    """The same probes on the Python replay of the same recording."""
    context = ProbeContext(
        host=HostFS(FIXTURES / "host-basic"),
        nvml=Nvml(ReplayBackend.from_file(SNAPSHOTS / name)),
    )
    out = {}
    for probe in (driver, gpu):
        for r in probe.collect(context):
            out[r.key] = [r.status.value, r.value, r.reason]
    return out


def same_readings(a: dict[str, list[object]], b: dict[str, list[object]]) -> list[str]:
    """Keys whose status or value differ, or that only one side has."""
    return [k for k in sorted(a.keys() | b.keys()) if a.get(k, [None])[:2] != b.get(k, [None])[:2]]


@pytest.mark.parametrize("binding", bindings())
@pytest.mark.parametrize("name", ["demo-hgx-h100-healthy.toml", "demo-hgx-h100-faulty.toml"])
def test_probes_on_the_current_driver_read_what_the_replay_reads(
    libraries, tmp_path: Path, binding: str, name: str
) -> None:
    """Every reading through pynvml and the stand-in equals the Python replay's, but for
    what the replay cannot know (the binding's version), and the few calls the oldest
    binding lacks, which degrade to FunctionNotFound, each alone."""
    log = tmp_path / "calls.log"
    live = probe_through_standin(libraries["current"], recording(tmp_path, name), log, binding)
    replay = probe_through_replay(name)
    assert "UNRECORDED" not in log.read_text()
    differ = [k for k in same_readings(live, replay) if not k.startswith("nvml.binding")]
    # the demo replays predate the v2 memory call: the stand-in answers it (reserved 0)
    differ = [k for k in differ if k != "nvml.driver_branch" and not k.endswith(".reserved")]
    # 12.535.161 has no nvmlDeviceGetNumaNodeId wrapper: the driver's is reached through
    # the binding's function lookup, so both bindings read every value the replay reads
    assert differ == []
    if binding:
        assert live["nvml.binding_version"][1] == "12.535.161"
    assert live["gpu.0.fabric.state"][1] == "completed" and live["gpu.0.fabric.status"][1] == "ok"
    assert live["gpu.0.fabric.health_flags"][1] == []
    assert live["gpu.0.nvlink.17.speed"][1] == 26.562
    assert live["gpu.0.temperature.tlimit_margin"][1] == 46
    # the absolute limits NotSupported, as on the real H100's driver, and left so; the
    # T.Limit ones (signed) as read, and the margin to slowdown from the two
    assert live["gpu.0.temperature.slowdown_tlimit"][1] == -2
    assert live["gpu.0.temperature.shutdown_tlimit"][1] == -8
    assert live["gpu.0.temperature.slowdown"][0] == "unsupported"
    assert live["gpu.0.temperature.shutdown"][0] == "unsupported"
    assert live["gpu.0.temperature.slowdown_margin"][:2] == ["ok", 46 + 2]
    assert live["gpu.0.retired_pages.single_bit"][0] == "unsupported"
    if "faulty" in name:
        assert live["gpu.4.nvlink.3.speed"][1] == 13.281
        assert live["gpu.7.health"][0] == "error" and "GpuIsLost" in live["gpu.7.health"][2]


@pytest.mark.parametrize("binding", bindings())
def test_an_older_driver_degrades_one_reading_per_missing_symbol(
    libraries, tmp_path: Path, binding: str
) -> None:
    """The old generation lacks the _v3 process calls, the fabric V call, the clock event
    reasons and the margin temperature: each of those readings falls back or says so."""
    log = tmp_path / "calls.log"
    live = probe_through_standin(libraries["old"], recording(tmp_path), log, binding)
    calls = log.read_text()
    # the older names answer: throttle reasons, fabric info without the health mask
    assert live["gpu.0.throttle_reasons"][1] == ["GpuIdle"]
    assert "nvmlDeviceGetCurrentClocksThrottleReasons gpu=0" in calls
    assert live["gpu.0.fabric.state"][1] == "completed"
    assert live["gpu.0.fabric.status"][1] == "ok"
    # no health mask in the older structure: unsupported, so NVL010 does not apply (R535)
    health_flags = live["gpu.0.fabric.health_flags"]
    assert health_flags[0] == "unsupported"
    assert "driver lacks nvmlDeviceGetGpuFabricInfoV" in health_flags[2]
    margin = live["gpu.0.temperature.tlimit_margin"]
    assert margin[0] == "unsupported" and "older driver" in margin[2]
    # the absolute limit stays what the driver said, NotSupported; without the margin
    # the margin to slowdown is not known either, and says why
    assert live["gpu.0.temperature.slowdown_tlimit"][1] == -2
    assert live["gpu.0.temperature.slowdown"][0] == "unsupported"
    slowdown_margin = live["gpu.0.temperature.slowdown_margin"]
    assert slowdown_margin[0] == "unsupported" and "older driver" in slowdown_margin[2]
    # 12.535.161 calls _v3 itself and has no _v2 wrapper: gpudiag reaches the driver's _v2
    # through the binding's function lookup; nvidia-ml-py 13 raises
    # NVMLLibraryMismatchError and gpudiag falls back to its _v2. Either way: read
    processes = live["gpu.0.processes.compute"]
    assert processes[:2] == ["ok", []]
    assert "nvmlDeviceGetComputeRunningProcesses_v2 gpu=0" in calls
    # everything else still reads
    assert live["gpu.0.name"][1] == "NVIDIA H100 80GB HBM3"
    assert live["gpu.2.nvlink.5.state"][1] == "inactive"


@pytest.mark.parametrize("binding", bindings())
def test_process_lists_read_through_the_binding(libraries, tmp_path: Path, binding: str) -> None:
    """pynvml hands back objects, not dicts; two processes in nvml.h's 24-byte layout."""
    data = tomlcompat.loads((SNAPSHOTS / "demo-hgx-h100-healthy.toml").read_text())
    data["devices"][0]["nvmlDeviceGetComputeRunningProcesses"] = [
        {
            "pid": 4242,
            "usedGpuMemory": 2**30,
            "gpuInstanceId": 0xFFFFFFFF,
            "computeInstanceId": 0xFFFFFFFF,
        },
        {
            "pid": 4343,
            "usedGpuMemory": 2**31,
            "gpuInstanceId": 0xFFFFFFFF,
            "computeInstanceId": 0xFFFFFFFF,
        },
    ]
    flat = tmp_path / "recording.flat"
    flat.write_text(flatten(data))
    live = probe_through_standin(libraries["current"], flat, tmp_path / "calls.log", binding)
    assert live["gpu.0.processes.compute"][:2] == ["ok", [4242, 4343]]
    assert live["gpu.1.processes.compute"][:2] == ["ok", []]


@pytest.mark.parametrize("generation", ["current", "old"])
def test_used_memory_leaves_out_what_the_driver_reserves(
    libraries, tmp_path: Path, generation: str
) -> None:
    """The v2 memory structure counts the driver's reserved memory apart (an idle H100:
    480 MiB reserved, 0 used, as nvidia-smi prints); a driver without it (before R510)
    gives the first structure's used, which includes it, and says reserved is unknown."""
    data = tomlcompat.loads((SNAPSHOTS / "demo-hgx-h100-healthy.toml").read_text())
    mib = 2**20
    total = 81559 * mib
    data["devices"][0]["nvmlDeviceGetMemoryInfo"] = {
        "total": total,
        "free": total - 480 * mib,
        "used": 480 * mib,
        "reserved": 480 * mib,
    }
    flat = tmp_path / "recording.flat"
    flat.write_text(flatten(data))
    live = probe_through_standin(libraries[generation], flat, tmp_path / "calls.log", "")
    if generation == "current":
        assert live["gpu.0.memory.used"][:2] == ["ok", 0]
        assert live["gpu.0.memory.reserved"][:2] == ["ok", 480]
    else:
        assert live["gpu.0.memory.used"][:2] == ["ok", 480]
        assert live["gpu.0.memory.reserved"][0] == "unsupported"


@pytest.mark.parametrize("binding", bindings())
@pytest.mark.parametrize("generation", ["current", "old"])
def test_a_process_list_that_grows_between_the_calls_is_read_again(
    libraries, tmp_path: Path, binding: str, generation: str
) -> None:
    """The size query finds one process, the read finds two (one started in between):
    NVML says InsufficientSize with the new count; gpudiag asks again with that size.
    On the old driver (R470 to R505: only the _v2 calls) with either binding too, and
    GPU022 then applies to the running process."""
    data = tomlcompat.loads((SNAPSHOTS / "demo-hgx-h100-healthy.toml").read_text())
    one = {"pid": 4242, "usedGpuMemory": 2**30, "gpuInstanceId": 1, "computeInstanceId": 0}
    two = {**one, "pid": 4343}
    data["devices"][0]["nvmlDeviceGetComputeRunningProcesses"] = [one]
    flat = tmp_path / "recording.flat"
    text = flatten(data)
    line = next(x for x in text.splitlines() if "\tnvmlDeviceGetComputeRunningProcesses\t" in x)
    grown = line + "\t" + "\t".join(str(v) for v in two.values())
    flat.write_text(text.replace(line, f"{line}\n{grown}"))  # answered in turn: 1, then 2
    lib = libraries[generation]
    live = probe_through_standin(lib, flat, tmp_path / "calls.log", binding)
    assert live["gpu.0.processes.compute"][:2] == ["ok", [4242, 4343]]


@pytest.mark.parametrize("binding", bindings())
def test_mig_devices_read_through_the_binding(libraries, tmp_path: Path, binding: str) -> None:
    """A GPU in MIG mode with MIG devices in slots 0 and 2 (slot 1 unused: NotFound)."""
    data = tomlcompat.loads((SNAPSHOTS / "demo-hgx-h100-healthy.toml").read_text())
    data["devices"][0]["nvmlDeviceGetMigMode"] = [1, 1]
    data["devices"][0]["gpudiagMigDevices"] = [
        {
            "index": 0,
            "uuid": "MIG-a",
            "gpu_instance": 1,
            "compute_instance": 0,
            "memory_total": 9856 * 2**20,
        },
        {
            "index": 2,
            "uuid": "MIG-b",
            "gpu_instance": 2,
            "compute_instance": 0,
            "memory_total": 19968 * 2**20,
        },
    ]
    flat = tmp_path / "recording.flat"
    flat.write_text(flatten(data))
    log = tmp_path / "calls.log"
    live = probe_through_standin(libraries["current"], flat, log, binding)
    assert live["gpu.0.mig.instances"][:2] == [
        "ok",
        ["GI 1 / CI 0: 9856 MiB", "GI 2 / CI 0: 19968 MiB"],
    ]
    assert "SLOT nvmlDeviceGetMigDeviceHandleByIndex gpu=0 index=1 -> 6" in log.read_text()
    assert "UNRECORDED" not in log.read_text()


WATCH_SCRIPT = """
import json
from gpudiag.nvml import open_nvml
from gpudiag.watch import Sample, sample_node
nvml = open_nvml(None)
before = {0: Sample(9.0, 0, {}, counters={"nvl_tx": 5_000_000, "nvl_rx": 3_000_000})}
samples = sample_node(nvml, 2, before, now=10.0)
print(json.dumps([[s.values, s.errors, s.counters] for s in samples]))
"""


@pytest.mark.parametrize("binding", bindings())
def test_watch_reads_nvlink_counters_through_the_binding(
    libraries, tmp_path: Path, binding: str
) -> None:
    """watch's NVLink throughput: both counters read over every link (scope UINT_MAX) by
    the real pynvml, as unsigned long long; the rate from a previous sample's counters."""
    replay = tomlcompat.loads((SNAPSHOTS / "demo-hgx-h100-healthy.toml").read_text())
    replay["devices"][0]["nvmlDeviceGetFieldValues"] |= {
        "138,4294967295": 7_000_000,  # KiB sent over every link since the driver loaded
        "139,4294967295": 3_000_000,
    }
    data = tmp_path / "recording.flat"
    data.write_text(flatten(replay))
    log = tmp_path / "calls.log"
    run = run_python(WATCH_SCRIPT, environment(libraries["current"], data, log, binding))
    assert run.returncode == 0, run.stderr
    (values, errors, counters), (values1, errors1, _) = json.loads(run.stdout)
    assert counters == {"nvl_tx": 7_000_000, "nvl_rx": 3_000_000}
    assert (values["nvl_tx"], values["nvl_rx"]) == (2.05, 0.0)  # 2,000,000 KiB in 1 s
    assert values["power"] == 69.0 and "nvl_tx" not in errors
    # GPU 1: no previous sample, and its counters are not recorded: the stand-in's error
    assert values1["nvl_tx"] is None and errors1["nvl_tx"] == "Unknown"
    calls = log.read_text()
    assert "CALL nvmlDeviceGetFieldValues gpu=0 args=138,4294967295 -> 0" in calls
    assert "CALL nvmlDeviceGetFieldValues gpu=0 args=139,4294967295 -> 0" in calls
