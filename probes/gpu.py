"""GPUs over NVML: identity, memory, modes, ECC and memory health, clocks and throttle
reasons, power, temperatures, PCIe, utilisation, processes, every NVLink, fabric state,
CPU and NUMA affinity; then the topology between every pair of GPUs.

Each NVML call is made once per GPU and its failure becomes the status of the readings
that depend on it (NotSupported -> unsupported, NoPermission -> needs-root, GpuIsLost ->
error). The same code runs on the real NVML and on a replay file. The real path has
never run on a GPU: it is tested against recorded replays, and through the real pynvml
against a C stand-in libnvidia-ml (tests/nvml_standin/), which is not a GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gpudiag import catalog
from gpudiag.catalog import normalize_bus_id
from gpudiag.model import Reading, ReadingStatus, Value
from gpudiag.nvml import MIG_DEVICES, Nvml, NvmlError
from gpudiag.probe import Cost, Need, Probe, ProbeContext
from gpudiag.probes.fabric import FABRIC_READINGS, gpu_fabric
from gpudiag.textparse import format_cpulist

NVLINK_MAX_LINKS = 18
MAX_GPUS = 1024  # a larger device count from NVML (or a replay) is corrupt
# nvml.h enums
CLOCK_SM, CLOCK_MEM = 1, 2
TEMPERATURE_GPU = 0
THRESHOLD_SHUTDOWN, THRESHOLD_SLOWDOWN, THRESHOLD_GPU_MAX = 0, 1, 3
ECC_CORRECTED, ECC_UNCORRECTED = 0, 1
COUNTER_VOLATILE, COUNTER_AGGREGATE = 0, 1
LOCATION_DRAM, LOCATION_SRAM = 2, 7
RETIRED_SINGLE_BIT, RETIRED_DOUBLE_BIT = 0, 1
NVLINK_ERRORS = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3}
P2P_CAPABILITIES = {"read": 0, "write": 1, "nvlink": 2, "atomics": 3}
P2P_STATUS = {
    0: "ok",
    1: "chipset not supported",
    2: "GPU not supported",
    3: "IOH topology not supported",
    4: "disabled by registry key",
    5: "not supported",
    6: "unknown",
}
COMPUTE_MODES = {0: "default", 1: "exclusive-thread", 2: "prohibited", 3: "exclusive-process"}
REMOTE_TYPES = {0: "gpu", 1: "ibmnpu", 2: "nvswitch"}
# nvmlDeviceGetFieldValues: NVML_FI_DEV_NVLINK_GET_SPEED (MBps), scoped by link
FIELD_NVLINK_SPEED = 164
# nvml.h: "GPU T.Limit temperature thresholds in degree Celsius", Ada and later, superseding
# nvmlDeviceGetTemperatureThreshold: signed, relative to T.Limit (-2: 2 C past it)
FIELD_TLIMIT = {"shutdown": 193, "slowdown": 194, "gpu_max": 196}
THROTTLE_REASONS = (
    (0x1, "GpuIdle"),
    (0x2, "ApplicationsClocksSetting"),
    (0x4, "SwPowerCap"),
    (0x8, "HwSlowdown"),
    (0x10, "SyncBoost"),
    (0x20, "SwThermalSlowdown"),
    (0x40, "HwThermalSlowdown"),
    (0x80, "HwPowerBrakeSlowdown"),
    (0x100, "DisplayClockSetting"),
)
# nvmlGpuTopologyLevel_t -> the labels of `nvidia-smi topo -m`
TOPOLOGY_LEVELS = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def decode_throttle_reasons(mask: int) -> list[str]:
    """NVML's clock event (throttle) reason bitmask -> names."""
    names = [name for bit, name in THROTTLE_REASONS if mask & bit]
    unknown = mask & ~sum(bit for bit, _ in THROTTLE_REASONS)
    if unknown:
        names.append(f"0x{unknown:x}")
    return names


def affinity_cpus(masks: list[int], bits_per_word: int = 64) -> list[int]:
    """NVML's CPU affinity words (least significant word first) -> CPU numbers."""
    return [
        word * bits_per_word + bit
        for word, mask in enumerate(masks)
        for bit in range(bits_per_word)
        if mask >> bit & 1
    ]


def mig_instances(devices: list[dict[str, Any]]) -> list[str]:
    """MIG devices -> 'GI 1 / CI 0: 9856 MiB' each, in index order."""
    return [
        f"GI {d['gpu_instance']} / CI {d['compute_instance']}: {mib(d['memory_total'])} MiB"
        for d in sorted(devices, key=lambda d: d["index"])
    ]


