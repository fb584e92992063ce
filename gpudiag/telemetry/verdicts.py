"""What bounds each GPU in a window, from a closed set, with its numbers; and the
stragglers within the node.

Verdicts: idle; compute-bound (by the tensor, FP64, FP32 or FP16 pipe, saying which);
memory-bound (DRAM); NVLink-bound; PCIe-bound; latency-bound (the GPU busy, no pipe, DRAM
or link reaching its boundary: launches, synchronisation or latency); throttled (the SM
clock held below its maximum by a limit, with the reason); and, outside the judgment,
UNKNOWN (counters held by another profiler, or none this window) and LOST. Each verdict
carries the measured shares against the node's own ceilings (`Ceilings`: its STREAM, GEMM,
all-reduce and copy results where a snapshot holds them, else the profile's datasheet
figures). The boundaries are data: rules/telemetry.toml, each with its reason.

Its thresholds (rules/telemetry.toml) were never checked against a GPU running known work:
tested on the stand-in's scripted traces only.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpudiag import tomlcompat
from gpudiag.telemetry.sampler import Window

VERDICTS = (
    "idle",
    "compute",
    "memory",
    "nvlink",
    "pcie",
    "latency",
    "throttled",
    "unknown",
    "lost",
)
PIPES = ("tensor", "fp64", "fp32", "fp16")
# nvml.h's clock event reasons that hold the clocks down, by bit, as the verdict names them
LIMITING_REASONS = {
    0x4: "power cap",
    0x8: "HW slowdown",
    0x10: "sync boost",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake",
}
EVENT_NAMES = {0x1: "GPU idle", 0x2: "applications clocks", 0x100: "display clock"}
THRESHOLD_NAMES = (
    "idle_activity",
    "compute_pipe",
    "memory_dram",
    "nvlink",
    "pcie",
    "throttle_clock",
    "straggler_clock_gap",
    "straggler_temperature_gap",
    "straggler_activity_gap",
)
# PCIe per lane and direction after encoding, GB/s (PCI-SIG: 8b/10b to Gen2, 128b/130b on)
PCIE_LANE_GBS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


class ThresholdError(ValueError):
    """A thresholds file that cannot be used; str() is the one-line reason."""


def parse_thresholds(text: str, origin: str) -> dict[str, float]:
    """The thresholds of a telemetry.toml text: every name known, each a number with a
    reason; raises ThresholdError."""
    try:
        data = tomlcompat.loads(text)
    except tomlcompat.TOMLDecodeError as exc:
        raise ThresholdError(f"{origin}: not TOML: {exc}") from None
    table = data.get("threshold")
    if set(data) != {"threshold"} or not isinstance(table, dict):
        raise ThresholdError(f"{origin}: holds one table, [threshold.NAME]")
    unknown = sorted(set(table) - set(THRESHOLD_NAMES))
    missing = sorted(set(THRESHOLD_NAMES) - set(table))
    if unknown or missing:
        raise ThresholdError(f"{origin}: unknown {unknown or '-'}, missing {missing or '-'}")
    out = {}
    for name, entry in table.items():
        value = entry.get("value") if isinstance(entry, dict) else None
        if not isinstance(entry, dict) or set(entry) != {"value", "reason"}:
            raise ThresholdError(f"{origin}: threshold.{name} holds value and reason")
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise ThresholdError(f"{origin}: threshold.{name}.value is not a number >= 0")
        if not str(entry["reason"]).strip():
            raise ThresholdError(f"{origin}: threshold.{name} has no reason")
        out[name] = float(value)
    return out


def thresholds_path() -> Path:
    """The shipped rules/telemetry.toml."""
    import gpudiag.rules

    return Path(gpudiag.rules.__file__).with_name("telemetry.toml")


@functools.lru_cache(maxsize=1)
def shipped_thresholds() -> dict[str, float]:
    """rules/telemetry.toml, parsed once per process."""
    path = thresholds_path()
    return parse_thresholds(path.read_text(encoding="utf-8"), "rules/telemetry.toml")


@dataclass(frozen=True)
class Ceiling:
    """One resource's ceiling: its value and where it comes from."""

    value: float
    unit: str
    source: str  # "STREAM triad on GPU 3", "datasheet (h100-sxm5)"


