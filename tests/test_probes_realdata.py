"""The host probes on real machines' captured trees from ../shared/realdata: the values
those files hold come back as readings."""

from __future__ import annotations

from pathlib import Path

from gpudiag.model import ReadingStatus

from conftest import ok_values, probe_readings


def test_every_realdata_tree_probes_cleanly(realdata_trees: dict[str, Path]) -> None:
    assert len(realdata_trees) >= 5
    for name, root in realdata_trees.items():
        readings = probe_readings(root)
        for reading in readings.values():
            assert reading.source, (name, reading.key)
            assert reading.ok or reading.reason, (name, reading.key)


def test_realdata_values(realdata_trees: dict[str, Path]) -> None:
    gb10 = probe_readings(realdata_trees["hwloc__nvidia-dgx-gb10"])
    assert gb10["host.kernel.release"].value == "6.17.0-1014-nvidia"
    assert gb10["host.kernel.release"].source == "procfs:version"
    assert gb10["dmi.product_name"].value == "NVIDIA_DGX_Spark"
    # aarch64: no x86 flags line, so the hypervisor flag is unsupported, not false
    assert gb10["host.virt.cpu_hypervisor_flag"].status is ReadingStatus.UNSUPPORTED
    xeon = probe_readings(realdata_trees["hwloc__40intel64-2g2n4c+pcilocality"])
    assert xeon["dmi.product_name"].value == "PowerEdge R910"
    assert xeon["host.virt.vm"].value == "none"
    power9 = probe_readings(realdata_trees["hwloc__nvidiagpunumanodes"])
    assert power9["host.kernel.release"].value.endswith(".ppc64le")
    assert power9["dmi.sys_vendor"].status is ReadingStatus.MISSING


def test_node_exporter_sys_tree(realdata_trees: dict[str, Path]) -> None:
    readings = probe_readings(realdata_trees["node_exporter__collector__fixtures__sys"])
    v = ok_values(readings)
    assert v["cpu.freq.governor"] == "powersave"
    assert v["numa.nodes"] == [0, 1, 2]
    assert (v["numa.0.cpus"], v["numa.1.cpus"]) == ("0-1", "2-3")
    assert v["dmi.product_name"] == "PowerEdge R6515"
    assert v["dmi.sys_vendor"] == "Dell Inc."
    nic = "pcie.0000:45:00.0"
    assert v[f"{nic}.kind"] == "nic"
    assert (v[f"{nic}.current_link_speed"], v[f"{nic}.current_link_width"]) == (5.0, 4)
    assert (v[f"{nic}.max_link_speed"], v[f"{nic}.max_link_width"]) == (5.0, 4)
    assert v[f"{nic}.numa_node"] == 0
    assert (v["faults.edac.correctable"], v["faults.edac.uncorrectable"]) == (1, 5)
    assert v["power.rapl.intel-rapl:0.name"] == "package-0"


def test_procfs_fixture_tree(realdata_trees: dict[str, Path]) -> None:
    v = ok_values(probe_readings(realdata_trees["procfs__testdata__fixtures"]))
    assert v["cpu.freq.governor"] == "powersave"
    nic = "pcie.0000:a2:00.0"
    assert (v[f"{nic}.current_link_speed"], v[f"{nic}.current_link_width"]) == (16.0, 8)
    assert v[f"{nic}.current_link_gen"] == 4
    assert v[f"{nic}.numa_node"] == 1
    assert v["dmi.product_name"] == "PowerEdge R6515"


def test_power9_with_gpu_memory_as_numa_nodes(realdata_trees: dict[str, Path]) -> None:
    readings = probe_readings(realdata_trees["hwloc__nvidiagpunumanodes"])
    v = ok_values(readings)
    assert v["cpu.vendor"] == "IBM" and v["cpu.model"] == "POWER9, altivec supported"
    assert v["numa.nodes"] == [0, 8, 250, 251, 252, 253, 254, 255]
    assert (v["numa.0.cpus"], v["numa.8.cpus"]) == ("0-87", "88-175")
    # the six V100s' HBM appears as CPU-less memory nodes
    assert v["numa.memory_only_nodes"] == [250, 251, 252, 253, 254, 255]
    assert v["numa.250.mem_total"] == 15728640
    assert len(v["pcie.devices"]) == 6
    assert v["pcie.0004:05:00.0.kind"] == "display"
    assert v["pcie.0004:05:00.0.local_cpus"] == "0-15"
    assert v["pcie.0035:05:00.0.local_cpus"] == "88-103"
    assert readings["pcie.0004:05:00.0.vendor"].status is ReadingStatus.MISSING


def test_gb10_tree(realdata_trees: dict[str, Path]) -> None:
    v = ok_values(probe_readings(realdata_trees["hwloc__nvidia-dgx-gb10"]))
    assert v["cpu.freq.governor"] == "performance"
    assert v["cpu.freq.driver"] == "cppc_cpufreq"
    assert v["cpu.vendor"] == "ARM" and v["cpu.logical"] == 20
    assert v["numa.nodes"] == [0] and v["numa.0.cpus"] == "0-19"
    assert (v["dmi.sys_vendor"], v["dmi.product_name"]) == ("NVIDIA", "NVIDIA_DGX_Spark")
    # big.LITTLE: two maximum frequencies, each with its CPUs
    assert v["cpu.freq.max"] == ["2808.0: cpus 0-4,10-14", "3900.0: cpus 5-9,15-19"]


def test_four_socket_xeon_with_pcie_links(realdata_trees: dict[str, Path]) -> None:
    v = ok_values(probe_readings(realdata_trees["hwloc__40intel64-2g2n4c+pcilocality"]))
    assert v["cpu.sockets"] == 4 and v["cpu.logical"] == 40
    assert v["numa.nodes"] == [0, 1, 2, 3]
    assert v["numa.0.cpus"] == "0,4,8,12,16,20,24,28,32,36"
    assert v["numa.nodes_per_socket"] == 1.0
    assert v["dmi.product_name"] == "PowerEdge R910"
    hca = "pcie.0000:43:00.0"
    assert v[f"{hca}.kind"] == "infiniband"
    assert (v[f"{hca}.current_link_speed"], v[f"{hca}.current_link_width"]) == (8.0, 4)
    assert v[f"{hca}.numa_node"] == 2
    assert v[f"{hca}.bridges"] == ["0000:40:03.0"]
    nic = "pcie.0000:03:00.1"
    assert (v[f"{nic}.current_link_speed"], v[f"{nic}.current_link_width"]) == (2.5, 1)