def mib(value: int) -> int:
    """Bytes -> MiB."""
    return int(value) // 2**20


def watts(milliwatts: int) -> float:
    """NVML reports power in milliwatts."""
    return int(milliwatts) / 1000.0


@dataclass
class GpuCalls:
    """NVML calls for one GPU, each made once and remembered (value or error)."""

    nvml: Nvml
    index: int
    memo: dict[tuple[Any, ...], Any] = field(default_factory=dict)
    lost: NvmlError | None = None  # the first failure that says the GPU is lost
    # active NVLinks whose remote device type could not be read: (remote bus id, why)
    untyped_links: list[tuple[str, str]] = field(default_factory=list)

    def call(self, function: str, *args: int) -> Any:
        key = (function, *args)
        if key not in self.memo:
            try:
                self.memo[key] = self.nvml.call(function, self.index, *args)
            except NvmlError as exc:
                self.memo[key] = exc
                if self.lost is None and self.nvml.confirms_lost(self.index, exc):
                    self.lost = exc
        result = self.memo[key]
        if isinstance(result, NvmlError):
            raise result
        return result

    def call_or_none(self, function: str, *args: int) -> Any:
        """The call's value, or None where it failed (the failure is remembered)."""
        try:
            return self.call(function, *args)
        except NvmlError:
            return None

    def reading(
        self,
        suffix: str,
        function: str,
        *args: int,
        convert: Callable[[Any], Value] | None = None,
        **fields: int,
    ) -> Reading:
        """The reading of one (remembered) NVML call, through this probe's declaration of
        `gpu.{gpu}.<suffix>` (its other placeholders filled by `fields`), in its unit."""
        declared = declared_as(f"gpu.{{gpu}}.{suffix}")
        return self.nvml.reading_of(
            declared.key(gpu=self.index, **fields),
            function,
            lambda: self.call(function, *args),
            declared.unit,
            convert,
        )


def _identity(gpu: GpuCalls) -> Iterator[Reading]:
    yield gpu.reading("name", "nvmlDeviceGetName")
    yield gpu.reading(
        "pci.bus_id", "nvmlDeviceGetPciInfo", convert=lambda p: normalize_bus_id(p["busId"])
    )
    yield gpu.reading(
        "pci.device_id",
        "nvmlDeviceGetPciInfo",
        convert=lambda p: f"0x{int(p['pciDeviceId']) >> 16:04x}",
    )
    yield gpu.reading("uuid", "nvmlDeviceGetUUID")
    yield gpu.reading("serial", "nvmlDeviceGetSerial")
    yield gpu.reading("vbios", "nvmlDeviceGetVbiosVersion")
    yield gpu.reading("inforom.image", "nvmlDeviceGetInforomImageVersion")
    yield gpu.reading("board_part_number", "nvmlDeviceGetBoardPartNumber")


def _memory_and_modes(gpu: GpuCalls) -> Iterator[Reading]:
    yield gpu.reading("memory.total", "nvmlDeviceGetMemoryInfo", convert=lambda m: mib(m["total"]))
    # the v2 structure counts the driver's reserved memory apart, as nvidia-smi does; the
    # first one's used includes it (480 MiB on an idle H100)
    reserved = gpu.reading(
        "memory.reserved",
        "nvmlDeviceGetMemoryInfo_v2",
        convert=lambda m: mib(m["reserved"]),
    )
    yield reserved
    if reserved.ok:
        yield gpu.reading(
            "memory.used",
            "nvmlDeviceGetMemoryInfo_v2",
            convert=lambda m: mib(m["used"]),
        )
    else:  # a driver before R510, or a recording without the v2 call
        yield gpu.reading(
            "memory.used", "nvmlDeviceGetMemoryInfo", convert=lambda m: mib(m["used"])
        )
    yield gpu.reading(
        "bar1.total",
        "nvmlDeviceGetBAR1MemoryInfo",
        convert=lambda m: mib(m["bar1Total"]),
    )
    yield gpu.reading(
        "bar1.used", "nvmlDeviceGetBAR1MemoryInfo", convert=lambda m: mib(m["bar1Used"])
    )
    yield gpu.reading(
        "compute_mode", "nvmlDeviceGetComputeMode", convert=lambda m: COMPUTE_MODES[int(m)]
    )
    yield gpu.reading("persistence_mode", "nvmlDeviceGetPersistenceMode", convert=bool)
    yield gpu.reading("mig.current", "nvmlDeviceGetMigMode", convert=lambda m: bool(m[0]))
    yield gpu.reading("mig.pending", "nvmlDeviceGetMigMode", convert=lambda m: bool(m[1]))
    mig_on = gpu.reading("mig.current", "nvmlDeviceGetMigMode", convert=lambda m: bool(m[0]))
    if mig_on.ok and mig_on.value:
        yield gpu.reading("mig.instances", MIG_DEVICES, convert=mig_instances)
    yield gpu.reading("ecc.current", "nvmlDeviceGetEccMode", convert=lambda m: bool(m[0]))
    yield gpu.reading("ecc.pending", "nvmlDeviceGetEccMode", convert=lambda m: bool(m[1]))


