"""The GPU probe on the demo HGX H100 replays, its decoders, and the real backend's
argument handling against a stand-in pynvml."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from gpudiag.model import Reading, ReadingStatus
from gpudiag.nvml import Nvml, NvmlError, PynvmlBackend
from gpudiag.probes import gpu
from gpudiag.probes.topology import pcie_relation

from conftest import REPO, ok_values, probe_readings, run_cli
from hosttree import build_hgx_tree

SNAPSHOTS = REPO / "snapshots"


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory):
    root = build_hgx_tree(tmp_path_factory.mktemp("hgx"))
    return probe_readings(root, str(SNAPSHOTS / "demo-hgx-h100-healthy.toml"))


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory):
    root = build_hgx_tree(tmp_path_factory.mktemp("hgx"))
    return probe_readings(root, str(SNAPSHOTS / "demo-hgx-h100-faulty.toml"))


def test_decoders() -> None:
    assert gpu.decode_throttle_reasons(0x1) == ["GpuIdle"]
    assert gpu.decode_throttle_reasons(0x48) == ["HwSlowdown", "HwThermalSlowdown"]
    assert gpu.decode_throttle_reasons(0x1000) == ["0x1000"]
    assert gpu.affinity_cpus([0b101, 1]) == [0, 2, 64]
    assert gpu.normalize_bus_id("00000000:2A:00.0") == "0000:2a:00.0"
    assert gpu.topology_label(40, 0, (18, 18)) == "NV18"
    assert gpu.topology_label(40, 0, (18, 17)) == "NV17"
    assert gpu.topology_label(10, 2, (0, 0)) == "NV2"
    assert gpu.topology_label(20, 0, (0, 18)) == "PXB"
    with pytest.raises(ValueError):
        gpu.topology_label(None, 0, (0, 0))


def test_pcie_relation() -> None:
    switch = ["0000:15:01.0", "0000:16:00.0"]
    assert pcie_relation(switch, switch, True, True) == "PIX"
    assert pcie_relation([*switch, "0000:17:00.0"], switch, True, True) == "PXB"
    assert pcie_relation(["0000:15:01.0"], ["0000:15:02.0"], True, True) == "PHB"
    assert pcie_relation(["0000:15:01.0"], ["0000:40:01.0"], False, True) == "NODE"
    assert pcie_relation(["0000:15:01.0"], ["0000:c0:01.0"], False, False) == "SYS"


def test_healthy_hgx_h100(healthy) -> None:
    v = ok_values(healthy)
    assert v["gpu.count"] == 8
    for i in range(8):
        assert v[f"gpu.{i}.name"] == "NVIDIA H100 80GB HBM3"
        assert v[f"gpu.{i}.pci.device_id"] == "0x2330"
        assert (v[f"gpu.{i}.pcie.link_gen"], v[f"gpu.{i}.pcie.link_width"]) == (5, 16)
        assert v[f"gpu.{i}.persistence_mode"] is True
        assert v[f"gpu.{i}.nvlink.count"] == 18 and v[f"gpu.{i}.nvlink.active"] == 18
        assert v[f"gpu.{i}.throttle_reasons"] == ["GpuIdle"]
        assert v[f"gpu.{i}.power.default_limit"] == 700.0
        assert v[f"gpu.{i}.fabric.state"] == "completed"
        for j in range(8):
            if i != j:
                assert v[f"topo.gpu.{i}.{j}"] == "NV18"
                assert v[f"topo.gpu.{i}.{j}.p2p"] == ["read", "write", "nvlink", "atomics"]
    assert v["gpu.0.pci.bus_id"] == "0000:18:00.0"
    assert v["gpu.0.memory.total"] == 81559 and healthy["gpu.0.memory.total"].unit == "MiB"
    assert v["gpu.0.clocks.max_sm"] == 1980 and v["gpu.0.clocks.mem"] == 2619
    assert v["gpu.0.cpu_affinity"] == "0-55,112-167"
    assert v["gpu.4.cpu_affinity"] == "56-111,168-223"
    assert v["gpu.0.nvlink.0.remote_type"] == "nvswitch"
    assert v["gpu.0.nvlink.0.remote_bus_id"] == "0000:05:00.0"
    assert v["gpu.0.remapped_rows.pending"] is False
    # the capture's driver answers 'deprecated' for application clocks
    assert healthy["gpu.0.clocks.app_sm"].status is ReadingStatus.UNSUPPORTED
    assert "Deprecated" in healthy["gpu.0.clocks.app_sm"].reason
    # GPU 0 shares a PCIe switch with the InfiniBand adapter of the host tree
    assert v["topo.gpu.0.nic.0000:19:00.0"] == "PIX"
    assert v["topo.gpu.0.nearest_nic"] == "PIX"
    assert "topo.gpu.1.nearest_nic" not in healthy  # its bus is not in the host tree
    # the tree has an InfiniBand adapter and no nvidia_peermem
    assert v["kernel.gpudirect_rdma"] == "missing"
    assert healthy["topo.gpu.1.nic.0000:19:00.0"].status is ReadingStatus.MISSING


def test_every_planted_fault_is_a_reading(faulty) -> None:
    v = ok_values(faulty)
    assert (v["gpu.3.pcie.link_width"], v["gpu.3.pcie.max_link_width"]) == (8, 16)
    assert v["gpu.2.nvlink.5.state"] == "inactive"
    assert v["gpu.2.nvlink.active"] == 17 and v["gpu.2.nvlink.count"] == 18
    assert v["topo.gpu.2.0"] == "NV17"
    assert v["gpu.5.persistence_mode"] is False
    assert v["gpu.1.remapped_rows.pending"] is True
    assert v["gpu.1.remapped_rows.uncorrectable"] == 1
    assert v["gpu.6.throttle_reasons"] == ["HwSlowdown", "HwThermalSlowdown"]
    assert v["gpu.6.clocks.sm"] == 1155
    lost = faulty["gpu.7.health"]
    assert lost.status is ReadingStatus.ERROR and "GpuIsLost" in lost.reason
    assert faulty["topo.gpu.0.7"].reason == "GPU 7 did not answer (lost)"
    # the healthy GPUs are untouched
    assert v["gpu.0.pcie.link_width"] == 16 and v["gpu.0.persistence_mode"] is True


def test_demo_replays_match_their_generator(tmp_path: Path) -> None:
    script = SNAPSHOTS / "make_demo_replays.py"
    copy = tmp_path / "make_demo_replays.py"
    copy.write_text(script.read_text())
    subprocess.run([sys.executable, str(copy)], check=True, timeout=60)
    for name in (
        "demo-hgx-h100-healthy.toml",
        "demo-hgx-h100-faulty.toml",
        "demo-hgx-h100-healthy.capture.json",
        "demo-hgx-h100-faulty.capture.json",
    ):
        assert (tmp_path / name).read_text() == (SNAPSHOTS / name).read_text(), (
            f"{name} differs from what snapshots/make_demo_replays.py writes now (the probes"
            " read other files, or the generator changed): run it and commit the result"
        )


def test_the_healthy_demo_capture_is_a_healthy_node(tmp_path: Path) -> None:
    """The whole-node demo: its host has the eight GPUs on the PCIe bus (no GPU002), two
    sockets and NUMA nodes, and an InfiniBand adapter beside each GPU."""
    target = tmp_path / "healthy.json"
    run = run_cli(
        "--replay", str(SNAPSHOTS / "demo-hgx-h100-healthy.capture.json"), "--export", str(target)
    )
    assert run.returncode == 0, run.stdout + run.stderr
    data = json.loads(target.read_text())
    # info and not-applicable only: nothing counts against it
    assert not [f for f in data["findings"] if f["severity"] not in ("info", "not-applicable")]
    v = {r["key"]: r.get("value") for p in data["probes"] for r in p["readings"]}
    assert v["pcie.gpu_count"] == 8 and v["nvml.gpu_count"] == 8
    assert v["cpu.sockets"] == 2 and v["numa.nodes"] == [0, 1]
    assert v["numa.0.cpus"] == "0-55,112-167" and v["gpu.4.cpu_affinity"] == "56-111,168-223"
    for index in range(8):
        assert v[f"topo.gpu.{index}.nearest_nic"] == "PIX"
        assert v[f"gpu.{index}.nvlink.0.speed"] == 26.562


class _FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        self.value = value


def _fake_pynvml() -> types.ModuleType:
    """A stand-in pynvml that records what the real backend passes it."""
    module = types.ModuleType("pynvml")
    module.NVMLError = _FakeNVMLError
    module.calls = []
    module.nvmlInit = lambda: None
    module.nvmlShutdown = lambda: None
    module.nvmlDeviceGetHandleByIndex = lambda i: f"handle{i}"

    def common_ancestor(h1, h2):
        module.calls.append(("ancestor", h1, h2))
        return 40

    def clock(handle, kind):
        if handle == "handle1":
            raise _FakeNVMLError(15)  # GpuIsLost
        return {1: 1980}[kind]

    module.nvmlDeviceGetTopologyCommonAncestor = common_ancestor
    module.nvmlDeviceGetClockInfo = clock
    return module


def test_real_backend_passes_handles_and_maps_errors(monkeypatch) -> None:
    fake = _fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    nvml = Nvml(PynvmlBackend())
    assert nvml.call("nvmlDeviceGetTopologyCommonAncestor", 0, 3) == 40
    assert fake.calls == [("ancestor", "handle0", "handle3")]
    assert nvml.call("nvmlDeviceGetClockInfo", 0, 1) == 1980
    with pytest.raises(NvmlError) as error:
        nvml.call("nvmlDeviceGetClockInfo", 1, 1)
    assert error.value.code == "GpuIsLost"
    with pytest.raises(NvmlError) as missing:
        nvml.call("nvmlDeviceGetSomethingNew", 0)
    assert missing.value.code == "FunctionNotFound"
    nvml.close()


def test_mig_instances_from_a_replay() -> None:
    """A GPU in MIG mode (as the realdata H100 MIG capture shows, 'Current: Enabled') lists
    its MIG devices; a GPU without MIG lists none."""
    from gpudiag.nvml import ReplayBackend
    from gpudiag.probes.gpu import GpuCalls, _memory_and_modes

    backend = ReplayBackend(
        {
            "format": "gpudiag-nvml-replay",
            "version": 1,
            "devices": [
                {
                    "nvmlDeviceGetMigMode": [1, 1],
                    "gpudiagMigDevices": [
                        {
                            "index": 1,
                            "uuid": "MIG-b",
                            "gpu_instance": 2,
                            "compute_instance": 0,
                            "memory_total": 19968 * 2**20,
                        },
                        {
                            "index": 0,
                            "uuid": "MIG-a",
                            "gpu_instance": 1,
                            "compute_instance": 0,
                            "memory_total": 9856 * 2**20,
                        },
                    ],
                },
                {"nvmlDeviceGetMigMode": [0, 0]},
            ],
        }
    )
    nvml = Nvml(backend)
    mig_gpu = {r.key: r for r in _memory_and_modes(GpuCalls(nvml, 0))}
    assert mig_gpu["gpu.0.mig.instances"].value == [
        "GI 1 / CI 0: 9856 MiB",
        "GI 2 / CI 0: 19968 MiB",
    ]
    plain_gpu = {r.key: r for r in _memory_and_modes(GpuCalls(nvml, 1))}
    assert "gpu.1.mig.instances" not in plain_gpu and plain_gpu["gpu.1.mig.current"].value is False


def test_real_backend_enumerates_mig_devices(monkeypatch) -> None:
    fake = _fake_pynvml()
    fake.nvmlDeviceGetMaxMigDeviceCount = lambda handle: 3

    def mig_handle(handle, index):
        if index == 1:
            raise _FakeNVMLError(6)  # NotFound: an unused slot
        return f"{handle}/mig{index}"

    class Memory:
        total = 9856 * 2**20

    fake.nvmlDeviceGetMigDeviceHandleByIndex = mig_handle
    fake.nvmlDeviceGetUUID = lambda mig: f"MIG-{mig}"
    fake.nvmlDeviceGetGpuInstanceId = lambda mig: 7
    fake.nvmlDeviceGetComputeInstanceId = lambda mig: 0
    fake.nvmlDeviceGetMemoryInfo = lambda mig: Memory()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    nvml = Nvml(PynvmlBackend())
    devices = nvml.call("gpudiagMigDevices", 0)
    assert [d["index"] for d in devices] == [0, 2]
    assert devices[0]["uuid"] == "MIG-handle0/mig0" and devices[0]["gpu_instance"] == 7


def test_thresholds_given_only_relative_to_t_limit(healthy) -> None:
    """The demo's driver answers NotSupported for the absolute thresholds, as the real H100
    capture's (590.48.01) does, and gives them relative to T.Limit: 41 C, 46 C below
    T.Limit, slowdown 2 C and shutdown 8 C past it (nvidia-smi -q of that H100). Review
    #8: the absolute ones stay unsupported, as the driver said, not 41 + 46 + 2 C (the
    temperature and the margin are of two sensors: the sum drifts with the load); the
    margin to slowdown is 46 - (-2) C, of T.Limit's one sensor."""
    v = ok_values(healthy)
    assert v["gpu.0.temperature.slowdown_tlimit"] == -2
    assert v["gpu.0.temperature.shutdown_tlimit"] == -8
    assert v["gpu.0.temperature.gpu_max_tlimit"] == 0
    assert v["gpu.0.temperature.tlimit_margin"] == 46
    for name in ("slowdown", "shutdown", "gpu_max"):
        reading = healthy[f"gpu.0.temperature.{name}"]
        assert reading.status is ReadingStatus.UNSUPPORTED, reading
        assert reading.source == "nvml:nvmlDeviceGetTemperatureThreshold"
    margin = healthy["gpu.0.temperature.slowdown_margin"]
    assert margin.value == 46 + 2 and margin.unit == "C"
    assert margin.source == (
        "nvml:nvmlDeviceGetMarginTemperature minus nvml:nvmlDeviceGetFieldValues"
    )


