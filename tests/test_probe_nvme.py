"""The NVMe probe: real trees from ../shared/realdata (node_exporter's and procfs's
fixtures), a hand-made tree for what they lack (a live-style /sys/class/nvme link, a
degraded link, an unbound function, unreadable and bad files), the rules on both, the
host screen's group, and --redact on the serial."""

from __future__ import annotations

import os
from pathlib import Path

from gpudiag import views
from gpudiag.hostfs import HostFS
from gpudiag.model import ProbeResult, ProbeStatus, Reading, ReadingStatus, Severity, Snapshot
from gpudiag.probe import ProbeContext
from gpudiag.probes import nvme
from gpudiag.ruleengine import evaluate
from gpudiag.rulefile import load_rules

from conftest import FIXTURES, run_cli

NODE_EXPORTER = "node_exporter__collector__fixtures__sys"
PROCFS = "procfs__testdata__fixtures"


def _readings(root: Path) -> dict[str, Reading]:
    context = ProbeContext(host=HostFS(root, is_root_user=True), nvml=None)  # type: ignore[arg-type]
    return {r.key: r for r in nvme.collect(context)}


def _values(readings: dict[str, Reading]) -> dict[str, object]:
    return {k: r.value for k, r in readings.items() if r.ok}


def _fired(readings: dict[str, Reading]) -> set[tuple[str, str, Severity]]:
    rules = [r for r in load_rules() if r.id.startswith("NVME")]
    return {
        (f.rule_id, f.subject, f.severity)
        for f in evaluate(rules, readings)
        if f.severity in (Severity.CRITICAL, Severity.WARNING, Severity.INFO)
    }


# ------------------------------------------------------------------ the real trees


def test_node_exporter_tree(realdata_trees: dict[str, Path]) -> None:
    readings = _readings(realdata_trees[NODE_EXPORTER])
    v = _values(readings)
    assert v["nvme.functions"] == ["0000:01:00.0"]
    assert v["nvme.unbound_functions"] == []  # its driver link names nvme
    assert v["nvme.controllers"] == ["nvme0", "nvme1", "nvme2", "nvme3"]
    # the fixture's /sys/class/nvme/nvme0 is a directory of its own (a 970 PRO), not the
    # link to the PCI function's nvme/nvme0 (a CT2000P3SSD8) a live kernel makes: the
    # controller's files are read from /sys/class/nvme, its link from the function
    assert v["nvme.0.model"] == "Samsung SSD 970 PRO 512GB"
    assert v["nvme.0.serial"] == "S680HF8N190894I"
    assert v["nvme.0.firmware_rev"] == "1B2QEXP7"
    assert v["nvme.0.state"] == "live"
    # found through the PCI function's nvme/ directory (the class entry has no device link)
    assert v["nvme.0.pci_address"] == "0000:01:00.0"
    assert readings["nvme.0.pci_address"].source == "sysfs:bus/pci/devices/0000:01:00.0/nvme"
    # a PCIe 4.0 x4 SSD behind a PCIe 3.0 x8 root port (0000:00:02.1)
    assert (v["nvme.0.current_link_speed"], v["nvme.0.current_link_width"]) == (8.0, 4)
    assert (v["nvme.0.max_link_speed"], v["nvme.0.max_link_width"]) == (16.0, 4)
    assert (v["nvme.0.port_max_link_speed"], v["nvme.0.port_max_link_width"]) == (8.0, 8)
    assert (v["nvme.0.attainable_link_speed"], v["nvme.0.attainable_link_width"]) == (8.0, 4)
    assert readings["nvme.0.port_max_link_speed"].source == (
        "sysfs:bus/pci/devices/0000:00:02.1/max_link_speed"
    )
    assert readings["nvme.0.current_link_speed"].unit == "GT/s"
    assert readings["nvme.0.max_link_width"].unit == "lanes"
    # the class entry of this capture has no transport file: missing, said so
    assert readings["nvme.0.transport"].status is ReadingStatus.MISSING
    assert "transport not found" in readings["nvme.0.transport"].reason
    # nvme1-3: Fibre Channel controllers of nvme-subsys0, nvme3 dead
    assert [v[f"nvme.{n}.transport"] for n in (1, 2, 3)] == ["fc", "fc", "fc"]
    assert v["nvme.1.address"] == "nn-0x200000109b123457:pn-0x100000109b123457"
    assert [v[f"nvme.{n}.state"] for n in (1, 2, 3)] == ["live", "live", "dead"]
    fc_link = readings["nvme.3.current_link_speed"]
    assert fc_link.status is ReadingStatus.UNSUPPORTED
    assert fc_link.reason == "nvme3 is reached over fc: it has no PCI function of its own"


def test_node_exporter_tree_judged(realdata_trees: dict[str, Path]) -> None:
    fired = _fired(_readings(realdata_trees[NODE_EXPORTER]))
    assert fired == {
        ("NVME001", "nvme3", Severity.WARNING),  # dead
        ("NVME005", "nvme0", Severity.INFO),  # a 16 GT/s SSD in an 8 GT/s slot
    }


