"""Scripted NVML: clocks, power, temperature and clock-event reasons per GPU (issue 35,
conditions), an NVML backend for the kernels' condition sampler (kernels/conditions.py);
beside the CUDA fake (tests/fakecuda.py), which is the device boundary."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from gpudiag.nvml import NvmlError

# An NVML backend (gpudiag.nvml.NvmlBackend) whose answers a test scripts per GPU, so that
# what the kernels ran under (kernels/conditions.py) and the verdicts read from it are tested.

# NVML's clock-event reason bits (nvml.h nvmlClocksEventReason*), as probes/gpu.py decodes
CLOCK_EVENT_BITS = {
    "GpuIdle": 0x1,
    "ApplicationsClocksSetting": 0x2,
    "SwPowerCap": 0x4,
    "HwSlowdown": 0x8,
    "SwThermalSlowdown": 0x20,
    "HwThermalSlowdown": 0x40,
    "HwPowerBrakeSlowdown": 0x80,
}


@dataclass
class GpuScript:
    """What one GPU answers: clocks in MHz, power and its limit in W, temperature in C,
    the clock-event reasons set. A list is a series: each sample takes the next value
    (the last one repeats)."""

    sm_clock: float | list[float] = 1980
    mem_clock: float | list[float] = 2619
    sm_clock_max: float = 1980
    mem_clock_max: float = 2619
    power_w: float | list[float] = 650.0
    power_limit_w: float = 700.0
    temperature: float | list[float] = 60
    events: tuple[str, ...] | list[tuple[str, ...]] = ()
    # an older driver: FunctionNotFound for the clocks-event call (the throttle call answers)
    no_event_api: bool = False


class ScriptedNvml:
    """An NVML backend answering the calls kernels/conditions.py makes from GpuScripts;
    anything else is NotSupported. `calls` counts what was asked, per function."""

    description = "scripted NVML (tests/fakecuda.py)"

    def __init__(self, scripts: list[GpuScript], fail_init: str = "") -> None:
        self.scripts = scripts
        self.fail_init = fail_init
        self.calls: dict[str, int] = {}
        self._lock = threading.Lock()
        self._step: dict[tuple[int, str], int] = {}

    def init(self) -> None:

        if self.fail_init:
            raise NvmlError(self.fail_init, "nvmlInit")

    def shutdown(self) -> None:
        return None

    def _next(self, device: int, name: str) -> Any:
        """The script's value of `name` for this sample (a series steps once per sample:
        on each SM clock read, the first call of a sample)."""
        value = getattr(self.scripts[device], name)
        if not isinstance(value, list):
            return value
        index = self._step.get((device, "sample"), 0)
        return value[min(index, len(value) - 1)]

    def call(self, function: str, device: int | None, *args: int) -> Any:

        with self._lock:
            self.calls[function] = self.calls.get(function, 0) + 1
            if device is None:
                if function in ("nvmlDeviceGetCount", "nvmlDeviceGetCount_v2"):
                    return len(self.scripts)
                raise NvmlError("NotSupported", function)
            if not 0 <= device < len(self.scripts):
                raise NvmlError("InvalidArgument", function, f"no device {device}")
            script = self.scripts[device]
            if function == "nvmlDeviceGetClockInfo" and args == (1,):
                self._step[(device, "sample")] = self._step.get((device, "sample"), -1) + 1
                return int(self._next(device, "sm_clock"))
            if function == "nvmlDeviceGetClockInfo" and args == (2,):
                return int(self._next(device, "mem_clock"))
            if function == "nvmlDeviceGetMaxClockInfo":
                return int(script.sm_clock_max if args == (1,) else script.mem_clock_max)
            if function == "nvmlDeviceGetPowerUsage":
                return int(self._next(device, "power_w") * 1000)
            if function == "nvmlDeviceGetEnforcedPowerLimit":
                return int(script.power_limit_w * 1000)
            if function == "nvmlDeviceGetTemperature":
                return int(self._next(device, "temperature"))
            events = (
                "nvmlDeviceGetCurrentClocksEventReasons",
                "nvmlDeviceGetCurrentClocksThrottleReasons",
            )
            if function in events:
                if script.no_event_api and function == events[0]:
                    raise NvmlError("FunctionNotFound", function)
                names = self._next(device, "events")
                return sum(CLOCK_EVENT_BITS[name] for name in names)
            raise NvmlError("NotSupported", function)
