"""Kernel results as readings, so that rules judge them like any other fact.

The snapshot keeps the results (samples and statistics); these readings are derived from
them whenever findings are computed, never stored twice. Keys, per device:

    gpu.N.kernel.stream.triad.fp64      GB/s   (the median; numa.N.kernel... for a NUMA
    gpu.N.kernel.gemm.bf16              TFLOP/s  node's CPUs, host.kernel... for all CPUs)
    gpu.N.kernel.<...>.ci_low, .ci_high the ends of the median's 95% interval: the KRN
                                        thresholds judge these, not the median
    gpu.N.kernel.<...>.verdict          below / inconclusive / above the KRN005-008
                                        threshold (THRESHOLDS: factor x profile field):
                                        below when ci_high is under it, above when ci_low
                                        is not, inconclusive between (reason: the numbers)
    gpu.N.kernel.copy.h2d.local         GB/s
    gpu.N.kernel.burn.mismatches        count, and burn.nans, burn.gflops
    node.kernel.allreduce.busbw         GB/s: NCCL all-reduce of the largest size across
                                        the GPUs (busbw.<bytes>, algbw.<bytes> per size);
    node.kernel.allreduce.busbw.share_of_nvlink   over the profile's NVLink bandwidth
    gpu.N.kernel.verified               false when any result of the device failed its check
    gpu.N.kernel.timing_consistent      false when a figure of the device cannot be true
                                        (`inconsistent`: above the model's physical peak,
                                        or event time against the wall clock): a
                                        measurement problem, not a GPU fault
    gpu.N.kernel.burn.unreproduced      burn mismatches gone at the synchronised re-compare
    gpu.N.kernel.burn.gpu_error         a CUDA error of the GPU's during the burn (KRN025)
    gpu.N.kernel.<...>.clocks           what the GPU ran the figure at (kernels/conditions.py
                                        clock_state): full, power-capped, thermal,
                                        hw-slowdown or clock-setting; reason: the cause in
                                        words and what to do. KRN005-008/KRN016 judge
                                        only a figure at full clocks
    gpu.N.kernel.held_back              how many figures below their band floor were held
                                        back by their conditions (KRN024), and why
    gpu.N.kernel.<...>.share_of_median  the device's figure over the median of all devices
                                        of its kind that measured the same metric (2 or more)
    topo.gpu.I.J.copy_gbs               one-way peer copy I -> J (and copy_bidir_gbs,
    topo.gpu.I.J.copy_share_of_median   copy_latency_us, peer_access); the share is of
                                        the pairs with the same link type (NV18, SYS, ...)
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping

from gpudiag import catalog
from gpudiag.catalog import device_prefix, metric_key
from gpudiag.model import KernelResult, ProbeStatus, Reading, ReadingStatus
from gpudiag.record import replace

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import Any


def _figures(stem: str) -> tuple[catalog.Declared, ...]:
    """A device's kernel figures under `stem` and what is derived from each."""
    return (
        catalog.volatile(f"{stem}.kernel.{{metric}}", "*", "a kernel's median"),
        catalog.volatile(f"{stem}.kernel.{{metric}}.ci_low", "*", "its 95% interval's low end"),
        catalog.volatile(f"{stem}.kernel.{{metric}}.ci_high", "*", "its 95% interval's high end"),
        catalog.volatile(f"{stem}.kernel.{{metric}}.share_of_median", "", "over the peers' median"),
        catalog.volatile(f"{stem}.kernel.verified", "", "false when a result failed its check"),
    )