def test_procfs_tree(realdata_trees: dict[str, Path]) -> None:
    readings = _readings(realdata_trees[PROCFS])
    v = _values(readings)
    assert v["nvme.controllers"] == ["nvme0", "nvme1", "nvme2", "nvme3", "nvme4"]
    assert v["nvme.0.model"] == "Samsung SSD 970 PRO 512GB"
    assert v["nvme.0.pci_address"] == "0000:01:00.0"
    # a PCIe 3.0 x4 SSD in a PCIe 3.0 x8 slot: at its best
    assert (v["nvme.0.current_link_speed"], v["nvme.0.max_link_speed"]) == (8.0, 8.0)
    assert (v["nvme.0.current_link_width"], v["nvme.0.max_link_width"]) == (4, 4)
    assert v["nvme.0.port_max_link_width"] == 8
    assert [v[f"nvme.{n}.transport"] for n in (3, 4)] == ["tcp", "rdma"]
    assert v["nvme.3.address"] == "traddr=10.0.0.1,trsvcid=4420"
    assert [v[f"nvme.{n}.state"] for n in (1, 2, 3, 4)] == ["live", "dead", "live", "connecting"]
    assert _fired(readings) == {
        ("NVME001", "nvme2", Severity.WARNING),
        ("NVME001", "nvme4", Severity.WARNING),
    }


def test_hwloc_trees_hold_no_nvme(realdata_trees: dict[str, Path]) -> None:
    """The hwloc captures have SATA and RAID storage (0x0101, 0x0104), no NVMe."""
    for name in ("hwloc__40intel64-2g2n4c+pcilocality", "hwloc__nvidia-dgx-gb10"):
        v = _values(_readings(realdata_trees[name]))
        assert (v["nvme.functions"], v["nvme.controllers"]) == ([], []), name


# ------------------------------------------------------------------ a hand-made tree


def _write(root: Path, path: str, text: str) -> None:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def _link(root: Path, path: str, target: str) -> None:
    where = root / path
    where.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, where)


def _function(
    root: Path, parent: str, address: str, speeds: tuple[str, str], widths: tuple[int, int]
) -> str:
    """A PCI function below `parent` (a sysfs devices path), linked from bus/pci/devices."""
    dev = f"{parent}/{address}"
    _write(root, f"sys/{dev}/class", "0x010802\n")
    _write(root, f"sys/{dev}/current_link_speed", f"{speeds[0]}\n")
    _write(root, f"sys/{dev}/max_link_speed", f"{speeds[1]}\n")
    _write(root, f"sys/{dev}/current_link_width", f"{widths[0]}\n")
    _write(root, f"sys/{dev}/max_link_width", f"{widths[1]}\n")
    _link(root, f"sys/bus/pci/devices/{address}", f"../../../{dev}")
    return dev


def _controller(root: Path, dev: str, name: str, state: str = "live") -> None:
    """A controller below its PCI function, linked from /sys/class/nvme as on a live node."""
    ctrl = f"sys/{dev}/nvme/{name}"
    for f, text in (
        ("model", "Made Up SSD 4TB                         "),
        ("serial", "MADEUP0001          "),
        ("firmware_rev", "1.0     "),
        ("state", state),
        ("transport", "pcie"),
        ("address", dev.rsplit("/", 1)[-1]),
    ):
        _write(root, f"{ctrl}/{f}", f"{text}\n")
    _link(root, f"{ctrl}/device", "../../../" + dev.rsplit("/", 1)[-1])
    _link(root, f"sys/class/nvme/{name}", f"../../{dev}/nvme/{name}")


def _made_up_tree(root: Path) -> Path:
    port = "devices/pci0000:00/0000:00:01.0"
    _write(root, f"sys/{port}/class", "0x060400\n")
    _write(root, f"sys/{port}/max_link_speed", "16.0 GT/s PCIe\n")
    _write(root, f"sys/{port}/max_link_width", "4\n")
    _link(root, "sys/bus/pci/devices/0000:00:01.0", f"../../../{port}")
    # nvme0: a Gen4 x4 SSD in a Gen4 x4 slot, trained at Gen3 x2
    first = _function(root, port, "0000:02:00.0", ("8.0 GT/s PCIe", "16.0 GT/s PCIe"), (2, 4))
    _link(root, f"sys/{first}/driver", "../../../../bus/pci/drivers/nvme")
    _controller(root, first, "nvme0")
    # an NVMe function nobody drives
    _function(root, port, "0000:03:00.0", ("16.0 GT/s PCIe", "16.0 GT/s PCIe"), (4, 4))
    # nvme1: on the root bus (as in a VM), link speed 'Unknown', its max width unreadable
    second = _function(
        root, "devices/pci0000:80", "0000:80:00.0", ("Unknown", "16.0 GT/s PCIe"), (4, 4)
    )
    _link(root, f"sys/{second}/driver", "../../../bus/pci/drivers/nvme")
    _controller(root, second, "nvme1")
    (root / f"sys/{second}/max_link_width").unlink()
    # nvme2: listed, but nothing says where it is
    _write(root, "sys/class/nvme/nvme2/state", "resetting\n")
    return root