def _memory_health(gpu: GpuCalls) -> Iterator[Reading]:
    for counter_name, counter in (("volatile", COUNTER_VOLATILE), ("aggregate", COUNTER_AGGREGATE)):
        for error_name, error in (("corrected", ECC_CORRECTED), ("uncorrected", ECC_UNCORRECTED)):
            yield gpu.reading(
                f"ecc.{counter_name}.{error_name}",
                "nvmlDeviceGetTotalEccErrors",
                error,
                counter,
                convert=int,
            )
            for location_name, location in (("dram", LOCATION_DRAM), ("sram", LOCATION_SRAM)):
                yield gpu.reading(
                    f"ecc.{counter_name}.{error_name}.{location_name}",
                    "nvmlDeviceGetMemoryErrorCounter",
                    error,
                    counter,
                    location,
                    convert=int,
                )
    yield gpu.reading(
        "retired_pages.single_bit", "nvmlDeviceGetRetiredPages", RETIRED_SINGLE_BIT, convert=len
    )
    yield gpu.reading(
        "retired_pages.double_bit", "nvmlDeviceGetRetiredPages", RETIRED_DOUBLE_BIT, convert=len
    )
    yield gpu.reading(
        "retired_pages.pending", "nvmlDeviceGetRetiredPagesPendingStatus", convert=bool
    )
    for index, name in enumerate(("correctable", "uncorrectable", "pending", "failure")):
        convert = (lambda r, i=index: int(r[i])) if index < 2 else (lambda r, i=index: bool(r[i]))
        yield gpu.reading(f"remapped_rows.{name}", "nvmlDeviceGetRemappedRows", convert=convert)


def _clocks_power_thermal(gpu: GpuCalls) -> Iterator[Reading]:
    for domain, clock in (("sm", CLOCK_SM), ("mem", CLOCK_MEM)):
        yield gpu.reading(f"clocks.{domain}", "nvmlDeviceGetClockInfo", clock)
        yield gpu.reading(f"clocks.max_{domain}", "nvmlDeviceGetMaxClockInfo", clock)
        yield gpu.reading(f"clocks.app_{domain}", "nvmlDeviceGetApplicationsClock", clock)
        yield gpu.reading(
            f"clocks.default_app_{domain}",
            "nvmlDeviceGetDefaultApplicationsClock",
            clock,
        )
    reasons = gpu.reading(
        "throttle_reasons",
        "nvmlDeviceGetCurrentClocksEventReasons",
        convert=lambda mask: decode_throttle_reasons(int(mask)),
    )
    if not reasons.ok and "FunctionNotFound" in reasons.reason:  # drivers before 535
        reasons = gpu.reading(
            "throttle_reasons",
            "nvmlDeviceGetCurrentClocksThrottleReasons",
            convert=lambda mask: decode_throttle_reasons(int(mask)),
        )
    yield reasons
    yield gpu.reading("pstate", "nvmlDeviceGetPerformanceState", convert=lambda p: f"P{int(p)}")
    yield gpu.reading("power.draw", "nvmlDeviceGetPowerUsage", convert=watts)
    yield gpu.reading("power.limit", "nvmlDeviceGetPowerManagementLimit", convert=watts)
    yield gpu.reading(
        "power.default_limit", "nvmlDeviceGetPowerManagementDefaultLimit", convert=watts
    )
    yield gpu.reading("power.enforced_limit", "nvmlDeviceGetEnforcedPowerLimit", convert=watts)
    yield gpu.reading(
        "power.min_limit",
        "nvmlDeviceGetPowerManagementLimitConstraints",
        convert=lambda c: watts(c[0]),
    )
    yield gpu.reading(
        "power.max_limit",
        "nvmlDeviceGetPowerManagementLimitConstraints",
        convert=lambda c: watts(c[1]),
    )
    yield gpu.reading("temperature.gpu", "nvmlDeviceGetTemperature", TEMPERATURE_GPU)
    # newer drivers give the limits relative to T.Limit: the margin to it is what they read
    margin = gpu.reading(
        "temperature.tlimit_margin",
        "nvmlDeviceGetMarginTemperature",
        convert=lambda m: int(m["marginTemperature"]),
    )
    yield margin
    for name, threshold in (
        ("slowdown", THRESHOLD_SLOWDOWN),
        ("shutdown", THRESHOLD_SHUTDOWN),
        ("gpu_max", THRESHOLD_GPU_MAX),
    ):
        # as the driver gives them, never made up from the temperature and the margin
        # (two sensors: the sum drifts with the load); NVML 580.159.04 still gave a real
        # H100's absolute ones (89, 95, 87 C) where nvidia-smi printed only T.Limit's
        yield gpu.reading(f"temperature.{name}", "nvmlDeviceGetTemperatureThreshold", threshold)
        relative = gpu.reading(
            f"temperature.{name}_tlimit",
            "nvmlDeviceGetFieldValues",
            FIELD_TLIMIT[name],
            0,
            convert=int,
        )
        yield relative
        if name == "slowdown":
            yield slowdown_margin(margin, relative, gpu.index)


