"""Rack-scale bring-up without the hardware: NVML's fabric info v2/v3/v4 through the C
stand-in, the fabric manager, NVLink 5 modules, IMEX, cuInit through a stand-in
libcuda.so.1, and Grace's NUMA layout, on made-up GB200, GH200 and HGX B200 nodes
(tests/rackscale_nodes.py): each failure named with its severity and fix, each healthy
node OK."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpudiag.hostfs import HostFS
from gpudiag.model import Severity, Snapshot
from gpudiag.nvml import (
    GpuFabricInfoV2,
    GpuFabricInfoV3,
    GpuFabricInfoV4,
    Nvml,
    ReplayBackend,
    struct_version,
)
from gpudiag.probes import default_probes, gpu, rackscale
from gpudiag.probes.fabric import health_flags
from gpudiag.rulefile import load_rules
from gpudiag.session import LiveNode

import rackscale_nodes as nodes
from conftest import FIXTURES, built_once
from standin import PROBE_SCRIPT, build, environment, flatten, run_python

RULES = load_rules()
CUDA_SOURCE = Path(__file__).parent / "cuda_standin" / "libcuda.c"


def judged(host: dict[str, Any], replay: dict[str, Any], probes: Any = None) -> Snapshot:
    """The node's snapshot with the shipped rules (every probe unless PROBES)."""
    chosen = default_probes() if probes is None else probes
    return LiveNode(nodes.hostfs(host), Nvml(ReplayBackend(replay)), chosen, RULES).snapshot()


def verdicts(snapshot: Snapshot, *rule_ids: str) -> set[tuple[str, str, Severity]]:
    """(rule, subject, severity) of the findings of RULE_IDS that count."""
    ignored = {Severity.NOT_APPLICABLE, Severity.UNKNOWN}
    return {
        (f.rule_id, f.subject, f.severity)
        for f in snapshot.findings
        if f.rule_id in rule_ids and f.severity not in ignored
    }


def counted(snapshot: Snapshot) -> list[str]:
    """The findings that would keep the node from OK."""
    return [
        f"{f.rule_id} {f.subject} {f.severity.value}: {f.message}"
        for f in snapshot.findings
        if f.severity not in (Severity.INFO, Severity.NOT_APPLICABLE)
    ]


def gh200_replay() -> dict[str, Any]:
    device = nodes.demo.healthy_gpu(0)
    device["nvmlDeviceGetGpuFabricInfoV"]["state"] = 0  # no NVLink fabric
    device["nvmlDeviceGetC2cModeInfoV"] = {"isC2cEnabled": 1}
    return nodes.demo.replay("GH200 (made up)", [device])


def test_the_health_mask_is_decoded_condition_by_condition() -> None:
    """nvml.h's 2-bit conditions (1 true, 2 false, 0 not supported) and the 4-bit
    configuration reason; NCCL issue 2186's mask 0xaa is every condition false."""
    assert health_flags(0xAA) == [] and health_flags(0) == [] and health_flags(0x1AA) == []
    assert health_flags(0xA9) == ["degraded-bandwidth"]
    assert health_flags(0xA6) == ["route-recovery"]
    assert health_flags(0x9A) == ["route-unhealthy"]
    assert health_flags(0x6A) == ["access-timeout-recovery"]
    assert health_flags(0x5AA) == ["incorrect-configuration:insufficient-nvlinks"]
    assert health_flags(0x2AA) == ["incorrect-configuration:incorrect-sysguid"]
    assert health_flags(0x6AA) == ["incorrect-configuration:incompatible-gpu-firmware"]


def test_the_structures_are_nvml_h_s() -> None:
    """Sizes and version words as nvml.h's NVML_STRUCT_VERSION makes them (v3:
    0x3000028, as cuda-python's and DCGM's headers spell it); v4 has no version field."""
    assert ctypes.sizeof(GpuFabricInfoV2) == 36 and ctypes.sizeof(GpuFabricInfoV3) == 40
    assert struct_version(GpuFabricInfoV2, 2) == 0x02000024
    assert struct_version(GpuFabricInfoV3, 3) == 0x03000028
    assert ctypes.sizeof(GpuFabricInfoV4) == 548  # 16 + 4 + 64 x 8 + 4 + 4 + 4 + 4
    assert "version" not in [name for name, *_ in GpuFabricInfoV4._fields_]