def _hot_gpu(margin: int, tlimit: object, absolute: object) -> dict[str, object]:
    """The healthy demo's GPU 0 at 86 C, `margin` C below T.Limit."""
    from gpudiag import tomlcompat

    data = tomlcompat.loads((SNAPSHOTS / "demo-hgx-h100-healthy.toml").read_text())
    device = data["devices"][0]
    device["nvmlDeviceGetTemperature"]["0"] = 86
    device["nvmlDeviceGetMarginTemperature"]["marginTemperature"] = margin
    device["nvmlDeviceGetFieldValues"]["194,0"] = tlimit
    device["nvmlDeviceGetTemperatureThreshold"]["1"] = absolute
    return data


NOT_SUPPORTED = {"error": "NotSupported"}


@pytest.mark.parametrize(
    ("margin", "tlimit", "absolute", "slowdown_margin", "warn"),
    [
        (1, -2, NOT_SUPPORTED, 3, "GPU032"),  # 3 C below slowdown: under 4.45 C
        (12, -2, NOT_SUPPORTED, 14, ""),
        (1, NOT_SUPPORTED, NOT_SUPPORTED, None, ""),  # neither known: neither judges
        (12, -2, 89, 14, "GPU018"),  # 86 C > 95% of the absolute 89 C the driver gives
    ],
)
def test_near_slowdown_is_judged_on_what_the_driver_gives(
    margin: int, tlimit: object, absolute: object, slowdown_margin: int | None, warn: str
) -> None:
    """GPU018 judges the temperature against an absolute slowdown threshold the driver
    gives; GPU032 the margin to slowdown where it gives T.Limit's (R570 on)."""
    from gpudiag.nvml import ReplayBackend
    from gpudiag.probe import ProbeContext
    from gpudiag.ruleengine import evaluate
    from gpudiag.rulefile import load_rules

    nvml = Nvml(ReplayBackend(_hot_gpu(margin, tlimit, absolute), "hot"))
    readings = {r.key: r for r in gpu.collect(ProbeContext(host=None, nvml=nvml))}  # type: ignore[arg-type]
    slowdown = readings["gpu.0.temperature.slowdown"]
    assert slowdown.value == (absolute if isinstance(absolute, int) else None)
    assert readings["gpu.0.temperature.slowdown_margin"].value == slowdown_margin
    rules = [r for r in load_rules() if r.id in ("GPU018", "GPU032")]
    findings = [f for f in evaluate(rules, readings) if f.subject == "GPU 0"]
    assert {f.rule_id for f in findings if f.severity.value == "warning"} == (
        {warn} if warn else set()
    ), findings
    assert not [f for f in findings if f.severity.value == "unknown"], findings