def slowdown_margin(margin: Reading, slowdown_tlimit: Reading, gpu: int) -> Reading:
    """gpu.N.temperature.slowdown_margin: how far below its slowdown threshold the GPU
    runs, on the sensor T.Limit is measured on (hotter than temperature.gpu's): the
    margin to T.Limit less the slowdown's T.Limit value (46 C - (-2 C) = 48 C for an idle
    H100). Both are relative to the one T.Limit: no second sensor enters it. Not read
    where either is not (the first failure says why)."""
    declared = declared_as("gpu.{gpu}.temperature.slowdown_margin")
    if margin.ok and slowdown_tlimit.ok:
        value = int(margin.value) - int(slowdown_tlimit.value)  # type: ignore[arg-type]
        source = f"{margin.source} minus {slowdown_tlimit.source}"
        return declared.reading(value, source, gpu=gpu)
    failure = margin if not margin.ok else slowdown_tlimit
    return declared.failed(failure.status, failure.reason, failure.source, gpu=gpu)


def _pcie_and_use(gpu: GpuCalls) -> Iterator[Reading]:
    yield gpu.reading("pcie.link_gen", "nvmlDeviceGetCurrPcieLinkGeneration")
    yield gpu.reading("pcie.max_link_gen", "nvmlDeviceGetGpuMaxPcieLinkGeneration")
    yield gpu.reading("pcie.link_width", "nvmlDeviceGetCurrPcieLinkWidth")
    yield gpu.reading("pcie.max_link_width", "nvmlDeviceGetMaxPcieLinkWidth")
    yield gpu.reading("pcie.replay_counter", "nvmlDeviceGetPcieReplayCounter")
    yield gpu.reading(
        "utilization.gpu",
        "nvmlDeviceGetUtilizationRates",
        convert=lambda u: int(u["gpu"]),
    )
    yield gpu.reading(
        "utilization.memory",
        "nvmlDeviceGetUtilizationRates",
        convert=lambda u: int(u["memory"]),
    )
    for kind, function in (
        ("compute", "nvmlDeviceGetComputeRunningProcesses"),
        ("graphics", "nvmlDeviceGetGraphicsRunningProcesses"),
    ):
        yield _with_fallback(
            gpu, f"processes.{kind}", function, lambda ps: [int(p["pid"]) for p in ps]
        )
    yield from gpu_fabric(gpu, declared_as)  # probes/fabric.py
    yield gpu.reading(
        "cpu_affinity",
        "nvmlDeviceGetCpuAffinity",
        16,
        convert=lambda masks: format_cpulist(affinity_cpus(list(masks))),
    )
    yield gpu.reading("numa_node", "nvmlDeviceGetNumaNodeId")


def _with_fallback(
    gpu: GpuCalls, suffix: str, function: str, convert: Callable[[Any], Value]
) -> Reading:
    """A reading of FUNCTION, or of its _v2 where the driver or binding lacks it."""
    reading = gpu.reading(suffix, function, convert=convert)
    if not reading.ok and "FunctionNotFound" in reading.reason:
        older = gpu.reading(suffix, f"{function}_v2", convert=convert)
        if older.ok:
            return older
    return reading