# the readings derived from kernel results (gpudiag/catalog.py)
READINGS = (
    *catalog.declare(
        "GPU",
        *_figures("gpu.{gpu}"),
        catalog.volatile("gpu.{gpu}.kernel.{metric}.share_of_peak", "", "over the model's peak"),
        catalog.volatile("gpu.{gpu}.kernel.{metric}.verdict", "", "below/inconclusive/above"),
        catalog.volatile(
            "gpu.{gpu}.kernel.timing_consistent", "", "false when a figure cannot be true"
        ),
        catalog.volatile(
            "gpu.{gpu}.kernel.{metric}.clocks", "", "full / power-capped / thermal / ..."
        ),
        catalog.volatile("gpu.{gpu}.kernel.held_back", "", "slow figures held back by clocks"),
    ),
    *catalog.declare(
        "Kernel results",
        *_figures("numa.{node}"),
        catalog.volatile(
            "numa.{node}.kernel.{metric}.verdict", "", "below/inconclusive/above the CPU's band"
        ),
    ),
    *catalog.declare("Kernel results", *_figures("host")),
    *catalog.declare(
        "Kernel results",
        *_figures("node"),
        catalog.volatile("node.kernel.{metric}.share_of_nvlink", "", "busbw over NVLink"),
    ),
    *catalog.declare(
        "GPU topology",
        catalog.volatile("topo.gpu.{gpu}.{peer}.copy_gbs", "GB/s", "one-way peer copy"),
        catalog.volatile("topo.gpu.{gpu}.{peer}.copy_bidir_gbs", "GB/s", "both ways at once"),
        catalog.volatile("topo.gpu.{gpu}.{peer}.copy_latency_us", "us", "peer copy latency"),
        catalog.volatile("topo.gpu.{gpu}.{peer}.copy_share_of_median", "", "of its link type"),
        catalog.volatile("topo.gpu.{gpu}.{peer}.peer_access", "", "CUDA peer access"),
    ),
)


# A figure more than this share above the physical bound cannot be true.
IMPOSSIBLE_MARGIN = 0.05
TIMING_INCONSISTENT = "timing inconsistent"
# The profile fields a GEMM precision can reach: the highest is its bound (cuBLAS's FP64
# GEMM runs on the FP64 tensor cores where a model has them: the H100's 67, not its 34)
GEMM_PEAKS = {
    "fp64": ("fp64_tflops", "fp64_tensor_tflops"),
    "fp32": ("fp32_tflops",),
    "tf32": ("tf32_tflops",),
    "fp16": ("fp16_tflops",),
    "bf16": ("bf16_tflops",),
}
# PCIe GB/s per lane and direction, by generation (line rate after encoding)
PCIE_LANE_GBS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.877}
# NVLink-C2C between a Grace and its GPU (gpu.N.c2c.enabled): 900 GB/s both ways, 450 a
# direction (NVIDIA's GH200 and GB200 NVL72 datasheets: "NVLink-C2C 900 GB/s"); a host copy
# of a C2C GPU goes over it, not over the GPU's PCIe link
C2C_GBS = 450.0
C2C_TEXT = "its NVLink-C2C (450 GB/s a direction, 900 both ways: NVIDIA's GH200/GB200 datasheets)"


def _number(peaks: Mapping[str, Any], field: str) -> float | None:
    value = peaks.get(field)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return float(value)


def _pcie_gbs(peaks: Mapping[str, Any]) -> float | None:
    gen, width = _number(peaks, "pcie_gen"), _number(peaks, "pcie_width")
    lane = PCIE_LANE_GBS.get(int(gen)) if gen else None
    return lane * width if lane and width else None


# nvidia-smi topo -m's words for a GPU pair joined through PCIe (and the CPUs), not NVLink
PCIE_PATHS = {"PIX", "PXB", "PHB", "NODE", "SYS", "SOC"}


def _nvlink_per_link(peaks: Mapping[str, Any]) -> tuple[float, str] | None:
    """One NVLink's GB/s in one direction: the higher of what nvidia-smi prints
    (nvlink_gbs) and the link's line rate (nvlink_line_gbs, 53.125 on a B200 that prints
    50), as a copy can reach up to either; None where the profile has neither."""
    found = [(v, f) for f in ("nvlink_gbs", "nvlink_line_gbs") if (v := _number(peaks, f))]
    return max(found) if found else None