@pytest.fixture(scope="module")
def nvml_standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder, _ = built_once(
        tmp_path_factory, "nvml-standin-current", lambda f: str(build("current", f))
    )
    return folder


def test_the_stand_in_answers_v4_v3_and_v2_per_gpu(nvml_standin: Path, tmp_path: Path) -> None:
    """Through the real pynvml: GPU 0 answers _v4 (typed cliques), GPU 1 only V with v3
    (in progress), GPU 2 v3 with route-unhealthy, too few NVLinks and an unhealthy
    summary, GPU 3 is a driver that refuses v3 (ArgumentVersionMismatch) and answers v2."""
    replay = nodes.gb200_replay()
    devices = replay["devices"]
    for index in (1, 2, 3):
        del devices[index]["nvmlDeviceGetGpuFabricInfo_v4"]
    devices[1]["nvmlDeviceGetGpuFabricInfoV"]["state"] = 2
    devices[2]["nvmlDeviceGetGpuFabricInfoV"].update(healthMask=0x59A, healthSummary=2)
    devices[3]["nvmlDeviceGetGpuFabricInfoV"].update(healthMask=0x1A9)
    del devices[3]["nvmlDeviceGetGpuFabricInfoV"]["healthSummary"]
    devices[3]["gpudiagFabricV2Only"] = 1
    flat, log = tmp_path / "recording.flat", tmp_path / "calls.log"
    flat.write_text(flatten(replay))
    run = run_python(
        PROBE_SCRIPT, environment(nvml_standin, flat, log), str(FIXTURES / "host-basic")
    )
    assert run.returncode == 0, run.stderr[-2000:]
    live = json.loads(run.stdout)
    calls = log.read_text()
    assert "BADPOINTER" not in calls and "UNRECORDED" not in calls
    assert live["gpu.0.fabric.cliques"][1] == ["unicast-pointer:0x7ffd", "multicast-pointer:0x7ffd"]
    assert live["gpu.0.fabric.clique_id"][1] == 0x7FFD
    assert live["gpu.0.fabric.cluster_uuid"][1] == "52070001-0203-0405-0607-08090a0b0c0d"
    assert live["gpu.0.fabric.health_summary"][1] == "healthy"
    assert live["gpu.0.fabric.health_flags"][1] == []
    assert live["gpu.0.c2c.enabled"][1] is True  # Grace's GPUs: NVLink-C2C, not PCIe
    assert "CALL nvmlDeviceGetGpuFabricInfo_v4 gpu=1 -> FunctionNotFound" in calls
    assert live["gpu.1.fabric.state"][1] == "in-progress"
    assert live["gpu.1.fabric.status"][0] == "missing"
    assert (
        live["gpu.1.fabric.cliques"][0] == "unsupported"
        and "_v3" in live["gpu.1.fabric.cliques"][2]
    )
    assert live["gpu.2.fabric.health_flags"][1] == [
        "route-unhealthy",
        "incorrect-configuration:insufficient-nvlinks",
    ]
    assert live["gpu.2.fabric.health_summary"][1] == "unhealthy"
    assert "version=0x3000028 -> ArgumentVersionMismatch" in calls
    assert live["gpu.3.fabric.health_flags"][1] == ["degraded-bandwidth"]
    summary = live["gpu.3.fabric.health_summary"]
    assert summary[0] == "unsupported" and "nvmlGpuFabricInfo_v2" in summary[2]


def test_the_healthy_nodes_are_ok() -> None:
    """The healthy GB200 tray (IMEX, v4 cliques, no local fabric manager), the HGX B200
    (fabric manager, NVLink 5 modules) and a GH200 (nine NUMA nodes, one with CPUs) give
    no finding above info."""
    gb200 = judged(nodes.gb200_host(), nodes.gb200_replay())
    assert counted(gb200) == []
    assert gb200.reading("imex.running").value is True
    assert gb200.reading("fabric.manager.running").status.value == "unsupported"
    b200 = judged(nodes.b200_host(), nodes.b200_replay())
    assert counted(b200) == []
    assert b200.reading("fabric.manager.running").value is True
    assert b200.reading("fabric.manager.modules_missing").value == []
    gh200 = judged(nodes.gh200_host(), gh200_replay())
    assert counted(gh200) == []
    assert gh200.reading("grace.memory_numa_nodes").value == list(range(1, 9))
    assert gh200.reading("gpu.0.c2c.enabled").value is True
    assert b200.reading("gpu.0.c2c.enabled").status.value == "unsupported"  # PCIe to the CPU


