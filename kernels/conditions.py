"""What a GPU ran under while a kernel measured it, and what that says of a slow figure.

While a GEMM, STREAM, copy or all-reduce runs, NVML is sampled for each GPU it uses (every
SAMPLE_PERIOD_S, and once at its start and end): SM and memory clocks, power draw against
the enforced power limit, temperature and the clock-event (throttle) reasons. The result
records the minimum and median clocks, the median and highest power, the limit, the
hottest temperature and every reason seen (`conditions_params`), so that a figure carries
its clocks. `clock_state` reads them back: a slow figure under a power cap, a thermal or
a hardware slowdown, or clocks held by a setting names that cause and what to do about it
("power limit 450 W of 700: raise it"); only a slow figure at full clocks is the GPU's.

No NumPy here: the readings (kernels/readings.py) read the params back at `check` time.
The burn keeps its own sampling (kernels/burn.py) for now. Never run on a GPU in this
project's CI: the tests script NVML's answers (tests/fakecuda.py, ScriptedNvml)."""

from __future__ import annotations

import statistics
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

SAMPLE_PERIOD_S = 0.1
# Drivers before R535 have no clocks-event API (FunctionNotFound): the throttle-reasons call
# of the same mask is asked instead (as kernels/burn.py does)
CLOCK_EVENT_FUNCTIONS = (
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
)
# (sample key, NVML function, its arguments after the device): nvmlClockType_t 1 is SM,
# 2 memory; power in milliwatts
SAMPLED = (
    ("sm_clock", "nvmlDeviceGetClockInfo", (1,)),
    ("mem_clock", "nvmlDeviceGetClockInfo", (2,)),
    ("power_mw", "nvmlDeviceGetPowerUsage", ()),
    ("power_limit_mw", "nvmlDeviceGetEnforcedPowerLimit", ()),
    ("temperature", "nvmlDeviceGetTemperature", (0,)),
)
MAX_CLOCKS = (("sm_clock_max", 1), ("mem_clock_max", 2))  # nvmlDeviceGetMaxClockInfo
# The clock-event reasons that hold a figure back, the worst first: what each says, and
# the state it gives (GpuIdle, SyncBoost and DisplayClockSetting do not hold a kernel back)
CAUSES = (
    ("HwSlowdown", "hw-slowdown"),
    ("HwPowerBrakeSlowdown", "hw-slowdown"),
    ("HwThermalSlowdown", "thermal"),
    ("SwThermalSlowdown", "thermal"),
    ("SwPowerCap", "power-capped"),
    ("ApplicationsClocksSetting", "clock-setting"),
)
STATES = ("full", "power-capped", "thermal", "hw-slowdown", "clock-setting")


def sample(nvml: Any, gpu: int) -> dict[str, Any]:
    """One sample of NVML GPU `gpu`: the SAMPLED values that answered, and the clock-event
    reasons (names) where either function answers."""
    from gpudiag.model import ReadingStatus
    from gpudiag.probes.gpu import decode_throttle_reasons

    taken: dict[str, Any] = {}
    for key, function, args in SAMPLED:
        reading = nvml.reading(key, function, gpu, *args)
        if reading.ok and isinstance(reading.value, int | float):
            taken[key] = reading.value
    for function in CLOCK_EVENT_FUNCTIONS:  # the newer name first, then the older
        reasons = nvml.reading(
            "reasons", function, gpu, convert=lambda mask: decode_throttle_reasons(int(mask))
        )
        if reasons.ok or reasons.status is not ReadingStatus.UNSUPPORTED:
            break
    if reasons.ok:
        taken["events"] = list(reasons.value)  # type: ignore[arg-type]
    return taken


