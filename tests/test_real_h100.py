"""The real H100 node (../shared/realdata/h100-vm/: a VM with one H100 passed through,
captured by gpudiag with nvidia-smi's outputs of the same minute): a healthy node comes
out OK, and the same capture made sick (a GPU lost part-way, a second GPU on the bus, a
second NUMA node, bare metal) says what is wrong. Each variant changes the real capture
in one place, in a temporary copy; the data itself is never copied into the project."""

from __future__ import annotations

import copy
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpudiag import capture
from gpudiag.kernels import device
from gpudiag.kernels.plans import KernelPlan
from gpudiag.kernels.runner import PlanRun
from gpudiag.model import ProbeStatus, Severity, Snapshot
from gpudiag.probes import default_probes
from gpudiag.rulefile import load_rules
from gpudiag.session import LiveNode, with_findings

import fakecuda
from conftest import REPO, realdata_dir, run_cli

RULES = load_rules()


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    """The real capture, as data."""
    path = realdata_dir() / "h100-vm" / "h100-vm.capture.json"
    return json.loads(path.read_text())


def judged(data: dict[str, Any], tmp_path: Path, name: str = "node") -> Snapshot:
    """A capture (changed or not) written out, loaded as --replay loads it, and judged."""
    path = tmp_path / f"{name}.capture.json"
    path.write_text(json.dumps(data))
    host, nvml, _ = capture.load(path)
    return LiveNode(host, nvml, default_probes(), RULES).snapshot()


def severities(snapshot: Snapshot) -> dict[str, set[Severity]]:
    """Each rule's severities in the snapshot's findings."""
    found: dict[str, set[Severity]] = {}
    for finding in snapshot.findings:
        found.setdefault(finding.rule_id, set()).add(finding.severity)
    return found