FABRIC_PROBES = (gpu.PROBE, rackscale.PROBE)


def test_a_gb300_tray_is_known_by_its_device_id_and_held_to_its_18_nvlinks() -> None:
    """GB300 NVL's device id 0x31c2 (DCGM diag-skus) picks the gb300 profile: a tray of
    them with 16 of 18 links warns that fewer than the model's links are active (NVL006),
    which a GPU of no known model (the made-up GB200 id) cannot be told; with 18, none."""

    def tray(device: int, links: int) -> Snapshot:
        replay = nodes.gb200_replay(links=links)
        for gpu_record in replay["devices"]:
            gpu_record["nvmlDeviceGetPciInfo"]["pciDeviceId"] = device << 16 | 0x10DE
        return judged(nodes.gb200_host(), replay, FABRIC_PROBES)

    assert verdicts(tray(nodes.GB300_ID, 18), "NVL006") == set()
    assert ("NVL006", "GPU 0", Severity.WARNING) in verdicts(tray(nodes.GB300_ID, 16), "NVL006")
    assert verdicts(tray(nodes.GB200_ID, 16), "NVL006") == set()


@pytest.mark.parametrize(
    ("change", "rule", "severity", "command"),
    [
        ({"state": 2}, "NVL008", Severity.CRITICAL, "systemctl status nvidia-fabricmanager"),
        ({"status": 3}, "NVL009", Severity.CRITICAL, "restart nvidia-fabricmanager"),
        ({"mask": 0x1A9}, "NVL010", Severity.WARNING, "nvidia-smi -q"),
        ({"mask": 0x1A6}, "FAB001", Severity.WARNING, "nvidia-smi nvlink -s -i 0"),
        ({"mask": 0x19A}, "FAB002", Severity.CRITICAL, "nvidia-smi -r -i 0"),
        ({"mask": 0x16A}, "FAB003", Severity.WARNING, "nvidia-smi -r -i 0"),
        ({"mask": 0x5AA}, "FAB004", Severity.CRITICAL, "nvidia-smi -q -i 0"),
        ({"summary": 2}, "FAB005", Severity.CRITICAL, "nvidia-smi -q -i 0"),
        ({"summary": 3}, "FAB006", Severity.WARNING, "nvidia-smi nvlink -s -i 0"),
    ],
)
def test_each_fabric_failure_is_named(
    change: dict[str, int], rule: str, severity: Severity, command: str
) -> None:
    """The GB200 tray's NVML made sick one way: that rule fires on every GPU with its
    severity and a fix naming the command, and no other fabric rule does."""
    snapshot = judged(nodes.gb200_host(), nodes.gb200_replay(**change), FABRIC_PROBES)
    fabric_rules = [
        r.id for r in RULES if r.id.startswith("FAB") or r.id in ("NVL008", "NVL009", "NVL010")
    ]
    assert verdicts(snapshot, *fabric_rules) == {(rule, f"GPU {g}", severity) for g in range(4)}
    finding = next(f for f in snapshot.findings if f.rule_id == rule)
    assert command in finding.fix


@pytest.mark.parametrize(
    ("host", "rule", "words"),
    [
        (
            nodes.b200_host(fm_running=False),
            "FAB007",
            "systemctl enable --now nvidia-fabricmanager",
        ),
        (nodes.b200_host(modules=()), "FAB008", "modprobe mlx5_ib ib_umad"),
        (nodes.gb200_host(imex=False), "FAB009", "systemctl enable --now nvidia-imex"),
        (nodes.gb200_host(channels=0), "FAB010", "NVreg_CreateImexChannel0=1"),
        # GPU 2 (0000:3a:00.0) reported on Grace 0: three GPUs on one Grace, one on the other
        (nodes.gb200_host(numa={"0000:3a:00.0": 0}), "FAB012", "numactl"),
        # the GH200's GPU on one of its GPU-memory nodes, which has no CPUs
        (nodes.gh200_host(numa={"0000:18:00.0": 3}), "FAB012", "numactl"),
    ],
    ids=[
        "fm-stopped",
        "nvlink5-modules",
        "imex-stopped",
        "no-imex-channel",
        "gb200-numa",
        "gh200-numa",
    ],
)
def test_each_host_failure_is_named(host: dict[str, Any], rule: str, words: str) -> None:
    """A healthy node's host changed one way: that node rule fires, critical or (NUMA) a
    warning, with a fix naming the command, and no other fabric rule does."""
    snapshot = judged(host, nodes.gb200_replay(), (rackscale.PROBE,))
    severity = Severity.WARNING if rule == "FAB012" else Severity.CRITICAL
    fired = [
        f
        for f in snapshot.findings
        if f.rule_id.startswith("FAB") and f.severity is not Severity.NOT_APPLICABLE
    ]
    assert [(f.rule_id, f.severity) for f in fired] == [(rule, severity)], fired
    assert words in fired[0].fix


