"""One window of performance counters per GPU, through gpudiag's one NVML interface.

On GPUs whose `nvmlGpmQueryDeviceSupport` says so (Hopper and newer), the GPM metrics of
the window since the last sample (one `nvmlGpmSampleGet` and one `nvmlGpmMetricsGet` per
GPU: every metric read together, no multiplexing); on a MIG GPU, per GPU instance with
`nvmlGpmMigSampleGet` where asked. Elsewhere the older counters: utilisation
(`nvmlDeviceGetUtilizationRates`), `nvmlDeviceGetPcieThroughput` and the NVLink data
throughput field values; the metrics those lack (the pipes, SM activity) are unsupported,
never 0. Counters another profiler holds (Nsight Compute, DCGM profiling: NVML answers
InUse) are UNKNOWN with that reason. Each window also holds the SM clock against its
maximum, power against its enforced limit, the temperature and the clock event reasons.
A GPU that is lost in a window (any of its calls answers GpuIsLost) is LOST in that window
only: the next window samples it again.

Never run on a GPU in this project: tested through the C NVML stand-in (tests/nvml_standin)
with the real pynvml only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from gpudiag.nvml import (
    FIELD_VALUES,
    GPM_METRICS,
    GPM_WHOLE_GPU,
    MIG_DEVICES,
    Nvml,
    NvmlError,
)

# nvml.h's nvmlGpmMetricId_t: gpudiag's name for each metric it reads, and its scale
# (percent -> fraction; MiB/s -> bytes/s)
MIB = 2**20
GPM_IDS: dict[str, tuple[int, float]] = {
    "gr_active": (1, 0.01),  # NVML_GPM_METRIC_GRAPHICS_UTIL
    "sm_active": (2, 0.01),  # NVML_GPM_METRIC_SM_UTIL
    "sm_occupancy": (3, 0.01),  # NVML_GPM_METRIC_SM_OCCUPANCY
    "tensor": (5, 0.01),  # NVML_GPM_METRIC_ANY_TENSOR_UTIL
    "tensor_hmma": (7, 0.01),  # NVML_GPM_METRIC_HMMA_TENSOR_UTIL
    "tensor_dmma": (8, 0.01),  # NVML_GPM_METRIC_DMMA_TENSOR_UTIL
    "tensor_imma": (9, 0.01),  # NVML_GPM_METRIC_IMMA_TENSOR_UTIL
    "dram": (10, 0.01),  # NVML_GPM_METRIC_DRAM_BW_UTIL, of the theoretical maximum
    "fp64": (11, 0.01),  # NVML_GPM_METRIC_FP64_UTIL
    "fp32": (12, 0.01),  # NVML_GPM_METRIC_FP32_UTIL
    "fp16": (13, 0.01),  # NVML_GPM_METRIC_FP16_UTIL
    "pcie_tx": (20, MIB),  # NVML_GPM_METRIC_PCIE_TX_PER_SEC (MiB/s)
    "pcie_rx": (21, MIB),  # NVML_GPM_METRIC_PCIE_RX_PER_SEC
    "nvlink_rx": (60, MIB),  # NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC
    "nvlink_tx": (61, MIB),  # NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC
}
GPM_REQUEST = tuple(number for number, _ in GPM_IDS.values())
# every metric a window can hold: fractions (0-1) and rates (bytes/s)
FRACTIONS = (
    "gr_active",
    "sm_active",
    "sm_occupancy",
    "tensor",
    "tensor_hmma",
    "tensor_dmma",
    "tensor_imma",
    "dram",
    "fp64",
    "fp32",
    "fp16",
    "mem_busy",  # the older counters: utilisation.memory, the time DRAM was read or written
)
RATES = ("pcie_tx", "pcie_rx", "nvlink_tx", "nvlink_rx")
METRICS = FRACTIONS + RATES

CLOCK_SM, TEMPERATURE_GPU = 1, 0
PCIE_TX_BYTES, PCIE_RX_BYTES = 0, 1  # nvmlPcieUtilCounter_t (KB/s over 20 ms)
FIELD_NVLINK_TX, FIELD_NVLINK_RX = 138, 139  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX (KiB)
SCOPE_ALL_LINKS = 0xFFFFFFFF
HELD = "InUse"  # what NVML answers while another profiler holds the counters
HELD_REASON = "the counters are held by another profiler (Nsight Compute, DCGM profiling)"


@dataclass
class Window:
    """One GPU over one window: each metric's value, or None with the reason in `why`
    (unsupported, not yet measured, or UNKNOWN: held by another profiler)."""

    gpu: int
    time: float
    source: str = "gpm"  # gpm, older (no GPM on this GPU), none
    lost: bool = False
    held: bool = False  # the counters are held by another profiler: UNKNOWN
    values: dict[str, float | None] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)
    sm_clock_mhz: float | None = None
    max_sm_clock_mhz: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temperature_c: float | None = None
    event_mask: int | None = None
    errors: list[str] = field(default_factory=list)  # one line per call that failed

    def value(self, name: str) -> float | None:
        """A metric's value, None where it was not measured."""
        return self.values.get(name)