class ConditionSampler:
    """Samples the GPUs a kernel runs on, on a thread, while `watch` is open. `nvml`: the
    run's NVML (gpudiag.nvml.Nvml) or None (then nothing is sampled, and the results say
    why); `nvml_index`: NVML's index of each CUDA device where they differ."""

    def __init__(
        self,
        nvml: Any,
        nvml_index: Mapping[int, int] | None = None,
        period: float = SAMPLE_PERIOD_S,
        why_not: str = "",
    ) -> None:
        self.nvml = nvml
        self.nvml_index = dict(nvml_index or {})
        self.period = period
        self.why_not = why_not or "no NVML"
        self._max: dict[int, dict[str, float]] = {}

    def _nvml(self, gpu: int) -> int:
        return self.nvml_index.get(gpu, gpu)

    def max_clocks(self, gpu: int) -> dict[str, float]:
        """The GPU's highest SM and memory clocks (asked once per GPU)."""
        if gpu not in self._max:
            found: dict[str, float] = {}
            for key, clock_type in MAX_CLOCKS:
                reading = self.nvml.reading(
                    key, "nvmlDeviceGetMaxClockInfo", self._nvml(gpu), clock_type
                )
                if reading.ok and isinstance(reading.value, int | float):
                    found[key] = float(reading.value)
            self._max[gpu] = found
        return self._max[gpu]

    @contextmanager
    def watch(self, gpus: Sequence[int]) -> Iterator[dict[int, list[dict[str, Any]]]]:
        """Samples of each of `gpus` (CUDA indices) from entering to leaving: one at once,
        one every period, one at the end. Yields the dict it fills."""
        taken: dict[int, list[dict[str, Any]]] = {gpu: [] for gpu in gpus}
        if self.nvml is None or not gpus:
            yield taken
            return
        stop = threading.Event()

        def one_round() -> None:
            for gpu in gpus:
                taken[gpu].append(sample(self.nvml, self._nvml(gpu)))

        def loop() -> None:
            while not stop.wait(self.period):
                one_round()

        one_round()
        thread = threading.Thread(target=loop, name="kernel-conditions", daemon=True)
        thread.start()
        try:
            yield taken
        finally:
            stop.set()
            thread.join(timeout=self.period * 4 + 1.0)
            one_round()

    def params(self, gpus: Sequence[int], taken: Mapping[int, list[dict[str, Any]]]) -> tuple:
        """The conditions params of the samples of `gpus` together (one GPU's, or every
        GPU of an all-reduce)."""
        if self.nvml is None:
            return (("conditions", f"not sampled: {self.why_not}"),)
        merged = [s for gpu in gpus for s in taken.get(gpu, [])]
        maxima: dict[str, float] = {}
        for gpu in gpus:
            for key, value in self.max_clocks(gpu).items():
                maxima[key] = min(maxima.get(key, value), value)
        return conditions_params(merged, maxima)


def conditions_params(
    samples: Sequence[Mapping[str, Any]], maxima: Mapping[str, float] | None = None
) -> tuple[tuple[str, Any], ...]:
    """The params a result records of the samples taken over its run: clocks (minimum and
    median, with the GPU's highest where NVML gave it), power (median and highest) and its
    limit, the highest temperature (of the samples where the GPU was busy, all where it
    never was) and every clock-event reason seen ("none" when none)."""
    if not any(samples):  # no sample, or NVML answered none of the calls (a replay)
        return (("conditions", "not sampled: NVML answered none of its calls"),)
    out: list[tuple[str, Any]] = [("condition_samples", len(samples))]
    # a sample NVML calls GpuIdle (before the first launch, between batches) is at idle
    # clocks by design: the clocks and power are of the busy ones
    busy = [s for s in samples if "GpuIdle" not in s.get("events", ())] or list(samples)

    def series(key: str) -> list[float]:
        return [float(s[key]) for s in busy if isinstance(s.get(key), int | float)]

    for name in ("sm_clock", "mem_clock"):
        values = series(name)
        if values:
            out += [(f"{name}_min_mhz", min(values))]
            out += [(f"{name}_median_mhz", statistics.median(values))]
        if maxima and f"{name}_max" in maxima:
            out.append((f"{name}_max_mhz", maxima[f"{name}_max"]))
    power = series("power_mw")
    if power:
        out += [("power_median_w", round(statistics.median(power) / 1000, 1))]
        out += [("power_max_w", round(max(power) / 1000, 1))]
    limits = series("power_limit_mw")
    if limits:
        out.append(("power_limit_w", round(min(limits) / 1000, 1)))
    temperatures = series("temperature")
    if temperatures:
        out.append(("temperature_max_c", max(temperatures)))
    if any("events" in s for s in samples):
        seen = {str(e) for s in samples for e in s.get("events", ())} - {"GpuIdle"}
        out.append(("clock_events", ", ".join(sorted(seen)) or "none"))
    return tuple(out)