def physical_bound(
    kernel: str,
    metric: str,
    peaks: Mapping[str, Any],
    link: str | None = None,
    c2c: bool = False,
) -> tuple[float, str] | None:
    """The highest figure a GPU result can reach on the model (`peaks`: its profile), and
    what it is; None where the profile does not say. GEMM: the precision's highest peak;
    STREAM: the memory bandwidth; a host copy: its PCIe link, or the NVLink-C2C of a GPU
    whose host link it is (`c2c`, whatever the profile); a peer copy: the link the
    node says the pair has (`link`, topo.gpu.I.J: NV12 is 12 NVLinks, an NVLink bridge's
    too; PIX or SYS its PCIe link), else the model's NVLinks (or PCIe without them); both
    ways at once: twice the one-way bound."""
    both = 2.0 if metric.startswith("bidir.") else 1.0
    if kernel == "gemm" and metric in GEMM_PEAKS:
        found = [(v, f) for f in GEMM_PEAKS[metric] if (v := _number(peaks, f)) is not None]
        if not found:
            return None
        value, field = max(found)
        return value, f"the model's highest {metric.upper()} peak ({field} {value:g} TFLOP/s)"
    if kernel == "stream":
        value = _number(peaks, "memory_bandwidth_gbs")
        return (value, f"the model's memory bandwidth ({value:g} GB/s)") if value else None
    ways = " both ways" if both > 1 else ""
    pcie = _pcie_gbs(peaks)
    pcie_text = (
        f"its PCIe link (Gen{peaks.get('pcie_gen')} x{peaks.get('pcie_width')}{ways}, "
        f"{both * pcie:.4g} GB/s)"
        if pcie
        else ""
    )
    if kernel == "copy" and metric.split(".")[0] in ("h2d", "d2h", "bidir"):
        if c2c:
            return both * C2C_GBS, C2C_TEXT
        return (both * pcie, pcie_text) if pcie else None
    if kernel == "peer" and metric.startswith(("to.", "bidir.")):
        nv = re.fullmatch(r"NV(\d+)", link or "")
        if link in PCIE_PATHS:
            return (both * pcie, f"{link}: {pcie_text}") if pcie else None
        per_link = _nvlink_per_link(peaks)
        links = float(nv.group(1)) if nv else _number(peaks, "nvlink_count")
        if links and per_link:
            value = both * links * per_link[0]
            named = f"its {link} NVLinks" if nv else "its NVLinks"
            rate = " line rate" if per_link[1] == "nvlink_line_gbs" else ""
            return value, (
                f"{named} ({links:g} x {per_link[0]:g} GB/s{rate}{ways}, {value:.4g} GB/s)"
            )
        # a link count nobody gave (a PCIe card that may have an NVLink bridge): no bound
        return (both * pcie, pcie_text) if pcie and not nv and per_link is None else None
    return None


def impossible(
    result: KernelResult, peaks: Mapping[str, Any], link: str | None = None, c2c: bool = False
) -> str:
    """Why an OK GPU result's figure (its median) cannot be true: more than 5% above the
    physical bound of the model (physical_bound; `link`: a peer pair's topo.gpu.I.J; `c2c`:
    the GPU's host link is NVLink-C2C), as "timing inconsistent: ..."; "" where it can be,
    or nothing says."""
    if result.status is not ProbeStatus.OK or not result.device.startswith("gpu"):
        return ""
    bound = physical_bound(result.kernel, result.metric, peaks, link, c2c)
    if bound is None or not result.samples:
        return ""
    figure = result.stats.median if result.stats is not None else max(result.samples)
    limit, what = bound
    if figure <= limit * (1 + IMPOSSIBLE_MARGIN):
        return ""
    return (
        f"{TIMING_INCONSISTENT}: {result.kernel} {result.metric} {figure:.4g} {result.unit} is "
        f"above {what} by more than {IMPOSSIBLE_MARGIN:.0%}: a measurement problem (the "
        "timing missed the work), not a GPU figure"
    )


def judged(
    result: KernelResult, peaks: Mapping[str, Any], link: str | None = None, c2c: bool = False
) -> KernelResult:
    """The result, or an error result where its figure cannot be true (impossible)."""
    reason = impossible(result, peaks, link, c2c)
    if not reason:
        return result
    return replace(result, status=ProbeStatus.ERROR, stats=None, error=reason)