def test_the_healthy_h100_is_ok_for_nagios() -> None:
    """The done-when of the issue: the real node, replayed, is OK (exit 0); the info
    findings (a VM, a container, one PCIe replay) never set the exit code."""
    path = realdata_dir() / "h100-vm" / "h100-vm.capture.json"
    result = run_cli("--replay", str(path), "health", "--for", "nagios", timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith("OK - 0 critical, 0 warning, 0 unknown"), first
    assert "no probe produced it" not in result.stdout


def test_what_the_node_cannot_have_does_not_apply(recorded, tmp_path: Path) -> None:
    """Every finding that kept this node from OK was evidence the node cannot have; each
    is now not applicable, saying why in the producer's words."""
    snapshot = judged(recorded, tmp_path)
    assert not any("no probe produced it" in f.message for f in snapshot.findings)
    why = {
        ("NVL006", "GPU 0"): "no NVLink: nvmlDeviceGetNvLinkState: NotSupported",
        ("NVL009", "GPU 0"): "no NVLink fabric (fabric state not-supported)",
        ("CPU001", "node"): "a VM (unknown hypervisor) has no CPU frequency scaling",
        ("CPU002", "node"): "a VM (unknown hypervisor) has no CPU frequency scaling",
        ("CPU003", "node"): "a VM (unknown hypervisor) has no CPU idle states",
        ("CPU004", "node"): "a VM (unknown hypervisor) has no CPU frequency scaling",
        ("MEM005", "node"): "a VM (unknown hypervisor) has no EDAC memory controllers",
        ("MEM006", "node"): "a VM (unknown hypervisor) has no EDAC memory controllers",
        ("PCIE004", "PCIe 0000:00:03.0"): "a virtual virtio device (vendor 0x1af4) has no PCIe",
    }
    by_subject = {(f.rule_id, f.subject): f for f in snapshot.findings}
    for (rule, subject), words in why.items():
        finding = by_subject[(rule, subject)]
        assert finding.severity is Severity.NOT_APPLICABLE, finding
        assert words in finding.message, finding.message
    # one NUMA node: the kernel's -1 means node 0 there, as nvidia-smi topo -m says
    assert not [f for f in snapshot.findings if f.rule_id == "PCIE010"]
    numa = snapshot.reading("pcie.0000:00:03.0.numa_node")
    assert numa is not None and numa.value == 0 and "one NUMA node" in numa.reason
    assert {f.severity for f in snapshot.findings} <= {Severity.INFO, Severity.NOT_APPLICABLE}


def test_a_capture_is_judged_with_its_own_host_files(recorded, tmp_path: Path) -> None:
    """--replay takes the capture's host files as its node's: the rules comparing NVML
    with the bus apply (GPU002, GPU003, GPU031), and a second NVIDIA GPU on the recorded
    bus that NVML does not list is GPU002 CRITICAL, as it would have been live."""
    snapshot = judged(recorded, tmp_path)
    match = snapshot.reading("nvml.host_files_match")
    assert match is not None and match.value is True
    applied = {f.rule_id for f in snapshot.findings if f.severity is Severity.NOT_APPLICABLE}
    assert not applied & {"GPU002", "GPU003", "GPU031"}

    off_the_driver = copy.deepcopy(recorded)
    host = off_the_driver["host"]
    host["listdir"]["/sys/bus/pci/devices"].append("0000:00:07.0")
    base = "/sys/bus/pci/devices/0000:00:07.0"
    host["files"][f"{base}/vendor"] = {"text": "0x10de\n"}
    host["files"][f"{base}/class"] = {"text": "0x030200\n"}
    sick = judged(off_the_driver, tmp_path, "second-gpu")
    assert severities(sick).get("GPU002") == {Severity.CRITICAL}


def test_a_gpu_lost_part_way_through_the_probe_is_gpu001(recorded, tmp_path: Path) -> None:
    """GpuIsLost from one call after the GPU's name was read: GPU001 CRITICAL, health
    exits 2 and drains; the lost GPU's other rules are silent (no '0 active NVLinks')."""
    lost = copy.deepcopy(recorded)
    lost["nvml"]["devices"][0]["nvmlDeviceGetPowerUsage"] = {"error": "GpuIsLost"}
    path = tmp_path / "lost.capture.json"
    path.write_text(json.dumps(lost))
    result = run_cli("--replay", str(path), "health", "--for", "nagios", timeout=120)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stdout.startswith("CRITICAL - 1 critical")
    assert "GPU001 GPU 0" in result.stdout and "nvmlDeviceGetPowerUsage: GpuIsLost" in result.stdout
    assert "NVL006" not in result.stdout


@pytest.mark.parametrize(
    ("recheck", "lost"),
    [({"error": "Unknown"}, True), (None, False)],
    ids=["recheck-fails", "recheck-answers"],
)
def test_an_unknown_error_loses_the_gpu_only_when_the_recheck_fails(
    recorded, tmp_path: Path, recheck: Any, lost: bool
) -> None:
    """One call's Unknown Error must not drain a node: only when the handle's PCI info,
    asked again, fails too. (A replay answers a call the same every time, so the failing
    re-check is the PCI info recorded as failing.)"""
    data = copy.deepcopy(recorded)
    device = data["nvml"]["devices"][0]
    device["nvmlDeviceGetPowerUsage"] = {"error": "Unknown"}
    if recheck is not None:
        device["nvmlDeviceGetPciInfo"] = recheck
    snapshot = judged(data, tmp_path)
    gpu001 = [f for f in snapshot.findings if f.rule_id == "GPU001"]
    if lost:
        assert [f.severity for f in gpu001] == [Severity.CRITICAL]
        assert "re-check of its PCI info failed too" in gpu001[0].message
    else:
        assert gpu001 == []
        health = snapshot.reading("gpu.0.health")
        assert health is not None and health.value == "ok"


def test_bare_metal_without_cpufreq_or_edac_stays_unknown(recorded, tmp_path: Path) -> None:
    """The counter-case: the same files on a node that is no VM (no hypervisor flag, no
    VM's DMI) should have cpufreq and EDAC: CPU001 and MEM005 stay UNKNOWN."""
    metal = copy.deepcopy(recorded)
    cpuinfo = metal["host"]["files"]["/proc/cpuinfo"]
    cpuinfo["text"] = cpuinfo["text"].replace(" hypervisor", "")
    snapshot = judged(metal, tmp_path, "metal")
    assert snapshot.reading("host.virt.vm").value == "none"  # type: ignore[union-attr]
    found = severities(snapshot)
    assert found["CPU001"] == {Severity.UNKNOWN}
    assert found["CPU002"] == {Severity.UNKNOWN}
    assert found["MEM005"] == {Severity.UNKNOWN}
    assert found["MEM006"] == {Severity.INFO}  # an info rule that cannot check stays info
    # a virtio device has no link on bare metal either: it is virtual wherever it is
    assert found["PCIE004"] == {Severity.NOT_APPLICABLE}


def test_numa_minus_one_on_a_two_node_machine_still_fires_pcie010(recorded, tmp_path: Path) -> None:
    """The counter-case: -1 on a machine with two NUMA nodes is a missing affinity."""
    two = copy.deepcopy(recorded)
    two["host"]["listdir"]["/sys/devices/system/node"].append("node1")
    snapshot = judged(two, tmp_path, "two-nodes")
    pcie010 = [f for f in snapshot.findings if f.rule_id == "PCIE010"]
    assert [f.severity for f in pcie010] == [Severity.WARNING, Severity.WARNING]
    assert "no NUMA affinity (-1)" in pcie010[0].message


def test_a_geforce_without_an_inforom_image_is_not_compared(tmp_path: Path) -> None:
    """GPU020 on a real GeForce GTX 1050 (nvidia-smi -q -x prints img_version N/A): the
    rule does not apply, where it said 'cannot check'."""
    xml = realdata_dir() / "nvidia-smi-xml" / "datakit__gtx-1050-1.xml"
    out = tmp_path / "gtx1050.json"
    assert run_cli("import", str(xml), "-o", str(out)).returncode in (0, 1, 2)
    (gpu020,) = [f for f in json.loads(out.read_text())["findings"] if f["rule_id"] == "GPU020"]
    assert gpu020["severity"] == "not-applicable", gpu020
    assert "inforom.image is unsupported" in gpu020["message"]


def no_gpu_node(recorded: dict[str, Any], bus: bool) -> dict[str, Any]:
    """The real node with its NVIDIA driver gone (nvmlInit: DriverNotLoaded), and without
    its GPU on the bus too unless `bus`: a login node, or a GPU node whose GPU fell off."""
    data = copy.deepcopy(recorded)
    data["nvml"] = {"init": {"error": "DriverNotLoaded"}, "system": {}, "devices": []}
    if not bus:
        data["host"]["listdir"]["/sys/bus/pci/devices"].remove("0000:00:06.0")
    return data


def test_a_node_without_nvidia_gpus_is_ok_and_says_so(recorded, tmp_path: Path) -> None:
    """No NVIDIA PCI device and no NVML: NVML001, NVML002, GPU002, GPU003 and GPU031 do
    not apply; health is OK with 'no NVIDIA GPU on this node'. With the GPU still on the
    bus, NVML not answering stays NVML001 CRITICAL."""
    path = tmp_path / "login.capture.json"
    path.write_text(json.dumps(no_gpu_node(recorded, bus=False)))
    result = run_cli("--replay", str(path), "health", "--for", "nagios", timeout=120)
    assert result.returncode == 0, result.stdout
    first = result.stdout.splitlines()[0]
    assert first.startswith("OK - ") and "; no NVIDIA GPU on this node |" in first
    snapshot = judged(no_gpu_node(recorded, bus=False), tmp_path)
    for rule in ("NVML001", "NVML002", "GPU002", "GPU003", "GPU031"):
        (finding,) = [f for f in snapshot.findings if f.rule_id == rule]
        assert finding.severity is Severity.NOT_APPLICABLE, finding
        assert "no NVIDIA GPU on this node" in finding.message

    on_bus = judged(no_gpu_node(recorded, bus=True), tmp_path, "driver-gone")
    assert severities(on_bus)["NVML001"] == {Severity.CRITICAL}


def test_a_site_that_expects_gpus_gets_critical_when_none_is_there(
    recorded, tmp_path: Path
) -> None:
    """examples/site-rules/expected-gpus.toml (8 GPUs expected): the same node without
    GPUs is CRITICAL, as GPUs that vanished from the bus are the worst fault."""
    path = tmp_path / "gone.capture.json"
    path.write_text(json.dumps(no_gpu_node(recorded, bus=False)))
    site = str(REPO / "examples" / "site-rules")
    result = run_cli("--replay", str(path), "--rules", site, "health", timeout=120)
    assert result.returncode == 2, result.stdout
    assert "SITE001" in result.stdout and "lists 0 NVIDIA GPUs, this node has 8" in result.stdout


def _after_copies(data: dict[str, Any], tmp_path: Path, name: str) -> Snapshot:
    """The capture judged with host-to-device copies run on its host files (the device
    fake standing in for its one GPU: no GPU figure here is a measurement)."""
    path = tmp_path / f"{name}.capture.json"
    path.write_text(json.dumps(data))
    host, nvml, _ = capture.load(path)
    previous = device.use(fakecuda.FakeCuda(1))
    try:
        plan = KernelPlan(("copy",), "gpu", 1 << 20, trials=2)
        results = PlanRun(plan, host=host).run()
    finally:
        device.use(previous)
    snapshot = LiveNode(host, nvml, default_probes(), RULES).snapshot()
    return with_findings(replace(snapshot, kernels=tuple(results)), RULES)


def test_one_numa_node_has_no_remote_copy_to_judge(recorded, tmp_path: Path) -> None:
    """KRN012 (host memory on the GPU's own node slower than a remote one) does not apply
    on the real one-node H100: the runner says why the remote placement is not there,
    where it said nothing and the rule found 'no probe produced it'."""
    snapshot = _after_copies(recorded, tmp_path, "one-node")
    skipped = [k for k in snapshot.kernels if k.metric.endswith(".remote")]
    assert [k.metric for k in skipped] == ["h2d.remote", "d2h.remote", "bidir.remote"]
    assert {k.status for k in skipped} == {ProbeStatus.SKIPPED}
    assert {k.error for k in skipped} == {"one NUMA node: no remote host memory"}
    krn012 = [f for f in snapshot.findings if f.rule_id == "KRN012"]
    assert [f.severity for f in krn012] == [Severity.NOT_APPLICABLE]
    assert "one NUMA node: no remote host memory" in krn012[0].message
    assert not [f for f in snapshot.findings if "no probe produced it" in f.message]


def test_two_numa_nodes_copy_from_both_and_krn012_judges(recorded, tmp_path: Path) -> None:
    """The counter-case: with a second node (each node one of this machine's CPUs) the
    remote copies run and KRN012 judges them: quiet where local is as fast, fired where
    the local copies are made slower."""
    cpus = sorted(os.sched_getaffinity(0))
    two = copy.deepcopy(recorded)
    two["host"]["listdir"]["/sys/devices/system/node"].append("node1")
    files = two["host"]["files"]
    files["/sys/devices/system/node/node0/cpulist"] = {"text": f"{cpus[0]}\n"}
    second = cpus[1] if len(cpus) > 1 else cpus[0]
    files["/sys/devices/system/node/node1/cpulist"] = {"text": f"{second}\n"}
    snapshot = _after_copies(two, tmp_path, "two-nodes")
    by = {k.metric: k for k in snapshot.kernels if k.kernel == "copy"}
    assert by["h2d.remote"].status is ProbeStatus.OK, by["h2d.remote"].error
    assert dict(by["h2d.remote"].params)["numa_node"] == 1
    assert not [f for f in snapshot.findings if f.rule_id == "KRN012"]  # judged, fine
    local = by["h2d.local"]
    slow = replace(local, samples=tuple(v / 2 for v in local.samples), stats=None)
    kernels = tuple(slow if k is local else k for k in snapshot.kernels)
    fired = with_findings(replace(snapshot, kernels=kernels, findings=()), RULES)
    assert [f.severity for f in fired.findings if f.rule_id == "KRN012"] == [Severity.WARNING]