def _nvlink_speed(gpu: GpuCalls, link: int) -> Reading:
    """A link's speed, read live (field NVML_FI_DEV_NVLINK_GET_SPEED), in GB/s."""
    return gpu.reading(
        "nvlink.{link}.speed",
        "nvmlDeviceGetFieldValues",
        FIELD_NVLINK_SPEED,
        link,
        convert=lambda mbps: int(mbps) / 1000,
        link=link,
    )


def nvlink_readings(gpu: GpuCalls) -> tuple[list[Reading], dict[int, str], int]:
    """Readings of every NVLink the GPU has; also {link: remote bus id} of active links and
    the number of active links to NVSwitches."""
    readings: list[Reading] = []
    remotes: dict[int, str] = {}
    to_switch = 0
    links = 0
    first_failure: NvmlError | None = None
    unread: list[NvmlError] = []  # links whose state could not be read
    for link in range(NVLINK_MAX_LINKS):
        try:
            state = gpu.call("nvmlDeviceGetNvLinkState", link)
        except NvmlError as exc:
            if exc.code in ("NotSupported", "InvalidArgument", "NotRecorded"):
                first_failure = first_failure or exc
                break  # links are numbered from 0: the first missing one ends the list
            readings.append(
                gpu.reading("nvlink.{link}.state", "nvmlDeviceGetNvLinkState", link, link=link)
            )
            unread.append(exc)
            links += 1
            continue
        links += 1
        active = bool(state)
        readings.append(
            declared_as("gpu.{gpu}.nvlink.{link}.state").reading(
                "active" if active else "inactive",
                "nvml:nvmlDeviceGetNvLinkState",
                gpu=gpu.index,
                link=link,
            )
        )
        readings.append(
            gpu.reading("nvlink.{link}.version", "nvmlDeviceGetNvLinkVersion", link, link=link)
        )
        if not active:
            continue
        remote = gpu.reading(
            "nvlink.{link}.remote_bus_id",
            "nvmlDeviceGetNvLinkRemotePciInfo",
            link,
            convert=lambda p: normalize_bus_id(p["busId"]),
            link=link,
        )
        kind = gpu.reading(
            "nvlink.{link}.remote_type",
            "nvmlDeviceGetNvLinkRemoteDeviceType",
            link,
            convert=lambda t: REMOTE_TYPES[int(t)],
            link=link,
        )
        readings += [remote, kind, _nvlink_speed(gpu, link)]
        if kind.ok and kind.value == "nvswitch":
            to_switch += 1
        elif remote.ok and isinstance(remote.value, str):
            remotes[link] = remote.value
            if not kind.ok:  # a GPU's bus id says so; any other remote may be an NVSwitch
                gpu.untyped_links.append((remote.value, kind.reason))
        for name, counter in NVLINK_ERRORS.items():
            readings.append(
                gpu.reading(
                    f"nvlink.{{link}}.errors.{name}",
                    "nvmlDeviceGetNvLinkErrorCounter",
                    link,
                    counter,
                    convert=int,
                    link=link,
                )
            )
    source = "nvml:nvmlDeviceGetNvLinkState"
    count_of = declared_as("gpu.{gpu}.nvlink.count")
    active_of = declared_as("gpu.{gpu}.nvlink.active")
    if links == 0 and first_failure is not None:  # both say why: the rules do not apply
        readings += [
            declared.failed(
                first_failure.status,
                f"no NVLink: {first_failure.reason}",
                source,
                gpu=gpu.index,
            )
            for declared in (count_of, active_of)
        ]
    elif unread:  # a link whose state failed: how many are active is not known
        failure = unread[0]
        reason = f"{len(unread)} of {links} NVLink states unread: {failure.reason}"
        count = count_of.reading(links, source, gpu=gpu.index)
        if len(unread) == links:  # not one link answered: their number is not known either
            count = count_of.failed(failure.status, reason, source, gpu=gpu.index)
        readings += [count, active_of.failed(failure.status, reason, source, gpu=gpu.index)]
    else:
        readings.append(count_of.reading(links, source, gpu=gpu.index))
        active_count = sum(1 for r in readings if r.key.endswith(".state") and r.value == "active")
        readings.append(active_of.reading(active_count, source, gpu=gpu.index))
    return readings, remotes, to_switch