def _impossible_result(result: KernelResult) -> bool:
    """A result made an error because its figure cannot be true (judged)."""
    return result.status is ProbeStatus.ERROR and result.error.startswith(TIMING_INCONSISTENT)


# what is derived from a figure, and judged by a rule: the interval's ends (KRN005-008),
# the verdict (KRN018-021), the shares of the peers' median (KRN009/KRN010) and the peak
JUDGED_ENDS = ("ci_low", "ci_high", "verdict", "share_of_median", "share_of_peak")


def _cannot_judge(key: str, result: KernelResult) -> dict[str, Reading]:
    """A figure that cannot be true (KRN022) leaves the readings the rules judge it by
    failed, with KRN022 as the reason: those rules are UNKNOWN, never silently passed."""
    source = f"kernel:{result.kernel} {result.device} {result.metric}"
    reason = f"KRN022: {result.error}"[:300]
    unit = {"ci_low": result.unit, "ci_high": result.unit}
    return {
        f"{key}.{end}": Reading.failed(
            f"{key}.{end}", ReadingStatus.ERROR, reason, source, unit.get(end, "")
        )
        for end in JUDGED_ENDS
    }


def _reading(key: str, result: KernelResult) -> Reading:
    source = f"kernel:{result.kernel} {result.device} {result.metric}"
    if result.status is ProbeStatus.SKIPPED:
        return Reading.failed(key, ReadingStatus.UNSUPPORTED, result.error, source, result.unit)
    if result.status is not ProbeStatus.OK:
        reason = f"{result.status.value}: {result.error}".rstrip(": ")
        return Reading.failed(key, ReadingStatus.ERROR, reason, source, result.unit)
    if result.stats is not None:
        value = round(result.stats.median, 6)
    elif result.samples:
        value = result.samples[0]
    else:
        return Reading.failed(key, ReadingStatus.MISSING, "no samples", source, result.unit)
    if result.unit == "count":
        value = int(value)
    note = str(dict(result.params).get("note", ""))  # a burn's kind of fault (kernels/burn.py)
    return Reading(key, value, result.unit, source, reason=note)