@dataclass
class _State:
    """What the sampler keeps per GPU between windows."""

    gpm: bool | None = None  # None: not asked yet
    gpm_why: str = ""
    max_clock: float | None = None
    nvlink_kib: dict[str, tuple[float, int]] = field(default_factory=dict)  # name: (t, KiB)


class Sampler:
    """Takes one window per GPU per call of `sample`; keeps what GPM needs between calls."""

    def __init__(self, nvml: Nvml, gpus: int, mig_instances: dict[int, int] | None = None):
        self.nvml = nvml
        self.gpus = gpus
        # GPU -> the GPU instance id to sample with nvmlGpmMigSampleGet (a MIG GPU)
        self.mig_instances = mig_instances or {}
        self._state = [_State() for _ in range(gpus)]

    def sample(self, now: float | None = None) -> list[Window]:
        """One window of every GPU; one GPU's failures never stop the others."""
        now = time.time() if now is None else now
        return [self.sample_gpu(gpu, now) for gpu in range(self.gpus)]

    def prime(self, now: float | None = None) -> None:
        """The first GPM sample of every GPU (a window needs two), its clocks not read:
        for a recording whose window is to span what runs between this and `sample`."""
        now = time.time() if now is None else now
        for gpu in range(self.gpus):
            try:
                self._counters(gpu, Window(gpu, now), [])
            except Exception:  # noqa: S112 (never stop on one GPU: `sample` says why)
                continue

    def sample_gpu(self, gpu: int, now: float) -> Window:
        """One GPU's window; every failed call is recorded, a lost GPU is LOST."""
        window = Window(gpu, now)
        failures: list[NvmlError] = []
        try:
            self._counters(gpu, window, failures)
            self._clocks(gpu, window, failures)
        except Exception as exc:  # never stop on one GPU's error
            window.errors.append(f"{type(exc).__name__}: {exc}")
        if any(self.nvml.confirms_lost(gpu, exc) for exc in failures):
            window.lost = True
            window.values = dict.fromkeys(METRICS)
            window.why = dict.fromkeys(METRICS, "GpuIsLost")
            window.sm_clock_mhz = window.power_w = window.temperature_c = None
            window.event_mask = None  # LOST in every reading of the window, never a value
            self._state[gpu].nvlink_kib.clear()
        window.errors += [exc.reason for exc in failures]
        return window

    def _call(self, failures: list[NvmlError], function: str, gpu: int, *args: int) -> Any:
        try:
            return self.nvml.call(function, gpu, *args)
        except NvmlError as exc:
            failures.append(exc)
            return exc

    def _counters(self, gpu: int, window: Window, failures: list[NvmlError]) -> None:
        state = self._state[gpu]
        if state.gpm is None:
            self._find_mig_instance(gpu)
            support = self._call(failures, "nvmlGpmQueryDeviceSupport", gpu)
            if isinstance(support, NvmlError):
                state.gpm, state.gpm_why = False, f"no GPM ({support.code})"
                failures.remove(support)  # a GPU without GPM is not an error
            else:
                state.gpm = bool(support.get("isSupportedDevice"))
                state.gpm_why = "" if state.gpm else "no GPM on this GPU"
        if state.gpm:
            self._gpm(gpu, window, failures)
        else:
            window.source = "older"
            self._older(gpu, window, failures, state.gpm_why)

    def _find_mig_instance(self, gpu: int) -> None:
        """On a GPU in MIG mode, the GPU instance GPM samples (nvmlGpmMigSampleGet): the
        first MIG device's; the others are not sampled (one window per GPU)."""
        if gpu in self.mig_instances:
            return
        try:
            mode = self.nvml.call("nvmlDeviceGetMigMode", gpu)
            if not isinstance(mode, list) or not mode or int(mode[0]) != 1:
                return
            devices = self.nvml.call(MIG_DEVICES, gpu)
        except (NvmlError, TypeError, ValueError):
            return  # no MIG here (or no answer): the whole GPU
        if isinstance(devices, list) and devices and isinstance(devices[0], dict):
            self.mig_instances[gpu] = int(devices[0]["gpu_instance"])

    def _gpm(self, gpu: int, window: Window, failures: list[NvmlError]) -> None:
        instance = self.mig_instances.get(gpu, GPM_WHOLE_GPU)
        answer = self._call(failures, GPM_METRICS, gpu, instance, *GPM_REQUEST)
        if isinstance(answer, NvmlError):
            if answer.code == HELD:
                window.held = True
                reason = HELD_REASON
                failures.remove(answer)
            elif answer.code == "NoData":
                reason = "the first window: GPM needs two samples"
                failures.remove(answer)
            else:
                reason = answer.code
            window.values = dict.fromkeys(METRICS)
            window.why = dict.fromkeys(METRICS, reason)
            return
        for name, (number, scale) in GPM_IDS.items():
            got = answer.get(number, answer.get(str(number)))  # a recording's keys: text
            if isinstance(got, (int, float)):
                window.values[name] = round(float(got) * scale, 6)
            else:
                window.values[name] = None
                window.why[name] = f"unsupported ({got or 'not answered'})"
        window.values["mem_busy"] = None
        window.why["mem_busy"] = "not read: GPM's DRAM bandwidth replaces it"

    def _older(self, gpu: int, window: Window, failures: list[NvmlError], why: str) -> None:
        for name in METRICS:
            window.values[name] = None
            window.why[name] = f"unsupported: {why}"
        use = self._call(failures, "nvmlDeviceGetUtilizationRates", gpu)
        if not isinstance(use, NvmlError):
            window.values["gr_active"] = int(use["gpu"]) / 100
            window.values["mem_busy"] = int(use["memory"]) / 100
            for name in ("gr_active", "mem_busy"):
                window.why.pop(name, None)
        for name, counter in (("pcie_tx", PCIE_TX_BYTES), ("pcie_rx", PCIE_RX_BYTES)):
            kbs = self._call(failures, "nvmlDeviceGetPcieThroughput", gpu, counter)
            if isinstance(kbs, NvmlError):
                window.why[name] = f"unsupported ({kbs.code})"
                if kbs.code in ("NotSupported", "FunctionNotFound"):
                    failures.remove(kbs)
                continue
            window.values[name] = int(kbs) * 1000.0
            window.why.pop(name, None)
        state = self._state[gpu]
        for name, field_id in (("nvlink_tx", FIELD_NVLINK_TX), ("nvlink_rx", FIELD_NVLINK_RX)):
            kib = self._call(failures, FIELD_VALUES, gpu, field_id, SCOPE_ALL_LINKS)
            if isinstance(kib, NvmlError):
                window.why[name] = f"unsupported ({kib.code})"
                if kib.code in ("NotSupported", "FunctionNotFound"):
                    failures.remove(kib)
                continue
            before = state.nvlink_kib.get(name)
            state.nvlink_kib[name] = (window.time, int(kib))
            if before is None or window.time <= before[0] or int(kib) < before[1]:
                window.why[name] = "the first window: the counter needs two readings"
                continue
            window.values[name] = (int(kib) - before[1]) * 1024 / (window.time - before[0])
            window.why.pop(name, None)

    def _clocks(self, gpu: int, window: Window, failures: list[NvmlError]) -> None:
        state = self._state[gpu]
        clock = self._call(failures, "nvmlDeviceGetClockInfo", gpu, CLOCK_SM)
        window.sm_clock_mhz = None if isinstance(clock, NvmlError) else float(clock)
        if state.max_clock is None:
            top = self._call(failures, "nvmlDeviceGetMaxClockInfo", gpu, CLOCK_SM)
            state.max_clock = None if isinstance(top, NvmlError) else float(top)
        window.max_sm_clock_mhz = state.max_clock
        power = self._call(failures, "nvmlDeviceGetPowerUsage", gpu)
        window.power_w = None if isinstance(power, NvmlError) else int(power) / 1000
        limit = self._call(failures, "nvmlDeviceGetEnforcedPowerLimit", gpu)
        window.power_limit_w = None if isinstance(limit, NvmlError) else int(limit) / 1000
        temp = self._call(failures, "nvmlDeviceGetTemperature", gpu, TEMPERATURE_GPU)
        window.temperature_c = None if isinstance(temp, NvmlError) else float(temp)
        mask = self._call(failures, "nvmlDeviceGetCurrentClocksEventReasons", gpu)
        if isinstance(mask, NvmlError) and mask.code == "FunctionNotFound":
            failures.remove(mask)  # an older driver: the older name, the same bits
            mask = self._call(failures, "nvmlDeviceGetCurrentClocksThrottleReasons", gpu)
        window.event_mask = None if isinstance(mask, NvmlError) else int(mask)