def topology_label(level: int | None, direct_links: int, switch_links: tuple[int, int]) -> str:
    """What `nvidia-smi topo -m` prints for a pair of GPUs: NV<n> when they share NVLinks
    (directly, or each through NVSwitches: the smaller side's count), else the PCIe level."""
    through_switch = min(switch_links) if all(switch_links) else 0
    if direct_links + through_switch:
        return f"NV{direct_links + through_switch}"
    if level is None:
        raise ValueError("no NVLink and no PCIe topology level")
    return TOPOLOGY_LEVELS.get(level, f"level {level}")


def collect(context: ProbeContext) -> Iterator[Reading]:
    """Every GPU's readings, then the pairwise topology."""
    nvml = context.nvml
    gpu_count = declared_as("gpu.count")
    try:
        count = int(nvml.call("nvmlDeviceGetCount"))
    except NvmlError as exc:
        yield gpu_count.failed(exc.status, exc.reason, "nvml:nvmlDeviceGetCount")
        return
    if not 0 <= count <= MAX_GPUS:
        yield gpu_count.failed(
            ReadingStatus.ERROR,
            f"nvmlDeviceGetCount returned {count}: not a GPU count (0 to {MAX_GPUS})",
            "nvml:nvmlDeviceGetCount",
        )
        return
    yield gpu_count.reading(count, "nvml:nvmlDeviceGetCount")
    bus_ids: dict[int, str] = {}
    remotes: dict[int, dict[int, str]] = {}
    switch_links: dict[int, int] = {}
    calls = {index: GpuCalls(nvml, index) for index in range(count)}
    probed: list[GpuCalls] = []
    for index, gpu in calls.items():
        if context.cancel.is_set():
            break
        probed.append(gpu)
        gpu.call_or_none("nvmlDeviceGetName")
        if gpu.lost is not None:
            continue  # every other call would say the same
        for group in (
            _identity,
            _memory_and_modes,
            _memory_health,
            _clocks_power_thermal,
            _pcie_and_use,
        ):
            for reading in group(gpu):
                yield reading
                if reading.key.endswith(".pci.bus_id") and reading.ok:
                    bus_ids[index] = str(reading.value)
        links, remotes[index], switch_links[index] = nvlink_readings(gpu)
        yield from links
        if gpu.lost is not None:  # lost part-way: its topology says so, not a guess
            del remotes[index]
    if not context.cancel.is_set():
        yield from _topology(calls, bus_ids, remotes, switch_links)
    for gpu in probed:  # last: a GPU lost by any call, its topology's included, is lost
        yield health_reading(gpu)


def health_reading(gpu: GpuCalls) -> Reading:
    """gpu.N.health: ok, or the failure that lost the GPU (GPU001), whichever call it
    came from: GpuIsLost, or an Unknown error the handle's re-check confirmed."""
    health = declared_as("gpu.{gpu}.health")
    if gpu.lost is None:
        return health.reading("ok", "nvml:nvmlDeviceGetName", gpu=gpu.index)
    reason = gpu.lost.reason
    if gpu.lost.code != "GpuIsLost":
        reason += " (and the re-check of its PCI info failed too)"
    return health.failed(ReadingStatus.ERROR, reason, f"nvml:{gpu.lost.function}", gpu=gpu.index)