@dataclass
class Ceilings:
    """A GPU's ceilings: DRAM bytes/s (measured, and the datasheet's, which GPM's DRAM
    share is of), each pipe's reachable share of its peak, NVLink and PCIe bytes/s."""

    dram: Ceiling | None = None
    dram_peak: Ceiling | None = None
    pipes: dict[str, Ceiling] = field(default_factory=dict)  # pipe -> reachable share
    nvlink: Ceiling | None = None
    pcie: Ceiling | None = None


GEMM_PIPE = {"bf16": "tensor", "fp16": "tensor", "tf32": "tensor", "fp64": "fp64"}
GEMM_PEAK = {"bf16": "bf16_tflops", "fp16": "fp16_tflops", "tf32": "tf32_tflops"}


def _positive(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return float(value)


def ceilings_for(
    gpu: int, peaks: Mapping[str, Any], profile: str, kernels: Iterable[Any] = ()
) -> Ceilings:
    """GPU `gpu`'s ceilings: from `kernels` (a snapshot's KernelResults) where they hold
    this GPU's STREAM, GEMM, copy or the node's all-reduce, else from `peaks` (its
    profile's values, named `profile`)."""
    from gpudiag.catalog import device_prefix

    out = Ceilings()
    sheet = f"datasheet ({profile})" if profile else "datasheet"
    bandwidth = _positive(peaks.get("memory_bandwidth_gbs"))
    if bandwidth:
        out.dram_peak = Ceiling(bandwidth * 1e9, "B/s", sheet)
        out.dram = out.dram_peak
    links, per_link = _positive(peaks.get("nvlink_count")), _positive(peaks.get("nvlink_gbs"))
    if links and per_link:
        out.nvlink = Ceiling(links * per_link * 1e9, "B/s", sheet)
    gen, width = _positive(peaks.get("pcie_gen")), _positive(peaks.get("pcie_width"))
    lane = PCIE_LANE_GBS.get(int(gen)) if gen else None
    if lane and width:
        out.pcie = Ceiling(lane * width * 1e9, "B/s", sheet)
    best_stream = 0.0
    for result in kernels:
        stats = getattr(result, "stats", None)
        figure = _positive(getattr(stats, "median", None))
        prefix = device_prefix(str(getattr(result, "device", "")))
        if figure is None or prefix not in (f"gpu.{gpu}.", "node."):
            continue
        kernel, metric = result.kernel, str(result.metric)
        if kernel == "stream" and prefix != "node." and figure > best_stream:
            best_stream = figure
            out.dram = Ceiling(figure * 1e9, "B/s", f"STREAM {metric} on GPU {gpu}")
        elif kernel == "gemm" and metric in GEMM_PIPE:
            peak_field = GEMM_PEAK.get(metric, "fp64_gemm_tflops")
            peak = _positive(peaks.get(peak_field))
            if peak:
                share = min(1.0, figure / peak)
                pipe = GEMM_PIPE[metric]
                known = out.pipes.get(pipe)
                if known is None or share > known.value:
                    out.pipes[pipe] = Ceiling(share, "", f"{metric.upper()} GEMM on GPU {gpu}")
        elif kernel == "allreduce" and metric == "busbw":
            out.nvlink = Ceiling(figure * 1e9, "B/s", "the node's all-reduce bus bandwidth")
        elif kernel == "copy" and metric.startswith("h2d"):
            out.pcie = Ceiling(figure * 1e9, "B/s", f"host-to-device copy on GPU {gpu}")
    return out


@dataclass(frozen=True)
class Verdict:
    """What bounds one GPU in one window."""

    gpu: int
    kind: str  # one of VERDICTS
    detail: str  # the pipe (tensor, fp64, ...), the throttle reason, or why unknown
    shares: dict[str, float]  # resource -> its share of its ceiling
    text: str  # "GPU 3: memory-bound: DRAM 91% of its 2.9 TB/s (STREAM ...), tensor 8%"

    @property
    def word(self) -> str:
        """A short word for a narrow column: idle, tensor, fp64, memory, nvlink, pcie,
        latency, throttle, unknown, LOST."""
        if self.kind == "compute":
            return self.detail
        return {"throttled": "throttle", "lost": "LOST"}.get(self.kind, self.kind)


def _rate(value: float) -> str:
    if value >= 1e12:
        return f"{value / 1e12:.1f} TB/s"
    return f"{value / 1e9:.0f} GB/s" if value >= 1e9 else f"{value / 1e6:.0f} MB/s"


def _pct(share: float) -> str:
    return f"{share * 100:.0f}%"


def _shares(window: Window, ceilings: Ceilings) -> tuple[dict[str, float], dict[str, str]]:
    """Each resource's share of its ceiling, and how to say it."""
    shares: dict[str, float] = {}
    said: dict[str, str] = {}
    for pipe in PIPES:
        active = window.value(pipe)
        if active is None:
            continue
        reach = ceilings.pipes.get(pipe)
        shares[pipe] = active / reach.value if reach else active
        said[pipe] = f"{pipe} {_pct(active)} active" + (
            f" ({_pct(shares[pipe])} of the {reach.source}'s)" if reach else ""
        )
    dram = window.value("dram")
    if dram is not None and ceilings.dram_peak and ceilings.dram:
        moved = dram * ceilings.dram_peak.value
        shares["dram"] = moved / ceilings.dram.value
        said["dram"] = (
            f"DRAM {_pct(shares['dram'])} of its {_rate(ceilings.dram.value)} "
            f"({ceilings.dram.source})"
        )
    elif dram is not None:
        shares["dram"] = dram
        said["dram"] = f"DRAM {_pct(dram)} of its theoretical bandwidth (no ceiling known)"
    elif window.value("mem_busy") is not None:
        busy = float(window.value("mem_busy") or 0.0)
        shares["dram"] = busy
        said["dram"] = f"DRAM busy {_pct(busy)} of the time (no GPM: no bandwidth)"
    for link, ceiling in (("nvlink", ceilings.nvlink), ("pcie", ceilings.pcie)):
        tx, rx = window.value(f"{link}_tx"), window.value(f"{link}_rx")
        if tx is None and rx is None:
            continue
        moved = max(tx or 0.0, rx or 0.0)
        name = "NVLink" if link == "nvlink" else "PCIe"
        if ceiling is None:
            said[link] = f"{name} {_rate(moved)} (no ceiling known)"
            continue
        shares[link] = moved / ceiling.value
        said[link] = f"{name} {_pct(shares[link])} of its {_rate(ceiling.value)} ({ceiling.source})"
    return shares, said


SHORT = {"dram": "DRAM", "nvlink": "NVLink", "pcie": "PCIe"}


def _others(shares: Mapping[str, float], shown: str, lead: str = ", ") -> str:
    """The other resources' shares, busiest first (the three busiest, 1% and up)."""
    rest = sorted(
        (
            (v, k)
            for k, v in shares.items()
            if k != shown and v >= 0.01 and (k in SHORT or k in PIPES)
        ),
        reverse=True,
    )
    parts = [f"{SHORT.get(k, k)} {_pct(v)}" for v, k in rest[:3] if v >= 0.01]
    return lead + ", ".join(parts) if parts else ""


def limiting_reasons(mask: int | None) -> list[str]:
    """The clock event reasons in `mask` that hold the clocks down."""
    if not mask:
        return []
    return [name for bit, name in LIMITING_REASONS.items() if mask & bit]


def classify(
    window: Window, ceilings: Ceilings, limits: Mapping[str, float] | None = None
) -> Verdict:
    """The verdict of one GPU's window."""
    limits = limits or shipped_thresholds()
    gpu = window.gpu
    if window.lost:
        return Verdict(gpu, "lost", "GpuIsLost", {}, f"GPU {gpu}: LOST: it does not answer")
    if window.held:
        why = window.why.get("sm_active", "held by another profiler")
        return Verdict(gpu, "unknown", why, {}, f"GPU {gpu}: UNKNOWN: {why}")
    shares, said = _shares(window, ceilings)
    activity = window.value("gr_active")
    if activity is None:
        activity = window.value("sm_active")
    if activity is None:
        why = window.why.get("gr_active") or "no activity counter answered"
        return Verdict(gpu, "unknown", why, shares, f"GPU {gpu}: UNKNOWN: {why}")
    tail = _others(shares, "", ": ")
    if activity < limits["idle_activity"]:
        return Verdict(gpu, "idle", "", shares, f"GPU {gpu}: idle: active {_pct(activity)}")
    reasons = limiting_reasons(window.event_mask)
    clock, top = window.sm_clock_mhz, window.max_sm_clock_mhz
    if reasons and clock is not None and top and clock < limits["throttle_clock"] * top:
        reason = " + ".join(reasons)
        power = ""
        if window.power_w is not None and window.power_limit_w:
            power = f", {window.power_w:.0f} of {window.power_limit_w:.0f} W"
        text = f"GPU {gpu}: throttled: {reason} at {clock:,.0f} of {top:,.0f} MHz{power}{tail}"
        return Verdict(gpu, "throttled", reason, shares, text)
    over = {
        name: share / limits[bound]
        for name, share in shares.items()
        if (
            bound := {"dram": "memory_dram", "nvlink": "nvlink", "pcie": "pcie"}.get(
                name, "compute_pipe"
            )
        )
        and share >= limits[bound]
    }
    if over:
        top_name = max(over, key=lambda n: over[n])
        kind = {"dram": "memory", "nvlink": "nvlink", "pcie": "pcie"}.get(top_name, "compute")
        detail = top_name if kind == "compute" else ""
        label = {
            "memory": "memory-bound",
            "nvlink": "NVLink-bound",
            "pcie": "PCIe-bound",
            "compute": f"compute-bound ({top_name} pipe)",
        }[kind]
        text = f"GPU {gpu}: {label}: {said.get(top_name, '')}{_others(shares, top_name)}"
        return Verdict(gpu, kind, detail, shares, text)
    if not any(k in shares for k in PIPES):  # busy, but which pipe cannot be told
        why = "busy; its pipe counters unsupported" + (
            " (no GPM on this GPU)" if window.source != "gpm" else ""
        )
        return Verdict(gpu, "unknown", why, shares, f"GPU {gpu}: UNKNOWN: {why}{tail}")
    text = (
        f"GPU {gpu}: latency-bound: active {_pct(activity)} with no pipe, DRAM or link "
        f"near its ceiling{tail}"
    )
    return Verdict(gpu, "latency", "", shares, text)


@dataclass(frozen=True)
class Straggler:
    """A GPU that holds the others, and why."""

    gpu: int
    text: str


WAITING = ("nvlink", "pcie", "latency")


def stragglers(
    windows: Sequence[Window],
    verdicts: Sequence[Verdict],
    limits: Mapping[str, float] | None = None,
) -> list[Straggler]:
    """The GPUs whose clocks or temperature stand apart from their peers' while the peers
    wait: most of them NVLink-, PCIe- or latency-bound, their SM activity below the
    straggler's by the threshold's gap."""
    limits = limits or shipped_thresholds()
    kinds = {v.gpu: v.kind for v in verdicts}
    live = [w for w in windows if not w.lost and not w.held]
    if len(live) < 3:
        return []
    found = []
    for window in live:
        peers = [w for w in live if w is not window]
        if sum(kinds.get(w.gpu) in WAITING for w in peers) * 2 <= len(peers):
            continue  # the others do not wait: they have their own work
        mine = window.value("sm_active")
        theirs = [v for w in peers if (v := w.value("sm_active")) is not None]
        if mine is None or not theirs:
            continue
        waiting = statistics.median(theirs)
        if mine - waiting < limits["straggler_activity_gap"]:
            continue  # the others do not wait on it
        why = _stands_apart(window, peers, limits)
        if why:
            found.append(
                Straggler(
                    window.gpu,
                    f"GPU {window.gpu} holds the others: {why}; its SMs {_pct(mine)} active "
                    f"while the others' {_pct(waiting)}",
                )
            )
    return found


def _stands_apart(window: Window, peers: Sequence[Window], limits: Mapping[str, float]) -> str:
    """Why a GPU stands apart from its peers (its clock or temperature), '' if it does not."""
    clocks = [c for w in peers if (c := w.sm_clock_mhz) is not None]
    clock = window.sm_clock_mhz
    if clocks and clock is not None:
        usual = statistics.median(clocks)
        if clock < usual * (1 - limits["straggler_clock_gap"]):
            reasons = " + ".join(limiting_reasons(window.event_mask)) or "clocks held"
            top = window.max_sm_clock_mhz or usual
            return f"{reasons} at {clock:,.0f} of {top:,.0f} MHz (peers {usual:,.0f} MHz)"
    temps = [t for w in peers if (t := w.temperature_c) is not None]
    temp = window.temperature_c
    if temps and temp is not None:
        usual = statistics.median(temps)
        if temp - usual >= limits["straggler_temperature_gap"]:
            return f"{temp:.0f} C, {temp - usual:.0f} C above its peers' {usual:.0f} C"
    return ""
