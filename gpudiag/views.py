"""Tables derived from a snapshot for display: pure functions, shared by the TUI and tests."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpudiag import catalog, shipped
from gpudiag.catalog import device_prefix, metric_key
from gpudiag.hostfs import natural_key
from gpudiag.model import Finding, KernelResult, Reading, Severity, Snapshot
from gpudiag.rulefile import Rule
from gpudiag.session import rule_tally

GPU_PAIR, GPU_NIC = "topo.gpu.{gpu}.{peer}", "topo.gpu.{gpu}.nic.{nic}"  # declared templates


@dataclass(frozen=True)
class Matrix:
    """A labelled table: column headers, rows of cells, and a legend."""

    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    legend: tuple[str, ...]


def topology_matrix(snapshot: Snapshot, profile: Mapping[str, object] | None = None) -> Matrix:
    """The `nvidia-smi topo -m` view: NUMA and CPU affinity, GPU by GPU, then NICs. A pair
    whose reading is missing or failed shows '?'; a pair with fewer NVLinks than the
    node's usual count is marked '!', and so is a GPU with fewer active NVLinks than its
    model's profile has (the legend says how many)."""
    readings = snapshot.readings_by_key
    gpus = catalog.gpu_indices(readings)
    # the topology readings taken apart by the templates that declare them
    topology = [(key, *shipped.parts(key)) for key in readings if key.startswith("topo.gpu.")]
    nics = sorted({values["nic"] for _, template, values in topology if template == GPU_NIC})

    def cell(key: str) -> str:
        reading = readings.get(key)
        return str(reading.value) if reading is not None and reading.ok else "?"

    # NUMA and CPU affinity first: past the GPU and NIC columns they were cut off even at
    # 120 columns on an 8-GPU node with 8 NICs (the table scrolls sideways for the rest)
    headers = (
        "",
        "NUMA",
        "CPUs",
        *(f"GPU{g}" for g in gpus),
        *(f"NIC{n}" for n in range(len(nics))),
    )
    links = [
        int(str(r.value)[2:])
        for key, template, _ in topology
        if template == GPU_PAIR and (r := readings[key]).ok and re.fullmatch(r"NV\d+", str(r.value))
    ]
    usual = max(set(links), key=links.count) if links else 0

    def pair(a: int, b: int) -> str:
        text = cell(f"topo.gpu.{a}.{b}")
        short = re.fullmatch(r"NV(\d+)", text) and int(text[2:]) < usual
        return f"{text}!" if short else text

    expected = (profile or {}).get("nvlink_count")
    short_gpus = []
    for g in gpus:
        active = readings.get(f"gpu.{g}.nvlink.active")
        count = active.value if active is not None and active.ok else None
        if isinstance(expected, int) and isinstance(count, int) and count < expected:
            short_gpus.append(f"GPU{g}: {count} of the model's {expected} NVLinks active")
    rows = []
    for a in gpus:
        pairs = ["X" if a == b else pair(a, b) for b in gpus]
        nic_cells = [cell(f"topo.gpu.{a}.nic.{nic}") for nic in nics]
        short = any(line.startswith(f"GPU{a}:") for line in short_gpus)
        rows.append(
            (
                f"GPU{a}!" if short else f"GPU{a}",
                cell(f"gpu.{a}.numa_node"),
                cell(f"gpu.{a}.cpu_affinity"),
                *pairs,
                *nic_cells,
            )
        )
    legend = [f"NIC{i}: {nic}" for i, nic in enumerate(nics)]
    if any(cell.endswith("!") for row in rows for cell in row[1:]):
        legend.append(f"NV#! = fewer NVLinks than the node's usual NV{usual}")
    legend.extend(f"{line} (GPU#! above)" for line in short_gpus)
    legend.append(
        "NV# = NVLinks; PIX, PXB, PHB, NODE, SYS = PCIe paths as in nvidia-smi "
        "topo -m; ? = not read (see Readings)"
    )
    return Matrix(tuple(headers), tuple(rows), tuple(legend))


# ------------------------------------------------------------------ overview


def _shown(readings: dict[str, Reading], key: str) -> str | None:
    reading = readings.get(key)
    return reading.display() if reading is not None and reading.ok else None