def _topology(
    calls: dict[int, GpuCalls],
    bus_ids: dict[int, str],
    remotes: dict[int, dict[int, str]],
    switch_links: dict[int, int],
) -> Iterator[Reading]:
    for a in calls:
        for b in calls:
            if a == b:
                continue
            if a not in remotes or b not in remotes:
                lost = a if a not in remotes else b
                reason = f"GPU {lost} did not answer (lost)"
                for declared in (TOPO_PAIR, TOPO_P2P):
                    yield declared.failed(ReadingStatus.ERROR, reason, "nvml", gpu=a, peer=b)
                continue
            direct = sum(1 for bus in remotes[a].values() if bus == bus_ids.get(b))
            try:
                level = int(calls[a].call("nvmlDeviceGetTopologyCommonAncestor", b))
                source = "nvml:nvmlDeviceGetTopologyCommonAncestor"
            except NvmlError as exc:
                level, source = None, f"nvml:{exc.function}"
                failure = exc
            gpu_buses = set(bus_ids.values())
            untyped = [
                (x, why)
                for x in (a, b)
                for bus, why in calls[x].untyped_links
                if bus not in gpu_buses
            ]
            try:
                label = topology_label(level, direct, (switch_links[a], switch_links[b]))
                if untyped:  # links to devices of unknown type: maybe NVSwitches; never guess
                    x, why = untyped[0]
                    reason = (
                        f"uncertain: GPU {x} has NVLinks to devices of unknown type ({why}); "
                        f"through NVSwitches they would add to the {label} counted"
                    )
                    yield TOPO_PAIR.failed(ReadingStatus.MISSING, reason, source, gpu=a, peer=b)
                else:
                    source += ", nvml:nvmlDeviceGetNvLinkRemotePciInfo"
                    yield TOPO_PAIR.reading(label, source, gpu=a, peer=b)
            except ValueError:
                yield TOPO_PAIR.failed(failure.status, failure.reason, source, gpu=a, peer=b)
            supported = []
            failures = []
            for name, capability in P2P_CAPABILITIES.items():
                try:
                    status = int(calls[a].call("nvmlDeviceGetP2PStatus", b, capability))
                except NvmlError as exc:
                    failures.append(exc)
                    continue
                if status == 0:
                    supported.append(name)
            if failures and len(failures) == len(P2P_CAPABILITIES):
                yield TOPO_P2P.failed(
                    failures[0].status,
                    failures[0].reason,
                    "nvml:nvmlDeviceGetP2PStatus",
                    gpu=a,
                    peer=b,
                )
            else:
                yield TOPO_P2P.reading(supported, "nvml:nvmlDeviceGetP2PStatus", gpu=a, peer=b)


# the pairwise topology, whose loop emits through these two
TOPO_PAIR = catalog.config("topo.gpu.{gpu}.{peer}")
TOPO_P2P = catalog.config("topo.gpu.{gpu}.{peer}.p2p")