def kernel_readings(
    kernels: Iterable[KernelResult],
    readings: Mapping[str, Reading],
    peaks: Mapping[str, Any] | None = None,
) -> list[Reading]:
    """The readings derived from kernel results (see the module docstring); `readings` are
    the node's others (the GPU-pair link types group the peer figures); `peaks` the GPU
    model's profile values, for each GPU figure's share of its peak."""
    derived: dict[str, Reading] = {}
    intervals: dict[str, Reading] = {}
    verified: dict[str, bool] = {}
    consistent: dict[str, tuple[bool, str]] = {}
    clocks: dict[str, Reading] = {}
    peers: dict[str, list[tuple[str, Reading]]] = defaultdict(list)
    for result in kernels:
        prefix = device_prefix(result.device)
        if prefix is None:
            continue
        pair = catalog.peer_pair(result)
        link = _value(readings.get(pair), None) if pair is not None else None
        c2c = _value(readings.get(f"{prefix}c2c.enabled"), False) is True
        # an old snapshot's impossible figure too; a peer copy by the pair's own link, a
        # host copy of a C2C GPU by its NVLink-C2C
        result = judged(result, peaks or {}, link if isinstance(link, str) else None, c2c)
        failed = result.status is ProbeStatus.ERROR and "verification failed" in result.error
        verified[prefix] = verified.get(prefix, True) and not failed
        if prefix.startswith("gpu."):
            bad = _impossible_result(result)
            before = consistent.get(prefix, (True, ""))
            consistent[prefix] = (False, before[1] or result.error) if bad else before
        if pair is not None:
            reading = _reading(str(catalog.kernel_key(result)), result)
            derived[reading.key] = reading
            access = dict(result.params).get("peer_access")
            if access is not None:
                derived[f"{pair}.peer_access"] = Reading(
                    f"{pair}.peer_access", str(access), source=reading.source
                )
            if result.metric.startswith("to."):
                peers[str(_value(readings.get(pair), "any"))].append((pair, reading))
                if _impossible_result(result):  # KRN013 cannot judge it: UNKNOWN, says why
                    key = f"{pair}.copy_share_of_median"
                    intervals[key] = Reading.failed(
                        key, ReadingStatus.ERROR, f"KRN022: {result.error}"[:300], reading.source
                    )
            continue
        reading = _reading(f"{prefix}kernel.{metric_key(result)}", result)
        derived[reading.key] = reading
        if reading.ok and prefix.startswith("gpu.") and result.kernel != "burn":
            clock = _clock_reading(reading.key, result, peaks or {})
            if clock is not None:
                clocks[clock.key] = clock
        if _impossible_result(result):
            intervals.update(_cannot_judge(reading.key, result))
        if reading.ok and result.stats is not None:
            for end, value in (
                ("ci_low", result.stats.ci95_low),
                ("ci_high", result.stats.ci95_high),
            ):
                key = f"{reading.key}.{end}"
                intervals[key] = Reading(key, round(value, 6), result.unit, reading.source)
    for prefix, ok in verified.items():
        derived[f"{prefix}kernel.verified"] = Reading(
            f"{prefix}kernel.verified", ok, source="kernel results' checks"
        )
    for prefix, (ok, why) in consistent.items():
        key = f"{prefix}kernel.timing_consistent"
        derived[key] = Reading(key, ok, source="kernel figures against the model and the clock")
        if not ok:
            derived[key] = replace(derived[key], reason=why[:300])
    derived.update(_peak_shares(derived.values(), peaks or {}))
    derived.update(_nvlink_share(derived.get("node.kernel.allreduce.busbw"), peaks or {}))
    c2c_gpus = {
        prefix for prefix in verified if _value(readings.get(f"{prefix}c2c.enabled"), False) is True
    }
    derived.update(_shares(derived.values(), c2c_gpus))
    derived.update(_c2c_shares(derived, c2c_gpus))
    derived.update(clocks)
    for group in peers.values():
        derived.update(_pair_shares(group))
    derived.update(intervals)  # after the shares: an interval's end is no figure of its own
    derived.update(_verdicts(intervals, peaks or {}))
    derived.update(_held_back(clocks, derived))
    return list(derived.values())


def _clock_reading(key: str, result: KernelResult, peaks: Mapping[str, Any]) -> Reading | None:
    """What the GPU ran `result` at (kernels/conditions.py clock_state), where its
    conditions were recorded."""
    from gpudiag.kernels.conditions import clock_state

    gpu = result.device.removeprefix("gpu")
    state = clock_state(dict(result.params), _number(peaks, "power_limit_w"), gpu)
    if state is None:
        return None
    source = f"kernel:{result.kernel} {result.device} {result.metric} conditions"
    return Reading(f"{key}.clocks", state[0], source=source, reason=state[1][:300])


def _held_back(clocks: Mapping[str, Reading], derived: Mapping[str, Reading]) -> dict[str, Reading]:
    """Per GPU: the figures below their band floor (verdict below) whose GPU was held back
    (clocks not full), with each one's cause; 0 where none was (KRN024)."""
    counts: dict[str, list[str]] = {}
    for key, reading in clocks.items():
        figure = key.removesuffix(".clocks")
        prefix = figure.split(".kernel.")[0]
        held = counts.setdefault(prefix, [])
        verdict = derived.get(f"{figure}.verdict")
        if reading.value != "full" and verdict is not None and verdict.value == "below":
            metric = figure.split(".kernel.")[1]
            held.append(f"{metric} {reading.value}: {reading.reason}")
    out = {}
    for prefix, held in counts.items():
        key = f"{prefix}.kernel.held_back"
        out[key] = Reading(
            key,
            len(held),
            source="kernel figures' verdicts and conditions",
            reason="; ".join(held)[:600],
        )
    return out