def overview(
    snapshot: Snapshot,
    rules: Sequence[Rule] | None = None,
    readings: dict[str, Reading] | None = None,
) -> list[tuple[str, str]]:
    """Label and value lines for the first screen: host, platform, GPUs, driver, CPU and
    NUMA, and how many rules ran, did not apply and could not be checked (how many ran
    only when the `rules` and the judged `readings` are given). A value no probe read
    says so ('not read', with its status and reason) rather than vanish."""
    r = snapshot.readings_by_key

    def joined(*keys: str, sep: str = " ") -> str:
        parts = [v for k in keys if (v := _shown(r, k))]
        return sep.join(parts) if parts else not_read(*keys)

    def not_read(*keys: str) -> str:
        """'not read', with why: the first reading's status and reason."""
        first = next((r[k] for k in keys if k in r), None)
        if first is None:
            return "not read (no probe reads it here)"
        return f"not read ({first.status.value}: {first.reason})" if first.reason else "not read"

    gpus = catalog.gpu_indices(r)
    names = sorted({str(r[f"gpu.{g}.name"].value) for g in gpus if _shown(r, f"gpu.{g}.name")})
    lost = catalog.lost_gpus(r)
    gpu_text = f"{len(gpus)} x {', '.join(names) or 'unknown model'}" if gpus else "none seen"
    if lost:
        gpu_text += f" ({len(lost)} not answering: GPU {', '.join(map(str, lost))})"
    nodes = r.get("numa.nodes")
    numa = not_read("numa.nodes")
    if nodes is not None and nodes.ok and isinstance(nodes.value, list):
        layout_by_node = [f"{n}: cpus {_shown(r, f'numa.{n}.cpus') or 'none'}" for n in nodes.value]
        numa = f"{len(nodes.value)} node(s) ({'; '.join(layout_by_node)})"
    cpu = joined("cpu.model")
    driver = joined("nvml.driver_version")
    if _shown(r, "nvml.driver_version"):  # else the reason once, not again for CUDA
        driver += f"  CUDA {joined('nvml.cuda_driver_version')}"
    layout = [
        f"{_shown(r, k)} {word}"
        for k, word in (
            ("cpu.sockets", "socket(s)"),
            ("cpu.cores", "cores"),
            ("cpu.logical", "CPUs"),
        )
        if _shown(r, k)
    ]
    return [
        (
            "Host",
            f"{snapshot.host}  ({joined('host.os.pretty_name')}, kernel "
            f"{joined('host.kernel.release')})",
        ),
        ("Platform", joined("dmi.sys_vendor", "dmi.product_name")),
        ("BIOS", joined("dmi.bios_vendor", "dmi.bios_version", "dmi.bios_date")),
        ("GPUs", gpu_text),
        ("Driver", driver),
        ("CPU", f"{cpu}" + (f"  ({', '.join(layout)})" if layout else "")),
        ("NUMA", numa),
        ("Governor", joined("cpu.freq.governor")),
        ("Rules", rule_tally(snapshot.findings, rules, readings).text().removeprefix("rules: ")),
        ("Snapshot", f"taken {snapshot.created} by gpudiag {snapshot.gpudiag_version}"),
    ]


# ------------------------------------------------------------------ findings


SORT_KEYS = ("severity", "id", "subject")


def filter_findings(
    findings: Sequence[Finding],
    severity: Severity | None = None,
    text: str = "",
    sort: str = "severity",
) -> list[Finding]:
    """Findings of one severity (or all), containing `text` (any case) in their id,
    subject, title or message, sorted worst first (or by id, or by subject)."""
    needle = text.strip().lower()
    kept = [
        f
        for f in findings
        if (severity is None or f.severity is severity)
        and (not needle or needle in f"{f.rule_id} {f.subject} {f.title} {f.message}".lower())
    ]
    if sort == "id":
        return sorted(kept, key=lambda f: (natural_key(f.rule_id), natural_key(f.subject)))
    if sort == "subject":
        return sorted(kept, key=lambda f: (natural_key(f.subject), -f.severity.rank))
    return sorted(
        kept, key=lambda f: (-f.severity.rank, natural_key(f.rule_id), natural_key(f.subject))
    )


def finding_detail(finding: Finding) -> list[tuple[str, str]]:
    """What the detail pane shows: message, each evidence reading with its source, why
    it matters and how to fix it. A reading the message already quotes word for word is
    named, not repeated (NVML001's evidence pushed why and fix below the fold)."""
    lines = [
        # the title in full: the table's column cuts it at 80 columns
        (
            "",
            f"{finding.severity.value.upper()} {finding.rule_id}  "
            f"{finding.subject}: {finding.title}",
        ),
        ("", finding.said()),
    ]
    for reading in finding.evidence:
        source = f"  ({reading.source})" if reading.source else ""
        shown = reading.display()
        said = re.sub(r"^\[[\w-]+\] ", "", shown)  # without its "[error] " status
        value = "as above" if len(said) > 20 and said in finding.message else f"= {shown}"
        lines.append(("evidence", f"{reading.key} {value}{source}"))
    if finding.why:
        lines.append(("why", finding.why))
    if finding.fix:
        lines.append(("fix", finding.fix))
    return lines