def test_near_slowdown_names_the_threshold_and_where_it_warns_from() -> None:
    """Review #6: at 86 C with slowdown at 89 C, GPU018 said 'within 5% of its slowdown
    threshold (84.55 C)', 95% of the threshold given as the threshold itself."""
    from gpudiag.ruleengine import evaluate
    from gpudiag.rulefile import load_rules

    readings = {
        "gpu.0.temperature.gpu": Reading("gpu.0.temperature.gpu", 86, "C"),
        "gpu.0.temperature.slowdown": Reading("gpu.0.temperature.slowdown", 89, "C"),
    }
    rules = [r for r in load_rules() if r.id == "GPU018"]
    (finding,) = [f for f in evaluate(rules, readings) if f.rule_id == "GPU018"]
    assert finding.message == (
        "GPU 0 at 86 C, within 5% of its slowdown threshold 89 C (warns from 84.55 C)"
    )


@pytest.mark.parametrize("margin", [3, -3])
def test_the_margin_to_slowdown_is_said_true_past_the_threshold(margin: int) -> None:
    """A review: a GPU 3 C past its slowdown threshold was 'is -3 C below its slowdown
    threshold', and every model's message named 'an H100's 89 C' as if it were its own."""
    from gpudiag.ruleengine import evaluate
    from gpudiag.rulefile import load_rules

    key = "gpu.0.temperature.slowdown_margin"
    rules = [r for r in load_rules() if r.id == "GPU032"]
    (finding,) = [f for f in evaluate(rules, {key: Reading(key, margin, "C")})]
    said = f"margin to its slowdown threshold is {margin} C (below 0: past it)"
    assert said in finding.message, finding.message
    assert "below its slowdown" not in finding.message
    assert "an H100's 89 C" not in finding.message
