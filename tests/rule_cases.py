"""For every shipped rule: readings that make it fire, and readings that keep it quiet.
Profile rules are judged against the H100 SXM5 profile (see PROFILE in test_rules)."""

from __future__ import annotations

from gpudiag.model import Reading, ReadingStatus

from rule_cases_fabric import FABRIC_CASES

R = Reading


def gpu(suffix: str, value: object, unit: str = "") -> Reading:
    """A reading of GPU 0."""
    return Reading(f"gpu.0.{suffix}", value, unit)


def pair(suffix: str, fire: object, quiet: object, other: str, other_value: object):
    """Cases for a GPU reading compared with another reading of the same GPU."""
    return (
        [gpu(suffix, fire), gpu(other, other_value)],
        [gpu(suffix, quiet), gpu(other, other_value)],
    )


def node(key: str, fire: object, quiet: object):
    return ([R(key, fire)], [R(key, quiet)])


def one(suffix: str, fire: object, quiet: object):
    return ([gpu(suffix, fire)], [gpu(suffix, quiet)])


def link(suffix: str, fire: object, quiet: object):
    return ([R(f"gpu.0.nvlink.3.{suffix}", fire)], [R(f"gpu.0.nvlink.3.{suffix}", quiet)])


def ib_port(suffix: str, fire: object, quiet: object, *others: Reading):
    """Cases for a reading of InfiniBand port mlx5_0 1, with other readings alike in both."""
    key = f"ib.mlx5_0.1.{suffix}"
    return ([R(key, fire), *others], [R(key, quiet), *others])


def device(suffix: str, fire: object, quiet: object, address: str = "0000:18:00.0"):
    return ([R(f"pcie.{address}.{suffix}", fire)], [R(f"pcie.{address}.{suffix}", quiet)])


