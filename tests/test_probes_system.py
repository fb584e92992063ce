"""The host probes: their parsers on their own, then discovery on our own HGX-like tree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpudiag.hostfs import HostFS
from gpudiag.model import Reading, ReadingStatus
from gpudiag.nvml import Nvml, ReplayBackend
from gpudiag.probe import ProbeContext
from gpudiag.probes import cpu, faults, kernel, memory, pcie, platform

from conftest import ok_values, probe_readings
from hosttree import GPU, HCA, SWITCH_PORT, acs_config_space, build_hgx_tree

FIXTURES = Path(__file__).parent / "fixtures"


def live_context(is_root_user: bool) -> ProbeContext:
    """This machine's files, with NVML from a replay."""
    nvml = Nvml(ReplayBackend.from_file(FIXTURES / "replay-no-driver.toml"))
    return ProbeContext(host=HostFS("/", is_root_user=is_root_user), nvml=nvml)


# ----------------------------------------------------------------------- parsers


def test_cpuinfo_identity_on_three_architectures() -> None:
    x86 = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 9654 96-Core\n"
    arm = "processor\t: 0\nCPU implementer\t: 0x41\nCPU part\t: 0xd4f\n"
    power = "processor\t: 0\ncpu\t\t: POWER9, altivec supported\n\ntimebase\t: 512000000\n"
    assert cpu.cpu_identity(cpu.parse_cpuinfo(x86)) == {
        "vendor": "AuthenticAMD",
        "model": "AMD EPYC 9654 96-Core",
    }
    assert cpu.cpu_identity(cpu.parse_cpuinfo(arm)) == {"vendor": "ARM", "model": "part 0xd4f"}
    assert cpu.cpu_identity(cpu.parse_cpuinfo(power))["vendor"] == "IBM"
    with pytest.raises(ValueError):
        cpu.cpu_identity([])


def test_notable_flags() -> None:
    blocks = cpu.parse_cpuinfo("processor : 0\nflags : fpu avx2 amx_tile sse\n")
    assert cpu.notable_flags(blocks) == ["avx2", "amx_tile"]
    assert cpu.notable_flags(cpu.parse_cpuinfo("processor : 0\ncpu : POWER9\n")) is None


DMIDECODE = """# dmidecode 3.5
Handle 0x0040, DMI type 17, 92 bytes
Memory Device
\tArray Handle: 0x003F
\tSize: 64 GB
\tLocator: DIMM_A1
\tSpeed: 4800 MT/s
\tConfigured Memory Speed: 4400 MT/s

Handle 0x0041, DMI type 17, 92 bytes
Memory Device
\tSize: No Module Installed
\tLocator: DIMM_A2
\tSpeed: Unknown

Handle 0x0042, DMI type 17, 92 bytes
Memory Device
\tSize: 65536 MB
\tLocator: DIMM_B1
\tSpeed: 4800 MT/s
\tConfigured Memory Speed: 4800 MT/s
"""


def test_dmidecode_memory_summary() -> None:
    devices = memory.parse_dmidecode_memory(DMIDECODE)
    assert [d["Locator"] for d in devices] == ["DIMM_A1", "DIMM_A2", "DIMM_B1"]
    assert memory.summarize_dimms(devices) == {
        "slots": 3,
        "populated": 2,
        "empty": 1,
        "total_gib": 128,
        "sizes_gib": [64],
        "speeds": [4800],
        "configured_speeds": [4400, 4800],
    }


def test_link_speed_and_generation() -> None:
    assert pcie.parse_link_speed("16.0 GT/s PCIe\n") == 16.0
    assert pcie.parse_link_speed("8 GT/s") == 8.0
    assert pcie.link_generation(32.0) == 5
    with pytest.raises(ValueError):
        pcie.parse_link_speed("Unknown")
    with pytest.raises(ValueError):
        pcie.link_generation(3.0)


@pytest.mark.parametrize(
    ("vendor", "class_code", "kind"),
    [
        (0x10DE, 0x030200, "gpu"),
        (0x10DE, 0x068000, "nvswitch"),
        (0x10DE, 0x040300, "nvidia-other"),
        (0x15B3, 0x020700, "infiniband"),
        (0x1077, 0x0C0600, "infiniband"),
        (0x8086, 0x020000, "nic"),
        (None, 0x030000, "display"),
        (0x1022, 0x060400, None),
        (0x1A03, 0x030000, None),
    ],
)
def test_device_kind(vendor: int | None, class_code: int, kind: str | None) -> None:
    assert pcie.device_kind(vendor, class_code) == kind