# the readings this probe makes (gpudiag/catalog.py)
READINGS = (
    *catalog.declare(
        "GPU",
        catalog.config("gpu.count"),
        catalog.config("gpu.{gpu}.bar1.total", "MiB"),
        catalog.volatile("gpu.{gpu}.bar1.used", "MiB"),
        catalog.config("gpu.{gpu}.board_part_number"),
        catalog.config("gpu.{gpu}.clocks.app_mem", "MHz"),
        catalog.config("gpu.{gpu}.clocks.app_sm", "MHz"),
        catalog.config("gpu.{gpu}.clocks.default_app_mem", "MHz"),
        catalog.config("gpu.{gpu}.clocks.default_app_sm", "MHz"),
        catalog.config("gpu.{gpu}.clocks.max_mem", "MHz"),
        catalog.config("gpu.{gpu}.clocks.max_sm", "MHz"),
        catalog.volatile("gpu.{gpu}.clocks.mem", "MHz"),
        catalog.volatile("gpu.{gpu}.clocks.sm", "MHz"),
        catalog.config("gpu.{gpu}.compute_mode"),
        catalog.position("gpu.{gpu}.cpu_affinity"),
        *(  # the ECC counts: since the driver loaded and over the GPU's life, all and per memory
            catalog.counter(f"gpu.{{gpu}}.ecc.{counter}.{kind}{memory}")
            for counter in ("aggregate", "volatile")
            for kind in ("corrected", "uncorrected")
            for memory in ("", ".dram", ".sram")
        ),
        catalog.config("gpu.{gpu}.ecc.current"),
        catalog.config("gpu.{gpu}.ecc.pending"),
        *FABRIC_READINGS,
        catalog.volatile("gpu.{gpu}.health"),
        catalog.config("gpu.{gpu}.inforom.image"),
        catalog.config("gpu.{gpu}.memory.total", "MiB"),
        catalog.volatile("gpu.{gpu}.memory.used", "MiB"),
        catalog.volatile("gpu.{gpu}.memory.reserved", "MiB"),
        catalog.config("gpu.{gpu}.mig.current"),
        catalog.config("gpu.{gpu}.mig.pending"),
        catalog.config("gpu.{gpu}.mig.instances"),
        catalog.config("gpu.{gpu}.name"),
        catalog.position("gpu.{gpu}.numa_node"),
        catalog.config("gpu.{gpu}.nvlink.active"),
        catalog.config("gpu.{gpu}.nvlink.count"),
        catalog.counter("gpu.{gpu}.nvlink.{link}.errors.crc_data"),
        catalog.counter("gpu.{gpu}.nvlink.{link}.errors.crc_flit"),
        catalog.counter("gpu.{gpu}.nvlink.{link}.errors.recovery"),
        catalog.counter("gpu.{gpu}.nvlink.{link}.errors.replay"),
        catalog.position("gpu.{gpu}.nvlink.{link}.remote_bus_id"),
        catalog.position("gpu.{gpu}.nvlink.{link}.remote_type"),
        catalog.config("gpu.{gpu}.nvlink.{link}.speed", "GB/s"),
        catalog.config("gpu.{gpu}.nvlink.{link}.state"),
        catalog.config("gpu.{gpu}.nvlink.{link}.version"),
        catalog.position("gpu.{gpu}.pci.bus_id"),
        catalog.config("gpu.{gpu}.pci.device_id"),
        catalog.config("gpu.{gpu}.pcie.link_gen"),
        catalog.config("gpu.{gpu}.pcie.link_width", "lanes"),
        catalog.config("gpu.{gpu}.pcie.max_link_gen"),
        catalog.config("gpu.{gpu}.pcie.max_link_width", "lanes"),
        catalog.counter("gpu.{gpu}.pcie.replay_counter"),
        catalog.config("gpu.{gpu}.persistence_mode"),
        catalog.config("gpu.{gpu}.power.default_limit", "W"),
        catalog.volatile("gpu.{gpu}.power.draw", "W"),
        catalog.config("gpu.{gpu}.power.enforced_limit", "W"),
        catalog.config("gpu.{gpu}.power.limit", "W"),
        catalog.config("gpu.{gpu}.power.max_limit", "W"),
        catalog.config("gpu.{gpu}.power.min_limit", "W"),
        catalog.volatile("gpu.{gpu}.processes.compute"),
        catalog.volatile("gpu.{gpu}.processes.graphics"),
        catalog.volatile("gpu.{gpu}.pstate"),
        catalog.counter("gpu.{gpu}.remapped_rows.correctable"),
        catalog.config("gpu.{gpu}.remapped_rows.failure"),
        catalog.config("gpu.{gpu}.remapped_rows.pending"),
        catalog.counter("gpu.{gpu}.remapped_rows.uncorrectable"),
        catalog.counter("gpu.{gpu}.retired_pages.double_bit"),
        catalog.config("gpu.{gpu}.retired_pages.pending"),
        catalog.counter("gpu.{gpu}.retired_pages.single_bit"),
        catalog.volatile("gpu.{gpu}.serial", identifying="serial"),
        catalog.volatile("gpu.{gpu}.temperature.gpu", "C"),
        # the thresholds as the driver gives them, absolute or relative to T.Limit: fixed
        catalog.config("gpu.{gpu}.temperature.gpu_max", "C"),
        catalog.config("gpu.{gpu}.temperature.gpu_max_tlimit", "C"),
        catalog.config("gpu.{gpu}.temperature.shutdown", "C"),
        catalog.config("gpu.{gpu}.temperature.shutdown_tlimit", "C"),
        catalog.config("gpu.{gpu}.temperature.slowdown", "C"),
        catalog.config("gpu.{gpu}.temperature.slowdown_tlimit", "C"),
        # the margins move with the temperature, and the reasons with the load
        catalog.volatile(
            "gpu.{gpu}.temperature.slowdown_margin",
            "C",
            help="how far below its slowdown threshold the GPU runs (T.Limit margin less "
            "the slowdown's T.Limit value; GPU032 judges it)",
        ),
        catalog.volatile("gpu.{gpu}.temperature.tlimit_margin", "C"),
        catalog.volatile("gpu.{gpu}.throttle_reasons"),
        catalog.volatile("gpu.{gpu}.utilization.gpu", "%"),
        catalog.volatile("gpu.{gpu}.utilization.memory", "%"),
        catalog.volatile("gpu.{gpu}.uuid", identifying="uuid"),
        catalog.config("gpu.{gpu}.vbios"),
    ),
    *catalog.declare("GPU topology", TOPO_PAIR, TOPO_P2P),
)
# the probe emits through its declarations: a key it does not declare is a KeyError
_DECLARED = {d.template: d for d in READINGS}


def declared_as(template: str) -> catalog.Declared:
    """This probe's declaration of `template`, to make the reading through (KeyError for
    a template it does not declare)."""
    return _DECLARED[template]


PROBE = Probe(
    name="gpu",
    title="GPUs, NVLink and topology (NVML)",
    cost=Cost.INSTANT,
    needs=frozenset({Need.NVML}),
    collect=collect,
    timeout_s=30.0,
    readings=READINGS,
)