# metric -> (factor, profile field): the thresholds of KRN005-008 (rules/kernels.toml;
# tests/test_kernel_plan.py checks that the two agree)
THRESHOLDS = {
    "stream.triad.fp64": (1.0, "stream_triad_floor_gbs"),  # the model's band floors
    "stream.triad.fp32": (1.0, "stream_triad_floor_gbs"),  # (rules/profiles.toml)
    "gemm.fp64": (1.0, "gemm_fp64_floor_tflops"),
    "gemm.fp16": (1.0, "gemm_fp16_floor_tflops"),
    "gemm.bf16": (1.0, "gemm_bf16_floor_tflops"),  # KRN016 judges its median
}


def _verdicts(intervals: Mapping[str, Reading], peaks: Mapping[str, Any]) -> dict[str, Reading]:
    """Each GPU figure with a KRN threshold, judged by its 95% interval: below only when
    the upper end is under the threshold, above only when the lower end is not, else
    inconclusive; the reason gives the interval and the threshold."""
    verdicts = {}
    for key, high in intervals.items():
        m = re.match(r"^(gpu\.\d+\.kernel\.(.+))\.ci_high$", key)
        low = intervals.get(f"{m.group(1)}.ci_low") if m else None
        factor, field = THRESHOLDS.get(m.group(2), (0.0, "")) if m else (0.0, "")  # factor 1
        peak = peaks.get(field)
        if m is None or low is None or not (high.ok and low.ok):
            continue  # a figure that cannot be true has its verdict failed (KRN022)
        if not isinstance(peak, int | float) or peak <= 0:
            continue
        threshold = factor * float(peak)
        hi, lo = float(high.value), float(low.value)  # type: ignore[arg-type]
        verdict = "below" if hi < threshold else "above" if lo >= threshold else "inconclusive"
        verdicts[f"{m.group(1)}.verdict"] = Reading(
            f"{m.group(1)}.verdict",
            verdict,
            source=f"{m.group(1)} 95% interval / profile {field} ({peak:g})",
            reason=(
                f"the 95% interval {lo:.6g}-{hi:.6g} {high.unit} against the threshold "
                f"{threshold:.6g} {high.unit} (profile {field})"
            ),
        )
    return verdicts


PEAK_FIELDS = {
    "stream.triad.fp64": ("memory_bandwidth_gbs",),
    "stream.triad.fp32": ("memory_bandwidth_gbs",),
    **{f"gemm.{p}": fields for p, fields in GEMM_PEAKS.items()},
}


def _peak_shares(readings: Iterable[Reading], peaks: Mapping[str, Any]) -> dict[str, Reading]:
    """A GPU's triad and GEMM figures over the model's datasheet peak (a GEMM's: the
    highest its precision can reach, the FP64 tensor cores' for FP64 where there are)."""
    shares = {}
    for reading in list(readings):
        m = re.match(r"^gpu\.\d+\.kernel\.(.+)$", reading.key)
        found = [
            (value, field)
            for field in (PEAK_FIELDS.get(m.group(1), ()) if m else ())
            if (value := _number(peaks, field)) is not None
        ]
        peak, field = max(found) if found else (None, "")
        if reading.ok and peak is not None:
            key = f"{reading.key}.share_of_peak"
            value = round(float(reading.value) / peak, 4)  # type: ignore[arg-type]
            shares[key] = Reading(key, value, "", f"{reading.key} / profile {field} ({peak})")
    return shares


def _nvlink_share(busbw: Reading | None, peaks: Mapping[str, Any]) -> dict[str, Reading]:
    """All-reduce bus bandwidth over a GPU's NVLink bandwidth in one direction (the
    profile's links times each link's GB/s): busbw is defined to be comparable with it."""
    links, per_link = peaks.get("nvlink_count"), peaks.get("nvlink_gbs")
    if busbw is None or not busbw.ok or not links or not per_link:
        return {}
    total = float(links) * float(per_link)
    key = f"{busbw.key}.share_of_nvlink"
    value = round(float(busbw.value) / total, 4)  # type: ignore[arg-type]
    source = f"{busbw.key} / (profile nvlink_count {links} x nvlink_gbs {per_link})"
    return {key: Reading(key, value, "", source)}