def test_acs_control_from_config_space() -> None:
    assert pcie.parse_acs_control(acs_config_space(0b1101)) == [
        "SourceValidation",
        "P2PRequestRedirect",
        "P2PCompletionRedirect",
    ]
    assert pcie.parse_acs_control(bytes(4096)) is None
    with pytest.raises(ValueError):
        pcie.parse_acs_control(bytes(64))


def test_upstream_bridges_and_cmdline_options() -> None:
    path = "/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:18:00.0"
    assert pcie.upstream_bridges(path) == ["0000:15:01.0", "0000:16:00.0"]
    cmdline = "ro quiet iommu=pt intel_iommu=on iommu.strict=0 amd_iommu_dump"
    assert pcie.parse_cmdline_options(cmdline, pcie.IOMMU_OPTIONS) == [
        "iommu=pt",
        "intel_iommu=on",
        "iommu.strict=0",
    ]


def test_xid_events_from_kmsg_dmesg_and_journal_lines() -> None:
    text = (
        "4,200,2000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=0, GPU has fallen off the bus.\n"
        "[ 12.500000] NVRM: Xid (PCI:0000:86:00): 48, pid=1, DBE\n"
        "[   13.000001] node kernel: NVRM: Xid (0000:86:00): 63, pid=1, row remap\n"
        "6,201,2100000,-;nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028\n"
    )
    events = faults.parse_xid_events(text)
    assert [(e.code, e.pci, e.seconds) for e in events] == [
        (79, "0000:3b:00.0", 2.0),
        (48, "0000:86:00.0", 12.5),
        (63, "0000:86:00.0", 13.000001),
    ]


def test_mce_count_and_taint() -> None:
    interrupts = "  CPU0 CPU1\nMCE:  1  2  Machine check exceptions\n"
    assert faults.parse_mce_count(interrupts) == 3
    assert kernel.decode_taint(4097) == ["P: proprietary module", "O: out-of-tree module"]
    assert kernel.decode_taint(0) == []


def test_memlock_and_modules() -> None:
    limits = "Max locked memory         65536                65536                bytes\n"
    assert kernel.parse_memlock(limits) == "64 KiB"
    assert kernel.parse_memlock("Max locked memory  unlimited  unlimited  bytes") == "unlimited"
    assert kernel.parse_loaded_modules("nvidia 1 0 - Live 0x0\nmlx5_core 2 0 - Live 0x0\n") == [
        "nvidia",
        "mlx5_core",
    ]


def test_cgroup_parsers() -> None:
    assert platform.parse_cgroups("0::/slurm/job42\n") == {"": "/slurm/job42"}
    v1 = "12:memory:/job\n11:cpu,cpuacct:/job\n1:name=systemd:/job\n"
    assert platform.parse_cgroups(v1)["cpuacct"] == "/job"
    assert platform.parse_cpu_max("max 100000\n") == "unlimited"
    assert platform.parse_cpu_max("400000 100000\n") == "4 CPUs"
    assert platform.parse_memory_max("max\n") == "unlimited"
    assert platform.parse_v1_quota("-1", "100000") == "unlimited"
    assert platform.parse_v1_memory_limit("9223372036854771712") == "unlimited"
    assert platform.parse_efi_bool(b"\x06\x00\x00\x00\x01") is True
    with pytest.raises(ValueError):
        platform.parse_efi_bool(b"\x06")


# ----------------------------------------------------------------------- discovery


@pytest.fixture(scope="module")
def hgx(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Reading]:
    return probe_readings(build_hgx_tree(tmp_path_factory.mktemp("hgx")))


def test_cpu_discovery(hgx: dict[str, Reading]) -> None:
    v = ok_values(hgx)
    assert (v["cpu.vendor"], v["cpu.model"]) == ("GenuineIntel", "Intel(R) Xeon(R) Platinum 8480+")
    assert (v["cpu.sockets"], v["cpu.cores"], v["cpu.logical"]) == (2, 4, 8)
    assert v["cpu.threads_per_core"] == 2.0 and v["cpu.smt.active"] is True
    assert v["cpu.isolated"] == "6-7"
    assert v["cpu.freq.governor"] == ["performance: cpus 0-5", "powersave: cpus 6-7"]
    assert v["cpu.freq.epp"] == "performance"
    assert (v["cpu.freq.max"], hgx["cpu.freq.max"].unit) == (3800.0, "MHz")
    assert (v["cpu.freq.cur_min"], v["cpu.freq.cur_max"]) == (2000.0, 2700.0)
    assert v["cpu.freq.boost"] is True
    assert v["cpu.idle.states"] == ["POLL", "C1", "C1E", "C6"]
    assert v["cpu.idle.C6.disabled"] is True and v["cpu.idle.C1E.disabled"] is False
    assert hgx["cpu.freq.governor"].source == (
        "sysfs:devices/system/cpu/cpu*/cpufreq/scaling_governor"
    )