CASES: dict[str, tuple[list[Reading], list[Reading]]] = {
    "NVML001": (
        [Reading.failed("nvml.init", ReadingStatus.MISSING, "nvmlInit: LibraryNotFound")],
        [R("nvml.init", "ok")],
    ),
    "NVML002": node("nvml.gpu_count", 0, 8),
    # the GPUs Slurm configures (or any source of node.expected_gpus) against the bus
    "NODE001": (
        [R("node.expected_gpus", 8), R("pcie.gpu_count", 0), R("node.nvidia_gpus", False)],
        [R("node.expected_gpus", 8), R("pcie.gpu_count", 8), R("node.nvidia_gpus", True)],
    ),
    "NODE002": (
        [R("node.expected_gpus", 8), R("nvml.gpu_count", 7), R("node.nvidia_gpus", True)],
        [R("node.expected_gpus", 8), R("nvml.gpu_count", 8), R("node.nvidia_gpus", True)],
    ),
    "HOST001": node("host.virt.vm", "kvm", "none"),
    "HOST002": node("host.virt.container", "docker", "none"),
    "GPU001": (
        [Reading.failed("gpu.0.health", ReadingStatus.ERROR, "nvmlDeviceGetName: GpuIsLost")],
        [gpu("health", "ok")],
    ),
    "GPU002": (
        [R("nvml.gpu_count", 7), R("pcie.gpu_count", 8)],
        [R("nvml.gpu_count", 8), R("pcie.gpu_count", 8)],
    ),
    "GPU031": (
        [R("nvml.gpu_count", 8), R("pcie.gpu_count", 0)],
        [R("nvml.gpu_count", 8), R("pcie.gpu_count", 8)],
    ),
    "GPU003": (
        [R("kernel.dev_nvidia_count", 7), R("nvml.gpu_count", 8)],
        [R("kernel.dev_nvidia_count", 8), R("nvml.gpu_count", 8)],
    ),
    "GPU004": one("persistence_mode", False, True),
    "GPU005": one("ecc.current", False, True),
    "GPU006": pair("ecc.pending", False, True, "ecc.current", True),
    "GPU007": one("ecc.volatile.uncorrected", 3, 0),
    "GPU008": one("ecc.aggregate.uncorrected", 1, 0),
    "GPU009": one("retired_pages.pending", True, False),
    "GPU010": one("retired_pages.double_bit", 5, 0),
    "GPU011": one("remapped_rows.pending", True, False),
    "GPU012": one("remapped_rows.failure", True, False),
    "GPU013": one("remapped_rows.uncorrectable", 1, 0),
    "GPU014": one("throttle_reasons", ["HwSlowdown"], ["GpuIdle", "SwPowerCap"]),
    "GPU015": (  # a stock H100 before R570: application clock 1755 = default, max 1980
        [gpu("clocks.app_sm", 1410), gpu("clocks.default_app_sm", 1755)],
        [
            gpu("clocks.app_sm", 1755),
            gpu("clocks.default_app_sm", 1755),
            gpu("clocks.max_sm", 1980),
        ],
    ),
    "GPU016": pair("power.limit", 500.0, 700.0, "power.default_limit", 700.0),
    "GPU017": one("power.limit", 500.0, 700.0),
    "GPU018": pair("temperature.gpu", 85, 60, "temperature.slowdown", 87),
    # 4 C below slowdown fires (under 4.45 C), 5 C does not
    "GPU032": one("temperature.slowdown_margin", 4, 5),
    "GPU019": (
        [R("gpu.0.vbios", "96.00.A5.00.01"), R("gpu.1.vbios", "96.00.99.00.01")],
        [R("gpu.0.vbios", "96.00.A5.00.01"), R("gpu.1.vbios", "96.00.A5.00.01")],
    ),
    "GPU020": (
        [R("gpu.0.inforom.image", "G520.0200.00.05"), R("gpu.1.inforom.image", "G520.0200.00.04")],
        [R("gpu.0.inforom.image", "G520.0200.00.05"), R("gpu.1.inforom.image", "G520.0200.00.05")],
    ),
    "GPU021": one("mig.current", True, False),
    "GPU022": one("processes.compute", [4711], []),
    "GPU023": one("clocks.max_sm", 1755, 1980),
    "GPU024": one("clocks.max_mem", 1593, 2619),
    "GPU025": one("memory.total", 40960, 81559),
    "GPU026": node("faults.xid.total", 3, 0),
    "GPU027": node("faults.xid.codes", [13, 79], [13, 31]),
    "GPU028": one("compute_mode", "exclusive-process", "default"),
    "GPU029": pair("mig.pending", True, False, "mig.current", False),
    "GPU030": one("pcie.max_link_gen", 4, 5),
    "NVL001": link("state", "inactive", "active"),
    "NVL002": link("errors.crc_flit", 12, 0),
    "NVL003": link("errors.crc_data", 1, 0),
    "NVL004": link("errors.replay", 4, 0),
    "NVL005": link("errors.recovery", 2, 0),
    "NVL006": one("nvlink.active", 17, 18),
    "NVL011": one("nvlink.active", 0, 1),
    "DCGM001": node("dcgm.diag.failed", ["GPU Memory"], []),
    "NVL007": link("speed", 13.281, 26.562),
    "NVL008": one("fabric.state", "not-started", "completed"),
    "NVL009": one("fabric.status", "Unknown", "ok"),
    "NVL010": one("fabric.health_flags", ["degraded-bandwidth"], ["route-recovery"]),
    "PCIE001": pair("pcie.link_width", 8, 16, "pcie.max_link_width", 16),
    "PCIE002": one("pcie.max_link_width", 8, 16),
    "PCIE003": one("pcie.replay_counter", 14, 0),
    "PCIE004": (
        [R("pcie.0000:19:00.0.current_link_width", 8), R("pcie.0000:19:00.0.max_link_width", 16)],
        [R("pcie.0000:19:00.0.current_link_width", 16), R("pcie.0000:19:00.0.max_link_width", 16)],
    ),
    "PCIE005": device("aer.fatal", 1, 0),
    "PCIE006": device("aer.nonfatal", 2, 0),
    "PCIE007": device("aer.correctable", 12, 0),
    "PCIE008": device(
        "acs", ["SourceValidation", "P2PRequestRedirect"], ["SourceValidation"], "0000:16:00.0"
    ),
    "PCIE009": device("driver", "nouveau", "nvidia"),
    "PCIE013": pair("pcie.link_gen_loaded", 4, 5, "pcie.max_link_gen", 5),
    "PCIE010": (
        [
            Reading.failed(
                "pcie.0000:18:00.0.numa_node",
                ReadingStatus.UNSUPPORTED,
                "the platform reports no NUMA affinity (-1)",
            )
        ],
        [R("pcie.0000:18:00.0.numa_node", 0)],
    ),
    "PCIE011": node("iommu.cmdline", ["intel_iommu=on"], ["intel_iommu=on", "iommu=pt"]),
    "PCIE012": (
        [R("topo.gpu.0.nearest_nic", "SYS"), R("gpu.0.name", "H100")],
        [R("topo.gpu.0.nearest_nic", "PIX"), R("gpu.1.name", "H100")],  # GPU 1: no NIC reading
    ),
    "NVME001": (
        [R("nvme.3.state", "dead")],  # as nvme3 in node_exporter's fixture
        [R("nvme.3.state", "live")],
    ),
    "NVME002": (
        [R("nvme.0.current_link_width", 2), R("nvme.0.attainable_link_width", 4)],
        [R("nvme.0.current_link_width", 4), R("nvme.0.attainable_link_width", 4)],
    ),
    "NVME003": (
        [R("nvme.0.current_link_speed", 8.0), R("nvme.0.attainable_link_speed", 16.0)],
        [R("nvme.0.current_link_speed", 8.0), R("nvme.0.attainable_link_speed", 8.0)],
    ),
    "NVME004": (
        [R("nvme.0.max_link_width", 4), R("nvme.0.port_max_link_width", 2)],
        [R("nvme.0.max_link_width", 4), R("nvme.0.port_max_link_width", 8)],
    ),
    "NVME005": (
        [R("nvme.0.max_link_speed", 16.0), R("nvme.0.port_max_link_speed", 8.0)],
        [R("nvme.0.max_link_speed", 16.0), R("nvme.0.port_max_link_speed", 16.0)],
    ),
    "NVME006": node("nvme.unbound_functions", ["0000:c1:00.0"], []),
    "CPU001": node("cpu.freq.governor", "powersave", "performance"),
    "CPU002": node("cpu.freq.boost", False, True),
    "CPU003": node("cpu.idle.C6.disabled", False, True),
    "CPU004": node("cpu.freq.epp", "balance_power", "performance"),
    "CPU005": node("numa.balancing", 1, 0),
    "CPU006": node("numa.nodes_per_socket", 4.0, 1.0),
    "CPU007": node("cpu.offline", "40-79", ""),
    "CPU008": node("numa.memory_imbalance", 50.0, 0.4),
    "CPU009": node("cpu.threads_per_core", 1.5, 2.0),
    "CPU010": node("numa.nodes_per_socket", 1.5, 4.0),
    "MEM001": node("mem.swap_total", 8388604, 0),
    "MEM002": node("mem.thp.enabled", "never", "madvise"),
    "MEM003": node("mem.dimm.empty", 4, 0),
    "MEM004": node("mem.zone_reclaim_mode", 1, 0),
    "MEM005": node("faults.edac.uncorrectable", 1, 0),
    "MEM006": node("faults.edac.correctable", 7, 0),
    "MEM007": node("faults.mce.count", 3, 0),
    "OS001": node("kernel.memlock_limit", "8192 KiB", "unlimited"),
    "OS002": node("kernel.gpudirect_rdma", "missing", "not needed"),
    "OS003": node(
        "kernel.taint_flags",
        ["P: proprietary module", "D: kernel died (oops)"],
        ["P: proprietary module", "O: out-of-tree module"],
    ),
    "OS004": node("kernel.modules", ["nouveau"], ["nvidia"]),
    "OS005": node("kernel.clocksource", "hpet", "tsc"),
    "OS006": node("power.tuned_profile", "balanced", "throughput-performance"),
    "OS007": node("power.platform_profile", "balanced", "performance"),
    "OS008": (
        [R("nvml.binding_branch", 535), R("nvml.driver_branch", 590)],
        [R("nvml.binding_branch", 615), R("nvml.driver_branch", 590)],
    ),
    "KRN001": one("kernel.verified", False, True),
    "KRN002": node("numa.0.kernel.verified", False, True),
    "KRN003": one("kernel.burn.mismatches", 3, 0),
    "KRN004": one("kernel.burn.nans", 16, 0),
    "KRN005": one("kernel.stream.triad.fp64.ci_high", 2300.0, 3000.0),
    "KRN006": one("kernel.stream.triad.fp32.ci_high", 2300.0, 3000.0),
    # 25 fires: under half the H100 tensor cores' 67, though over half its vector 34
    "KRN007": one("kernel.gemm.fp64.ci_high", 25.0, 50.0),
    "KRN008": one("kernel.gemm.fp16.ci_high", 300.0, 700.0),
    "KRN018": one("kernel.stream.triad.fp64.verdict", "inconclusive", "below"),
    "KRN019": one("kernel.stream.triad.fp32.verdict", "inconclusive", "above"),
    "KRN020": one("kernel.gemm.fp64.verdict", "inconclusive", "below"),
    "KRN021": one("kernel.gemm.fp16.verdict", "inconclusive", "above"),
    "KRN009": one("kernel.stream.triad.fp64.share_of_median", 0.7, 0.98),
    "KRN010": one("kernel.gemm.fp16.share_of_median", 0.8, 1.02),
    "KRN011": one("kernel.copy.h2d.local.share_of_median", 0.5, 0.97),
    "KRN012": pair("kernel.copy.h2d.local", 30.0, 45.0, "kernel.copy.h2d.remote", 44.0),
    "KRN013": node("topo.gpu.2.5.copy_share_of_median", 0.55, 0.97),
    "KRN014": node("topo.gpu.0.1.peer_access", "unsupported", "enabled"),
    "KRN015": node("numa.1.kernel.stream.triad.fp64.share_of_median", 0.6, 1.0),
    "KRN016": one("kernel.gemm.bf16", 300.0, 700.0),
    "KRN017": node("node.kernel.allreduce.busbw.share_of_nvlink", 0.3, 0.85),
    "KRN022": one("kernel.timing_consistent", False, True),
    "KRN023": one("kernel.burn.unreproduced", 279, 0),
    "KRN024": one("kernel.held_back", 1, 0),
    "KRN025": (
        [Reading.failed("gpu.0.kernel.burn.gpu_error", ReadingStatus.ERROR, "cudaErrorUnknown")],
        [gpu("kernel.burn.mismatches", 0)],
    ),
    "KRN026": node("numa.0.kernel.stream.triad.fp64.verdict", "below", "above"),
    "KRN027": one("kernel.copy.c2c.share_of_median", 0.6, 0.98),
    "IB001": ib_port("phys_state", "Polling", "LinkUp"),
    "IB002": ib_port("state", "INIT", "ACTIVE", R("ib.mlx5_0.1.phys_state", "LinkUp")),
    "IB003": ib_port(
        "rate",
        200.0,
        400.0,
        R("ib.mlx5_0.1.fastest_rate_on_node", 400.0, "Gb/s"),
        R("ib.mlx5_0.1.state", "ACTIVE"),
    ),
    "IB004": ib_port("link_downed", 3, 0),
    "IB005": ib_port("symbol_error", 12, 0),
}
CASES.update(FABRIC_CASES)  # rules/fabric.toml's (tests/rule_cases_fabric.py)