def _value(reading: Reading | None, default: object) -> object:
    return reading.value if reading is not None and reading.ok else default


def _median_shares(members: list[tuple[str, Reading]], of_what: str = "") -> dict[str, Reading]:
    """Each (key to write, reading) pair's value over the median of all of them, where two
    or more were read and the median is positive."""
    ok = [(key, r) for key, r in members if r.ok]
    if len(ok) < 2:
        return {}
    import statistics  # loaded where a kernel figure is compared with its peers

    median = statistics.median(float(r.value) for _, r in ok)  # type: ignore[arg-type]
    if median <= 0:
        return {}
    return {
        key: Reading(
            key,
            round(float(r.value) / median, 4),  # type: ignore[arg-type]
            "",
            f"{r.key} / median of {len(ok)}{of_what} ({median:.4g} {r.unit})",
        )
        for key, r in ok
    }


def _shares(
    readings: Iterable[Reading], c2c_gpus: Collection[str] = frozenset()
) -> dict[str, Reading]:
    """Each device's figure over the median of its peers' for the same metric; a host
    copy of a GPU over NVLink-C2C (`c2c_gpus`: 'gpu.N.' prefixes) among the C2C GPUs only,
    others' among the others (a PCIe link and NVLink-C2C are no peers)."""
    groups: dict[tuple[str, str, bool], list[tuple[str, Reading]]] = defaultdict(list)
    for reading in readings:
        m = re.match(r"^((gpu|numa)\.\d+\.)kernel\.(.+)$", reading.key)
        if m and reading.ok and reading.unit in ("GB/s", "TFLOP/s"):
            host_link = m.group(3).startswith("copy.") and m.group(1) in c2c_gpus
            groups[(m.group(2), m.group(3), host_link)].append(
                (f"{reading.key}.share_of_median", reading)
            )
    shares: dict[str, Reading] = {}
    for members in groups.values():
        shares.update(_median_shares(members))
    return shares


def _c2c_shares(derived: Mapping[str, Reading], c2c_gpus: set[str]) -> dict[str, Reading]:
    """gpu.N.kernel.copy.c2c.share_of_median for each GPU over NVLink-C2C whose host
    copies were compared with the node's other C2C GPUs': the lower of its host-to-device
    and device-to-host shares (its own NUMA node's memory), saying which (KRN027)."""
    out = {}
    for prefix in sorted(c2c_gpus):
        shares = [
            (r.value, direction, r)
            for direction in ("h2d", "d2h")
            if (r := derived.get(f"{prefix}kernel.copy.{direction}.local.share_of_median"))
            is not None
            and r.ok
        ]
        if not shares:
            continue
        value, direction, lowest = min(shares, key=lambda s: float(s[0]))  # type: ignore[arg-type]
        key = f"{prefix}kernel.copy.c2c.share_of_median"
        reason = f"{direction} over NVLink-C2C: {lowest.source}"
        out[key] = Reading(key, value, "", lowest.source, reason=reason)
    return out


def _pair_shares(group: list[tuple[str, Reading]]) -> dict[str, Reading]:
    """Each GPU pair's one-way copy over the median of the pairs of its link type."""
    members = [(f"{pair}.copy_share_of_median", r) for pair, r in group]
    return _median_shares(members, " pairs of its link type")


# the CPU STREAM figure judged against a CPU profile's band (KRN026): FP64, as STREAM's
GRACE_PART = "0xd4f"  # MIDR_EL1 part of Grace's Arm Neoverse V2 cores (probes/rackscale.py)
_CPU_TRIAD = re.compile(r"^cpu-numa(\d+)$")