def test_numa_and_memory_discovery(hgx: dict[str, Reading]) -> None:
    v = ok_values(hgx)
    assert v["numa.nodes"] == [0, 1, 2]
    assert (v["numa.0.cpus"], v["numa.1.cpus"], v["numa.2.cpus"]) == ("0-3", "4-7", "")
    assert v["numa.memory_only_nodes"] == [2]
    assert v["numa.nodes_per_socket"] == 1.0
    assert v["numa.memory_imbalance"] == 0.0  # nodes 0 and 1 hold the same
    assert v["numa.0.distance"] == [10, 21, 40]
    assert v["numa.balancing"] == 1
    assert v["numa.1.hugepages_1G"] == 8
    assert (v["mem.thp.enabled"], v["mem.thp.defrag"]) == ("always", "madvise")
    assert v["mem.hugepages_1G"] == 16 and v["mem.swappiness"] == 10
    assert v["mem.total"] == 2113929216 and hgx["mem.total"].unit == "KiB"
    assert hgx["mem.dimm.slots"].status is ReadingStatus.UNSUPPORTED  # a tree has no dmidecode


def test_pcie_discovery(hgx: dict[str, Reading]) -> None:
    v = ok_values(hgx)
    assert v["pcie.devices"] == [GPU, HCA]
    assert v[f"pcie.{GPU}.kind"] == "gpu" and v[f"pcie.{HCA}.kind"] == "infiniband"
    assert v[f"pcie.{GPU}.current_link_width"] == 8 and v[f"pcie.{GPU}.max_link_width"] == 16
    assert v[f"pcie.{GPU}.current_link_gen"] == 5
    assert v[f"pcie.{GPU}.driver"] == "nvidia" and v[f"pcie.{HCA}.driver"] == "mlx5_core"
    assert v[f"pcie.{GPU}.numa_node"] == 0 and v[f"pcie.{GPU}.local_cpus"] == "0-3"
    assert v[f"pcie.{GPU}.aer.correctable"] == 12
    assert v[f"pcie.{GPU}.iommu_group"] == 42
    assert v[f"pcie.{GPU}.bridges"] == ["0000:15:01.0", SWITCH_PORT]
    assert v[f"pcie.{SWITCH_PORT}.acs"] == [
        "SourceValidation",
        "P2PRequestRedirect",
        "P2PCompletionRedirect",
    ]
    assert v["iommu.cmdline"] == ["iommu=pt", "intel_iommu=on"]
    assert v["iommu.units"] == ["dmar0"] and v["iommu.groups"] == 2


def test_acs_needs_root_for_users(tmp_path: Path) -> None:
    tree = build_hgx_tree(tmp_path)
    short = tree / "sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/config"
    short.write_bytes(bytes(64))  # what a non-root reader gets from sysfs
    readings = probe_readings(tree, is_root_user=False)
    assert readings[f"pcie.{SWITCH_PORT}.acs"].status is ReadingStatus.NEEDS_ROOT


def test_platform_power_kernel_faults_discovery(hgx: dict[str, Reading]) -> None:
    v = ok_values(hgx)
    assert (v["dmi.sys_vendor"], v["dmi.bios_version"]) == ("Supermicro", "2.1")
    assert v["platform.firmware"] == "uefi" and v["platform.secure_boot"] is False
    assert (v["platform.cgroup.cpu_max"], v["platform.cgroup.memory_max"]) == ("8 CPUs", "512 GiB")
    assert v["power.rapl.intel-rapl:0.long_term_limit"] == 350.0
    assert v["power.platform_profile"] == "performance"
    assert v["power.tuned_profile"] == "throughput-performance"
    assert v["power.thermal.thermal_zone0.temp"] == 45.0
    assert v["kernel.clocksource"] == "tsc"
    assert v["kernel.taint_flags"] == ["P: proprietary module", "O: out-of-tree module"]
    assert v["kernel.modules"] == ["nvidia", "nvidia_uvm", "nvidia_drm", "mlx5_core"]
    assert v["kernel.nvidia_module_version"] == "550.90.07"
    assert v["kernel.memlock_limit"] == "8192 KiB"
    assert v["faults.xid.total"] == 3 and v["faults.xid.codes"] == [48, 79]
    assert v["faults.xid.79.count"] == 2 and v["faults.xid.79.gpus"] == [GPU]
    assert v["faults.xid.79.last_seen"] == 3.5
    assert v["faults.mce.count"] == 3
    assert (v["faults.edac.correctable"], v["faults.edac.uncorrectable"]) == (7, 1)


def test_every_reading_names_its_source_and_failures_say_why(hgx: dict[str, Reading]) -> None:
    for reading in hgx.values():
        assert reading.source, reading.key
        assert reading.ok or reading.reason, reading.key