# ------------------------------------------------------------------ GPUs


# Short names of NVML's clock event (throttle) reasons, so that a GPU's row fits 80 columns;
# the readings pane below the table has the full names.
THROTTLE_SHORT = {
    "GpuIdle": "idle",
    "ApplicationsClocksSetting": "AppClk",
    "SwPowerCap": "SwPwr",
    "HwSlowdown": "HwSlow",
    "SyncBoost": "Sync",
    "SwThermalSlowdown": "SwTherm",
    "HwThermalSlowdown": "HwTherm",
    "HwPowerBrakeSlowdown": "HwBrake",
    "DisplayClockSetting": "Disp",
}
HEALTH_WORDS = {
    Severity.CRITICAL: "CRIT",
    Severity.WARNING: "WARN",
    Severity.UNKNOWN: "UNKN",
    Severity.INFO: "OK",
}
_SUBJECT_GPU = re.compile(r"\bGPU ?(\d+)\b")


def gpu_health(findings: Sequence[Finding]) -> dict[int, Severity]:
    """Each GPU's worst finding (a finding about a pair counts for both GPUs), as
    `dcgmi diag` gives a verdict per GPU; a GPU without findings is absent."""
    worst: dict[int, Severity] = {}
    for finding in findings:
        if finding.severity is Severity.NOT_APPLICABLE:
            continue  # never counts against a GPU
        for gpu in {int(g) for g in _SUBJECT_GPU.findall(finding.subject)}:
            if gpu not in worst or finding.severity.rank > worst[gpu].rank:
                worst[gpu] = finding.severity
    return worst


SINGLE_CELLS = ("throttle_reasons", "ecc.current", "persistence_mode", "mig.current")


def _cell(text: str, lost: bool, *parts: str) -> str:
    """A GPU table cell, `text`, made of `parts`: '-' where none of them was read, blank
    for a lost GPU (its bus cell says LOST)."""
    return ("" if lost else "-") if all(p == "-" for p in parts) else text


def gpu_table(snapshot: Snapshot) -> Matrix:
    """One row per GPU: its health (OK, WARN, CRIT, UNKN: its worst finding), bus, PCIe
    now (and max where below it), temperature, power and limit, SM clock and its maximum,
    throttle reasons (short names), ECC, persistence, MIG. '-' where a reading is absent
    or failed, and for a cell none of whose readings was taken (not '-/- x-/-', '-C',
    '-/-W'); blank in a lost GPU's row, whose bus cell says LOST (it answered nothing)."""
    r = snapshot.readings_by_key
    gpus = catalog.gpu_indices(r)
    health = gpu_health(snapshot.findings)

    def v(gpu: int, suffix: str) -> str:
        reading = r.get(f"gpu.{gpu}.{suffix}")
        if reading is None or not reading.ok:
            return "-"
        value = reading.value
        if isinstance(value, bool):
            return "on" if value else "off"
        if isinstance(value, float):
            return f"{value:.0f}"
        if isinstance(value, list):
            return ",".join(THROTTLE_SHORT.get(str(x), str(x)) for x in value) or "none"
        return str(value)

    rows = []
    for g in gpus:
        lost = catalog.is_lost(r, g)
        gen, width = v(g, "pcie.link_gen"), v(g, "pcie.link_width")
        max_gen, max_width = v(g, "pcie.max_link_gen"), v(g, "pcie.max_link_width")
        # "5 x16" at the maximum; "5/5 x8/16" where the link trained below it
        pcie = (
            f"{gen} x{width}"
            if (gen, width) == (max_gen, max_width) and gen != "-"
            else f"{gen}/{max_gen} x{width}/{max_width}"
        )
        temperature, draw, limit = (
            v(g, s) for s in ("temperature.gpu", "power.draw", "power.limit")
        )
        sm, max_sm = v(g, "clocks.sm"), v(g, "clocks.max_sm")
        rows.append(
            (
                f"GPU{g}",
                HEALTH_WORDS[health.get(g, Severity.INFO)],
                v(g, "pci.bus_id").removeprefix("0000:") if not lost else "LOST",
                _cell(pcie, lost, gen, width, max_gen, max_width),
                _cell(f"{temperature}C", lost, temperature),
                _cell(f"{draw}/{limit}W", lost, draw, limit),
                _cell(f"{sm}/{max_sm}", lost, sm, max_sm),
                *(_cell(x, lost, x) for x in (v(g, s) for s in SINGLE_CELLS)),
            )
        )
    # throttle before ECC, persistence and MIG: at 80 columns it is the last one shown
    headers = (
        "GPU",
        "health",
        "bus",
        "PCIe",
        "temp",
        "power",
        "SM MHz",
        "throttle",
        "ECC",
        "pers",
        "MIG",
    )
    return Matrix(headers, tuple(rows), ())