@pytest.fixture(scope="module")
def libcuda(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The stand-in libcuda.so.1, built once."""

    def make(folder: Path) -> str:
        subprocess.run(
            [
                "gcc",
                "-shared",
                "-fPIC",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-o",
                str(folder / "libcuda.so.1"),
                str(CUDA_SOURCE),
            ],
            check=True,
            capture_output=True,
        )
        return str(folder)

    folder, _ = built_once(tmp_path_factory, "cuda-standin", make)
    return folder


@pytest.mark.parametrize(
    ("answer", "value"), [("802", "CUDA_ERROR_SYSTEM_NOT_READY (802)"), ("0", "ok")]
)
def test_cuinit_is_a_reading(
    libcuda: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, answer: str, value: str
) -> None:
    """cuInit(0) of the stand-in libcuda.so.1 in a child process: 802 is FAB011 critical,
    naming the fabric; 0 is ok."""
    monkeypatch.setenv("LD_LIBRARY_PATH", str(libcuda))
    monkeypatch.setenv("GPUDIAG_STANDIN_CUINIT", answer)
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev/nvidiactl").write_text("")  # a driver loaded
    host = HostFS(tmp_path, is_root_user=True)
    host.is_this_machine = True  # the tree stands for this node: its libcuda is the stand-in
    reading = rackscale.cuda_init_reading(host)
    assert reading.value == value, reading
    from gpudiag.ruleengine import evaluate

    findings = evaluate([r for r in RULES if r.id == "FAB011"], {reading.key: reading})
    if answer == "0":
        assert findings == []
    else:
        assert [(f.rule_id, f.severity) for f in findings] == [("FAB011", Severity.CRITICAL)]
        assert "802" in findings[0].message and "nvidia-fabricmanager" in findings[0].fix


def test_a_hung_cuinit_is_bounded(libcuda: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver whose cuInit never returns: the child is killed at the limit, said so."""
    monkeypatch.setenv("LD_LIBRARY_PATH", str(libcuda))
    monkeypatch.setenv("GPUDIAG_STANDIN_CUINIT", "hang")
    code, why = rackscale.run_cuinit(timeout=0.3)
    assert code is None and "no answer within 0.3 s" in why


def test_systemctl_show_is_parsed() -> None:
    text = "LoadState=loaded\nActiveState=failed\nSubState=failed\n"
    assert rackscale.parse_systemctl_show(text) == {
        "LoadState": "loaded",
        "ActiveState": "failed",
        "SubState": "failed",
    }
    assert rackscale.last_error_line("a\n[ERROR] one\nok\n[ERROR] two\n") == "[ERROR] two"


def test_a_unit_s_state_on_the_live_node_comes_from_systemctl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the live node `systemctl show` (tests/standins/systemctl on PATH) says whether
    the fabric manager runs: failed is not running, and says so."""
    script = tmp_path / "systemctl"
    text = (Path(__file__).parent / "standins" / "systemctl").read_text().split("\n", 1)[1]
    script.write_text(f"#!{sys.executable}\n{text}")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    unit = "nvidia-fabricmanager.service"
    host = HostFS("/")
    for state, running in (("failed", False), ("active", True)):
        properties = {"LoadState": "loaded", "ActiveState": state, "SubState": state}
        monkeypatch.setenv("STANDIN_SYSTEMCTL", json.dumps({unit: properties}))
        found = rackscale.service_running(host, unit, "nv-fabricmanager")
        assert found == (running, f"systemd: {state} ({state})", f"systemctl:{unit}")