def cpu_band_readings(
    kernels: Iterable[KernelResult], readings: Mapping[str, Reading], profiles: Mapping[str, Any]
) -> list[Reading]:
    """numa.N.kernel.stream.triad.fp64.verdict for each NUMA node of a Grace node whose
    CPUs ran STREAM: below / inconclusive / above the CPU profile's band floor
    (gpudiag/profiles.py cpu_profile: the Grace's memory size and GPUs on its node), by the
    95% interval as the GPUs' verdicts; an error where the median is above the Grace's
    theoretical peak (cannot be a memory figure), unsupported where no band is published
    for the Grace or the figure is not comparable with STREAM's (NumPy's two-pass triad).
    No reading on a node that is not Grace: KRN026 does not apply there."""
    from gpudiag.profiles import cpu_profile

    grace = readings.get("grace.cpu")
    if grace is None or not grace.ok or grace.value is not True:
        return []
    out = []
    for result in kernels:
        m = _CPU_TRIAD.match(result.device)
        params = dict(result.params)
        if (
            m is None
            or result.kernel != "stream"
            or result.metric != "triad"
            or params.get("dtype", "fp64") != "fp64"
            or result.status is not ProbeStatus.OK
            or result.stats is None
        ):
            continue
        node = int(m.group(1))
        key = f"numa.{node}.kernel.stream.triad.fp64.verdict"
        source = f"kernel:stream {result.device} triad / CPU profile band (rules/profiles.toml)"
        kib = _value(readings.get(f"numa.{node}.mem_total"), None)
        gpus = _gpus_on_node(readings, node)
        memory_gb = float(kib) * 1024 / 1e9 if isinstance(kib, int | float) else 0.0
        profile = cpu_profile(dict(profiles), GRACE_PART, memory_gb, gpus)
        if profile is None or "stream_triad_floor_gbs" not in profile.values:
            why = (
                f"no STREAM band published for a Grace with {memory_gb:.0f} GB and {gpus} "
                "GPU(s) on its node (NVIDIA's Grace benchmarking guide lists Grace Hopper "
                "120 and 480 GB and the Grace CPU Superchip): judged against the node's other "
                "NUMA nodes (KRN015)"
            )
            out.append(Reading.failed(key, ReadingStatus.UNSUPPORTED, why, source))
            continue
        if params.get("engine") != "numba":
            why = (
                f"the {params.get('engine', 'unknown')} engine ran the triad: NumPy moves its "
                "bytes in two passes, not comparable with STREAM's published figure "
                "(pip install 'gpudiag[cpu-kernels]' for the compiled loops)"
            )
            out.append(Reading.failed(key, ReadingStatus.UNSUPPORTED, why, source))
            continue
        peak = float(profile.values["memory_bandwidth_gbs"])
        floor = float(profile.values["stream_triad_floor_gbs"])
        median, low, high = result.stats.median, result.stats.ci95_low, result.stats.ci95_high
        if median > peak:
            why = (
                f"the triad's {median:.4g} GB/s is above the theoretical peak {peak:g} GB/s "
                f"of profile {profile.name} (NVIDIA's Grace CPU Benchmarking Guide): "
                "cache-resident arrays or a timing fault, not a memory figure"
            )
            out.append(Reading.failed(key, ReadingStatus.ERROR, why, source))
            continue
        verdict = "below" if high < floor else "above" if low >= floor else "inconclusive"
        size = params.get("n")
        arrays = f"; this run: {int(size):,}" if isinstance(size, int | float) else ""
        reason = (
            f"the 95% interval {low:.6g}-{high:.6g} GB/s against the band floor {floor:g} "
            f"GB/s of profile {profile.name} ({floor / peak:.2g} x its {peak:g} GB/s peak: "
            "NVIDIA's Grace CPU Benchmarking Guide, STREAM Reference Results, 120,000,000 "
            f"doubles an array per 72 cores{arrays})"
        )
        out.append(Reading(key, verdict, source=source, reason=reason))
    return out


def _gpus_on_node(readings: Mapping[str, Reading], node: int) -> int:
    """How many GPUs' PCI functions sysfs places on this NUMA node."""
    count = 0
    for key, reading in readings.items():
        if key.endswith(".pci.bus_id") and key.startswith("gpu.") and reading.ok:
            numa = readings.get(f"pcie.{reading.value}.numa_node")
            count += numa is not None and numa.ok and numa.value == node
    return count