def test_made_up_tree(tmp_path: Path) -> None:
    readings = _readings(_made_up_tree(tmp_path))
    v = _values(readings)
    assert v["nvme.functions"] == ["0000:02:00.0", "0000:03:00.0", "0000:80:00.0"]
    assert v["nvme.unbound_functions"] == ["0000:03:00.0"]
    assert v["nvme.controllers"] == ["nvme0", "nvme1", "nvme2"]
    # stripped of the padding the kernel keeps
    assert (v["nvme.0.model"], v["nvme.0.serial"]) == ("Made Up SSD 4TB", "MADEUP0001")
    assert v["nvme.0.pci_address"] == "0000:02:00.0"
    assert readings["nvme.0.pci_address"].source == "sysfs:class/nvme/nvme0/device"
    assert (v["nvme.0.current_link_speed"], v["nvme.0.attainable_link_speed"]) == (8.0, 16.0)
    assert (v["nvme.0.current_link_width"], v["nvme.0.attainable_link_width"]) == (2, 4)

    unknown = readings["nvme.1.current_link_speed"]
    assert unknown.status is ReadingStatus.ERROR
    assert "no GT/s figure in 'Unknown'" in unknown.reason
    root_bus = readings["nvme.1.port_max_link_speed"]
    assert root_bus.status is ReadingStatus.UNSUPPORTED
    assert root_bus.reason == "0000:80:00.0 sits on a root bus: sysfs shows no port above it"
    assert v["nvme.1.attainable_link_speed"] == 16.0  # no port: the SSD's own maximum
    width = readings["nvme.1.attainable_link_width"]
    assert width.status is ReadingStatus.MISSING and "max_link_width not found" in width.reason
    assert width.unit == "lanes"

    lost = readings["nvme.2.pci_address"]
    assert lost.status is ReadingStatus.MISSING
    assert lost.reason == "nvme2: no device link, no PCI function holding it, and no PCI address"
    assert readings["nvme.2.max_link_width"].reason == lost.reason
    assert readings["nvme.2.model"].status is ReadingStatus.MISSING


def test_made_up_tree_judged(tmp_path: Path) -> None:
    readings = _readings(_made_up_tree(tmp_path))
    rules = [r for r in load_rules() if r.id.startswith("NVME")]
    findings = {(f.rule_id, f.subject): f for f in evaluate(rules, readings)}
    assert findings["NVME002", "nvme0"].message == (
        "nvme0 links at x2, the SSD and its port allow x4"
    )
    assert findings["NVME003", "nvme0"].message == (
        "nvme0 links at 8 GT/s, the SSD and its port allow 16 GT/s"
    )
    assert findings["NVME001", "nvme2"].message == "nvme2 is resetting"
    assert findings["NVME006", "node"].message == "NVMe PCI functions with no driver: 0000:03:00.0"
    # the unreadable link of nvme1 is not judged as a pass: unknown, saying why
    assert findings["NVME003", "nvme1"].severity is Severity.UNKNOWN
    assert "Unknown" in findings["NVME003", "nvme1"].message
    assert ("NVME004", "nvme0") not in findings and ("NVME005", "nvme0") not in findings


def test_unreadable_class_file_is_skipped_not_guessed(tmp_path: Path) -> None:
    root = _made_up_tree(tmp_path)
    (root / "sys/devices/pci0000:00/0000:00:01.0/0000:03:00.0/class").write_text("garbage\n")
    v = _values(_readings(root))
    assert v["nvme.functions"] == ["0000:02:00.0", "0000:80:00.0"]


def test_no_nvme_at_all(tmp_path: Path) -> None:
    (tmp_path / "sys").mkdir()
    v = _values(_readings(tmp_path))
    assert v == {"nvme.functions": [], "nvme.unbound_functions": [], "nvme.controllers": []}


# ------------------------------------------------------------------ what a user sees


def test_host_screen_shows_the_storage_group(realdata_trees: dict[str, Path]) -> None:
    readings = tuple(_readings(realdata_trees[NODE_EXPORTER]).values())
    snapshot = Snapshot(
        host="n",
        created="2026-11-23T00:00:00Z",
        gpudiag_version="0",
        probes=(ProbeResult("nvme", ProbeStatus.OK, 0.0, readings),),
    )
    tree = views.host_tree(snapshot)
    storage = tree["Storage"]
    assert [r.key for r in storage[""]] == [
        "nvme.controllers",
        "nvme.functions",
        "nvme.unbound_functions",
    ]
    assert set(storage) == {"", "0", "1", "2", "3"}
    assert "nvme.0.model" in {r.key for r in storage["0"]}


def test_redact_replaces_the_serial(realdata_trees: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "snap.toml"
    args = ["--root", str(realdata_trees[NODE_EXPORTER])]
    args += ["--nvml-replay", str(FIXTURES / "replay-no-driver.toml"), "--redact"]
    result = run_cli(*args, "--export", str(out))
    assert out.exists(), result.stderr
    text = out.read_text()
    assert "S680HF8N190894I" not in text
    assert "serial-1" in text
    assert "Samsung SSD 970 PRO 512GB" in text  # the model names no machine