def no_gpu_reason(snapshot: Snapshot) -> str:
    """Why a snapshot has no GPU readings, from what the probes saw: no NVIDIA device on
    the PCIe bus, devices but no driver, a driver but no NVML library; with what to do,
    and the demo to try meanwhile."""
    r = snapshot.readings_by_key
    nvidia = sorted(
        key.split(".vendor")[0].removeprefix("pcie.")
        for key, reading in r.items()
        if key.startswith("pcie.") and key.endswith(".vendor") and reading.value == "0x10de"
    )
    init = r.get("nvml.init")
    code = ""
    if init is not None and not init.ok:
        code = init.reason.split(":", 1)[-1].strip().split(" ", 1)[0]
    demo = "To see a recorded 8-GPU HGX H100 node instead: gpudiag demo faulty"
    pcie_read = any(k.startswith("pcie.") and k.endswith(".vendor") for k in r)
    if pcie_read and not nvidia:
        why = (
            "No NVIDIA device on the PCIe bus (no vendor 0x10de in sysfs): this node has no "
            "NVIDIA GPU, or its GPUs are not seated, powered or enabled in the BIOS "
            "(lspci -d 10de: lists them)."
        )
    elif nvidia and code in ("DriverNotLoaded", "LibraryNotFound", ""):
        devices = ", ".join(nvidia[:4]) + (" ..." if len(nvidia) > 4 else "")
        if code == "LibraryNotFound":
            why = (
                f"{len(nvidia)} NVIDIA device(s) on the PCIe bus ({devices}) but the NVML "
                "library (libnvidia-ml.so.1) is missing: install the driver's user-space "
                "package matching the kernel module."
            )
        else:
            why = (
                f"{len(nvidia)} NVIDIA device(s) on the PCIe bus ({devices}) but no driver "
                "loaded: load it (modprobe nvidia) or install the NVIDIA driver; dmesg says "
                "why it did not load."
            )
    elif init is not None and not init.ok:
        why = f"NVML did not start: {init.reason}"
    else:
        why = "NVML reported no GPU."
    return f"{why}\n{demo}"


def gpu_readings(readings: Mapping[str, Reading], gpu: int) -> list[Reading]:
    """Every reading of one GPU (kernel figures included where derived), in key order."""
    prefix = f"gpu.{gpu}."
    return sorted(
        (r for k, r in readings.items() if k.startswith(prefix)),
        key=lambda r: natural_key(r.key),
    )


# ------------------------------------------------------------------ host tree


UNDECLARED = "Undeclared"


def host_tree(snapshot: Snapshot) -> dict[str, dict[str, list[Reading]]]:
    """The host's readings (everything the catalog does not show on the GPU, topology
    and kernel screens) by their declared group, in the catalog's order, then by
    sub-group: a subject's instance (a PCIe device, a NUMA node) or the key's second
    segment (a CPU area); '' holds the group's own. Readings no producer declares (a
    newer gpudiag's, or a site's) are shown last, under UNDECLARED, never dropped."""
    tree: dict[str, dict[str, list[Reading]]] = {}
    host_groups = [*shipped.host_groups(), UNDECLARED]
    shown = set(host_groups)
    for key in sorted(snapshot.readings_by_key, key=natural_key):
        group = shipped.group_of(key) or UNDECLARED
        if group not in shown:
            continue
        _, values = catalog.subject_of_key(key)
        if values:
            sub = " ".join(values.values())
        else:
            rest = key.partition(".")[2]
            sub = rest.split(".")[0] if "." in rest else ""
        tree.setdefault(group, {}).setdefault(sub, []).append(snapshot.readings_by_key[key])
    return {group: tree[group] for group in host_groups if group in tree}


# ------------------------------------------------------------------ kernels


def result_name(result: KernelResult) -> str:
    """kernel.metric, with the element type for STREAM: stream.triad.fp64, gemm.fp16."""
    name = f"{result.kernel}.{result.metric}"
    if result.kernel == "stream" and dict(result.params).get("dtype"):
        name += f".{dict(result.params)['dtype']}"
    return name