def clock_state(
    params: Mapping[str, Any], default_power_w: float | None = None, gpu: str = "N"
) -> tuple[str, str] | None:
    """What held a figure back, from its conditions params: (state, why and what to do),
    state one of STATES; None where its conditions were not recorded (an old snapshot, no
    NVML). `default_power_w`: the model's default power limit (its profile's)."""
    events = params.get("clock_events")
    if not isinstance(events, str):
        return None
    seen = {e.strip() for e in events.split(",")} - {"none", ""}
    sm_min, sm_max = params.get("sm_clock_min_mhz"), params.get("sm_clock_max_mhz")
    clocks = (
        f"SM clock {sm_min:g}-{params.get('sm_clock_median_mhz', sm_min):g} MHz"
        if isinstance(sm_min, int | float)
        else "SM clock not read"
    )
    if isinstance(sm_max, int | float):
        clocks += f" of {sm_max:g}"
    for event, state in CAUSES:
        if event in seen:
            return state, _why(state, event, params, default_power_w, gpu, clocks)
    return "full", f"full clocks: no clock event held it back ({clocks})"


def _why(
    state: str,
    event: str,
    params: Mapping[str, Any],
    default_power_w: float | None,
    gpu: str,
    clocks: str,
) -> str:
    """The cause in words, and its action."""
    limit, temperature = params.get("power_limit_w"), params.get("temperature_max_c")
    if state == "power-capped":
        drawn = params.get("power_median_w")
        at = f"{drawn:g} W drawn, " if isinstance(drawn, int | float) else ""
        if isinstance(limit, int | float) and default_power_w and limit < default_power_w:
            return (
                f"{event}: power limit {limit:g} W of {default_power_w:g}: raise it "
                f"(nvidia-smi -i {gpu} -pl {default_power_w:g}); {at}{clocks}"
            )
        if not isinstance(limit, int | float):
            return f"{event}: held at a power limit NVML did not give ({at}{clocks})"
        return (
            f"{event}: at its power limit ({at}limit {limit:g} W, not under the model's "
            f"default): the figure is power-bound; compare it with the node's other GPUs "
            f"(KRN009/KRN010); {clocks}"
        )
    if state == "thermal":
        hot = f" at {temperature:g} C" if isinstance(temperature, int | float) else ""
        return (
            f"{event}{hot}: the GPU slowed itself down to cool: check its cooling (fans, "
            f"airflow, inlet temperature, heatsink contact); {clocks}"
        )
    if state == "hw-slowdown":
        return (
            f"{event}: the board asked for a hardware slowdown (power brake or an "
            f"over-temperature or over-current signal): check the power supply and cooling "
            f"(nvidia-smi -q -d PERFORMANCE); {clocks}"
        )
    return (
        f"{event}: clocks held by an application clocks setting: reset them "
        f"(nvidia-smi -i {gpu} -rac); {clocks}"
    )


def ran_under(params: Mapping[str, Any]) -> str:
    """One line of what a result's GPU ran under, for `gpudiag run`'s table: "" where its
    conditions were not sampled."""
    values = dict(params)
    if "condition_samples" not in values:
        return ""
    parts = []
    if isinstance(values.get("sm_clock_min_mhz"), int | float):
        top = values.get("sm_clock_max_mhz")
        parts.append(
            f"SM {values['sm_clock_min_mhz']:g}-{values['sm_clock_median_mhz']:g}"
            + (f" of {top:g}" if isinstance(top, int | float) else "")
            + " MHz"
        )
    if isinstance(values.get("mem_clock_min_mhz"), int | float):
        parts.append(f"memory {values['mem_clock_min_mhz']:g} MHz")
    if isinstance(values.get("power_median_w"), int | float):
        limit = values.get("power_limit_w")
        parts.append(
            f"{values['power_median_w']:g} W" + (f" of {limit:g}" if limit is not None else "")
        )
    if isinstance(values.get("temperature_max_c"), int | float):
        parts.append(f"{values['temperature_max_c']:g} C")
    parts.append(f"clock events: {values.get('clock_events', 'not read')}")
    return "ran at " + ", ".join(parts)