def test_live_machine_every_host_probe_runs_without_errors() -> None:
    """On this machine, for real: no probe fails and no reading is an error (a VM without
    cpufreq or DMI gives statuses, not errors)."""
    if not Path("/proc/self").exists():
        pytest.skip("needs a Linux /proc")
    readings = probe_readings(Path("/"), is_root_user=None)
    errors = {k: r.reason for k, r in readings.items() if r.status is ReadingStatus.ERROR}
    # NVML comes from the replay here; everything else is this machine's own files
    assert errors == {}
    assert readings["cpu.logical"].ok and readings["mem.total"].ok


STANDINS = Path(__file__).parent / "standins"


def _stand_in(directory: Path, name: str, output: str, monkeypatch) -> None:
    """tests/standins/NAME on PATH: it parses its options as the real tool does, refuses
    what the real one refuses, and prints `output` in the form the options ask for."""
    script = directory / name
    text = (STANDINS / name).read_text().split("\n", 1)[1]
    script.write_text(f"#!{sys.executable}\n{text}")
    script.chmod(0o755)
    (directory / f"{name}.out").write_text(output)
    monkeypatch.setenv("STANDIN_OUTPUT", str(directory / f"{name}.out"))
    monkeypatch.setenv("PATH", f"{directory}:/usr/bin:/bin")


@pytest.mark.parametrize(
    ("arguments", "refusal"),
    [
        (["-t", "dimms"], "Invalid type keyword: dimms"),
        (["--types", "17"], "option --types not recognized"),
        (["-x"], "option -x not recognized"),
    ],
)
def test_the_dmidecode_stand_in_refuses_what_dmidecode_refuses(
    tmp_path: Path, monkeypatch, arguments: list[str], refusal: str
) -> None:
    _stand_in(tmp_path, "dmidecode", DMIDECODE, monkeypatch)
    run = subprocess.run(
        [str(tmp_path / "dmidecode"), *arguments], capture_output=True, text=True, check=False
    )
    assert run.returncode == 2 and refusal in run.stderr and run.stdout == ""


def test_dimms_from_dmidecode_on_the_live_node(tmp_path: Path, monkeypatch) -> None:
    """The dmidecode path for real, with a stand-in dmidecode on PATH printing known text."""
    _stand_in(tmp_path, "dmidecode", DMIDECODE, monkeypatch)
    readings = {r.key: r for r in memory.collect(live_context(is_root_user=True))}
    v = ok_values(readings)
    assert (v["mem.dimm.slots"], v["mem.dimm.populated"], v["mem.dimm.empty"]) == (3, 2, 1)
    assert v["mem.dimm.configured_speed"] == [4400, 4800]
    assert readings["mem.dimm.total"].source == "command:dmidecode -t 17"
    users = {r.key: r for r in memory.collect(live_context(is_root_user=False))}
    assert users["mem.dimm.slots"].status is ReadingStatus.NEEDS_ROOT


def test_kernel_log_falls_back_to_the_journal(tmp_path: Path, monkeypatch) -> None:
    """Where /dev/kmsg refuses, `journalctl -k` (a stand-in here) is read instead."""
    journal = "42.25 NVRM: Xid (PCI:0000:3b:00): 79, pid=0, off the bus\n"
    _stand_in(tmp_path, "journalctl", journal, monkeypatch)

    def refuse(path: str) -> str:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(faults, "_read_kmsg_device", refuse)
    if not Path("/dev/kmsg").exists():
        pytest.skip("this machine has no /dev/kmsg")
    text, source, _status, _ = faults.kernel_log(HostFS("/"))
    assert source == "command:journalctl -k -b"
    # the time since boot comes only from the short-monotonic form the probe asks for
    assert faults.parse_xid_events(text or "") == [faults.XidEvent(79, "0000:3b:00.0", 42.25)]


def test_a_failing_dmidecode_gives_no_dimm_count_not_zero(tmp_path: Path, monkeypatch) -> None:
    _stand_in(tmp_path, "dmidecode", DMIDECODE, monkeypatch)
    (tmp_path / "dmidecode").write_text(
        f"#!{sys.executable}\nimport sys\nsys.stderr.write('No SMBIOS nor DMI entry point found')\n"
        "sys.exit(1)\n"
    )
    readings = {r.key: r for r in memory.collect(live_context(is_root_user=True))}
    # a machine without SMBIOS tables (a VM): no DIMM count at all, and why
    assert readings["mem.dimm.slots"].status is ReadingStatus.UNSUPPORTED
    assert "No SMBIOS nor DMI entry point found" in readings["mem.dimm.slots"].reason