def kernel_table(
    kernels: Sequence[KernelResult], readings: Mapping[str, Reading] | None = None
) -> Matrix:
    """One row per kernel result: median with its unit, CV, the 95% interval, for a GPU
    with a known model the share of the model's peak (from the derived `readings`), then
    min-max; or the status, and the reason last, where there are no statistics."""
    readings = readings or {}
    rows = []
    for k in kernels:
        name = result_name(k)
        prefix = device_prefix(k.device)
        share = readings.get(f"{prefix}kernel.{metric_key(k)}.share_of_peak") if prefix else None
        of_peak = f"{float(share.value):.0%}" if share is not None and share.ok else ""  # type: ignore[arg-type]
        figure = readings.get(f"{prefix}kernel.{metric_key(k)}") if prefix else None
        if figure is not None and "timing inconsistent" in figure.reason:  # above any peak
            of_peak = "impossible"
        if k.stats is not None:
            s = k.stats
            rows.append(
                (
                    name,
                    k.device,
                    f"{s.median:.4g} {k.unit}",
                    f"{s.cv:.0%}",
                    f"{s.ci95_low:.4g}-{s.ci95_high:.4g}",
                    of_peak,
                    f"{s.minimum:.4g}-{s.maximum:.4g}",
                )
            )
        elif k.status.value == "ok" and k.samples:
            rows.append((name, k.device, f"{k.samples[0]:.4g} {k.unit}", "", "", "", ""))
        else:
            rows.append((name, k.device, k.status.value.upper(), "", "", "", k.error))
    # what matters first, so that 80 columns show it: the range (and a reason) go last
    headers = ("kernel", "device", "median", "cv", "95% CI", "of peak", "min-max")
    return Matrix(headers, tuple(rows), ())


def bar_chart(items: Sequence[tuple[str, float]], width: int, unit: str) -> list[str]:
    """Horizontal bars scaled to the largest value, one line each: label, bar, value."""
    if not items:
        return []
    label_width = max(len(label) for label, _ in items)
    top = max(value for _, value in items) or 1.0
    room = max(5, width - label_width - 14)
    lines = []
    for label, value in items:
        eighths = round(value / top * room * 8)
        bar = "█" * (eighths // 8) + (" ▏▎▍▌▋▊▉"[eighths % 8] if eighths % 8 else "")
        lines.append(f"{label:<{label_width}} {bar:<{room}} {value:.4g} {unit}")
    return lines


def kernel_charts(
    kernels: Sequence[KernelResult],
) -> list[tuple[str, list[tuple[str, float]], str]]:
    """The charts worth drawing: triad bandwidth per device, one-way peer and host copies
    per device and GEMM per device and precision (medians of OK results)."""
    charts: dict[tuple[str, str], list[tuple[str, float]]] = {}
    for k in kernels:
        if k.stats is None:
            continue
        if k.kernel == "stream" and k.metric == "triad":
            title = f"STREAM triad ({dict(k.params).get('dtype', '')})"
            charts.setdefault((title, k.unit), []).append((k.device, k.stats.median))
        elif k.kernel == "gemm":
            charts.setdefault((f"GEMM {k.metric}", k.unit), []).append((k.device, k.stats.median))
        elif k.kernel == "copy" and k.metric.startswith("h2d."):
            charts.setdefault(("host to device", k.unit), []).append(
                (f"{k.device} {k.metric[4:]}", k.stats.median)
            )
        elif k.kernel == "peer" and k.metric.startswith("to."):
            charts.setdefault(("peer copies, one way", k.unit), []).append(
                (f"{k.device}>{k.metric[3:]}", k.stats.median)
            )
    return [(title, items, unit) for (title, unit), items in charts.items()]


def burn_series(kernels: Sequence[KernelResult]) -> list[tuple[str, tuple[float, ...], str]]:
    """NVML series sampled during a burn, per device: (label, samples, unit)."""
    return [
        (f"{k.device} {k.metric}", k.samples, k.unit)
        for k in kernels
        if k.kernel == "burn" and k.stats is not None and len(k.samples) >= 2
    ]


def sparkline(samples: Sequence[float], width: int) -> str:
    """The samples as one line of block characters (the last `width` of them), with the
    minimum and maximum written after it."""
    if not samples:
        return ""
    shown = list(samples)[-max(1, width - 24) :]
    low, high = min(shown), max(shown)
    span = (high - low) or 1.0
    blocks = "▁▂▃▄▅▆▇█"
    line = "".join(blocks[min(7, int((v - low) / span * 8))] for v in shown)
    return f"{line}  min {low:.4g} max {high:.4g}"
