"""CPU: identity, topology, SMT, frequency scaling, boost and idle states.

Per-CPU settings (governor, EPP, idle states) are one reading each: the value when all
CPUs agree, else a list of 'value: cpus N-M' strings, so a mixed setting shows at once.

Where /proc/cpuinfo names no model (Arm, as on Grace: only 'CPU implementer' and 'CPU
part'), the model comes from py-cpuinfo's lscpu source, which decodes the part number
('Neoverse-V2'); never its `get_cpu_info()`, which samples the clock for a second on
x86. py-cpuinfo reads the live machine, so it is asked only on a live node, through the
host's output seam: a capture records its answer and a replay gives that back; under
`--root` the model stays the part number. Not run on an Arm machine here: tested with
an Arm cpuinfo and py-cpuinfo's answer given at the seam.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpudiag import catalog
from gpudiag.hostfs import LARGE_HOST_FILE, HostFS
from gpudiag.model import Reading, ReadingStatus
from gpudiag.probe import Cost, Probe, ProbeContext
from gpudiag.probes.common import hypervisor, node_ids, per_cpu_reading
from gpudiag.textparse import format_cpulist, parse_bool01, parse_cpulist, parse_int

CPU_DIR = "/sys/devices/system/cpu"
NOTABLE_FLAGS = (
    "avx2",
    "avx512f",
    "avx512_bf16",
    "avx512_fp16",
    "avx512_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "sha_ni",
    "vaes",
)
ARM_IMPLEMENTERS = {
    "0x41": "ARM",
    "0x42": "Broadcom",
    "0x43": "Cavium",
    "0x46": "Fujitsu",
    "0x48": "HiSilicon",
    "0x4e": "NVIDIA",
    "0x50": "APM",
    "0x51": "Qualcomm",
    "0x61": "Apple",
    "0xc0": "Ampere",
}
PY_CPUINFO_OUTPUT = "py-cpuinfo lscpu"
NO_CPUFREQ = "no cpufreq in sysfs (no frequency driver loaded, or a VM that hides it)"


def parse_cpuinfo(text: str) -> list[dict[str, str]]:
    """/proc/cpuinfo -> one dict per processor block (architecture-specific fields kept
    as they are); a trailing block without 'processor' (POWER's platform lines) is kept
    too."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        name, sep, value = line.partition(":")
        if sep:
            current[name.strip()] = value.strip()
    if current:
        blocks.append(current)
    return blocks


def cpu_identity(blocks: list[dict[str, str]]) -> dict[str, str]:
    """Vendor and model from parsed cpuinfo, on x86, Arm and POWER."""
    processors = [b for b in blocks if "processor" in b] or blocks
    if not processors:
        raise ValueError("no processor entries")
    first = processors[0]
    if "vendor_id" in first:
        return {"vendor": first["vendor_id"], "model": first.get("model name", "")}
    if "CPU implementer" in first:
        implementer = first["CPU implementer"].lower()
        vendor = ARM_IMPLEMENTERS.get(implementer, f"Arm implementer {implementer}")
        return {"vendor": vendor, "model": f"part {first.get('CPU part', '?')}"}
    if "cpu" in first:
        model = first["cpu"]
        return {"vendor": "IBM" if model.upper().startswith("POWER") else "", "model": model}
    raise ValueError("no vendor_id, CPU implementer or cpu field")


def py_cpuinfo_identity() -> dict[str, Any]:
    """py-cpuinfo's lscpu source on this machine: {'brand_raw', 'vendor_id_raw'} as it
    found them, or {'failed': why}. Only the lscpu source: `get_cpu_info()` would start a
    Python subprocess and, on x86, sample the clock for one second."""
    try:
        from cpuinfo import cpuinfo as py_cpuinfo
    except ImportError as exc:
        return {"failed": f"py-cpuinfo is not installed ({exc})"}
    from_lscpu = getattr(py_cpuinfo, "_get_cpu_info_from_lscpu", None)
    if from_lscpu is None:
        return {"failed": "this py-cpuinfo has no lscpu source"}
    info = from_lscpu()  # {} when lscpu is missing or fails
    answer = {k: str(info[k]) for k in ("brand_raw", "vendor_id_raw") if info.get(k)}
    return answer or {"failed": "lscpu gave py-cpuinfo no model name"}


def _model_from_py_cpuinfo(host: HostFS) -> tuple[str, str] | None:
    """(model, source) from py-cpuinfo on a live node (or the answer a capture recorded);
    None under --root, or where py-cpuinfo has no model either."""
    if not host.is_live:
        return None
    try:
        answer = host.output(PY_CPUINFO_OUTPUT, py_cpuinfo_identity)
    except ValueError:  # a capture from before py-cpuinfo was asked
        return None
    brand = answer.get("brand_raw") if isinstance(answer, dict) else None
    return (str(brand), "py-cpuinfo:lscpu") if brand else None


def notable_flags(blocks: list[dict[str, str]]) -> list[str] | None:
    """The notable x86 flags of the first processor; None where cpuinfo has no flags."""
    for block in blocks:
        if "flags" in block:
            present = set(block["flags"].split())
            return [flag for flag in NOTABLE_FLAGS if flag in present]
    return None


def khz_to_mhz(text: str) -> float:
    """cpufreq files are in kHz."""
    return int(text.strip()) / 1000.0


def _topology(host: HostFS, cpus: list[int]) -> Iterator[Reading]:
    packages: dict[int, str] = {}
    cores: set[tuple[str, str]] = set()
    failure = None
    for cpu in cpus:
        package = host.read(f"{CPU_DIR}/cpu{cpu}/topology/physical_package_id")
        core = host.read(f"{CPU_DIR}/cpu{cpu}/topology/core_id")
        if not (package.ok and core.ok):
            failure = failure or (package if not package.ok else core)
            continue
        packages[cpu] = package.text.strip()
        cores.add((package.text.strip(), core.text.strip()))
    source = "sysfs:devices/system/cpu/cpu*/topology"
    if not packages:
        reason = failure.reason if failure else "no online CPUs"
        status = failure.status if failure else ReadingStatus.MISSING
        for key in ("cpu.sockets", "cpu.cores", "cpu.threads_per_core"):
            yield Reading.failed(key, status, reason, source)
        return
    yield Reading("cpu.sockets", len(set(packages.values())), source=source)
    yield Reading("cpu.cores", len(cores), source=source)
    yield Reading("cpu.threads_per_core", round(len(packages) / len(cores), 2), source=source)


def hidden_by_vm(reading: Reading, vm: str | None, what: str) -> Reading:
    """A reading missing on a VM, where the hypervisor hides `what`: unsupported (the
    rules judging it do not apply there), with the reason. On bare metal (`vm` None) the
    reading stays missing: there the file should exist, and its rule stays unknown."""
    if vm is None or reading.status is not ReadingStatus.MISSING:
        return reading
    reason = f"a VM ({vm}) has no {what}: the hypervisor keeps it ({reading.reason})"
    return Reading.failed(
        reading.key, ReadingStatus.UNSUPPORTED, reason, reading.source, reading.unit
    )


def _frequency(host: HostFS, cpus: list[int], vm: str | None) -> Iterator[Reading]:
    for reading in _frequency_files(host, cpus):
        yield hidden_by_vm(reading, vm, "CPU frequency scaling")


def _frequency_files(host: HostFS, cpus: list[int]) -> Iterator[Reading]:
    def cpufreq(name: str):
        return lambda cpu: f"{CPU_DIR}/cpu{cpu}/cpufreq/{name}"

    def source(name: str) -> str:
        return f"sysfs:devices/system/cpu/cpu*/cpufreq/{name}"

    for key, name in (
        ("cpu.freq.driver", "scaling_driver"),
        ("cpu.freq.governor", "scaling_governor"),
        ("cpu.freq.epp", "energy_performance_preference"),
    ):
        yield per_cpu_reading(
            host, key, cpus, cpufreq(name), source(name), absent_reason=NO_CPUFREQ
        )
    for key, name in (
        ("cpu.freq.min", "scaling_min_freq"),
        ("cpu.freq.max", "scaling_max_freq"),
        ("cpu.freq.hw_max", "cpuinfo_max_freq"),
    ):
        yield per_cpu_reading(
            host, key, cpus, cpufreq(name), source(name), khz_to_mhz, "MHz", NO_CPUFREQ
        )
    current = [host.read(cpufreq("scaling_cur_freq")(cpu)) for cpu in cpus]
    values = []
    for result in current:
        if result.ok:
            try:
                values.append(khz_to_mhz(result.text or ""))
            except ValueError:
                continue
    for key, pick in (("cpu.freq.cur_min", min), ("cpu.freq.cur_max", max)):
        if values:
            yield Reading(key, pick(values), "MHz", source("scaling_cur_freq"))
        else:
            yield Reading.failed(
                key, ReadingStatus.MISSING, NO_CPUFREQ, source("scaling_cur_freq"), "MHz"
            )

    boost = host.read(f"{CPU_DIR}/cpufreq/boost")
    no_turbo = host.read(f"{CPU_DIR}/intel_pstate/no_turbo")
    if boost.ok:
        yield boost.parsed("cpu.freq.boost", parse_bool01)
    elif no_turbo.ok:
        yield no_turbo.parsed("cpu.freq.boost", lambda t: not parse_bool01(t))
    else:
        yield Reading.failed(
            "cpu.freq.boost",
            ReadingStatus.MISSING,
            "neither cpufreq/boost nor intel_pstate/no_turbo exists",
            "sysfs:devices/system/cpu/cpufreq/boost",
        )
    for driver in ("intel_pstate", "amd_pstate"):
        status = host.read(f"{CPU_DIR}/{driver}/status")
        if status.ok:
            yield status.reading(f"cpu.freq.{driver}_status")


def _idle(host: HostFS, cpus: list[int], vm: str | None) -> Iterator[Reading]:
    yield host.reading("cpu.idle.driver", f"{CPU_DIR}/cpuidle/current_driver")
    if not cpus:
        source = f"sysfs:{CPU_DIR.removeprefix('/sys/')}"
        for key in ("cpu.idle.states", "cpu.idle.C6.disabled"):
            yield Reading.failed(key, ReadingStatus.MISSING, "no online CPUs in sysfs", source)
        return
    first = cpus[0]
    states = node_ids(host, f"{CPU_DIR}/cpu{first}/cpuidle", "state")
    source = f"sysfs:devices/system/cpu/cpu{first}/cpuidle"
    if not states:  # CPU003 judges C6: say why there is none, on a VM or not
        for key in ("cpu.idle.states", "cpu.idle.C6.disabled"):
            missing = Reading.failed(
                key, ReadingStatus.MISSING, "no cpuidle states in sysfs", source
            )
            yield hidden_by_vm(missing, vm, "CPU idle states")
        return
    names = []
    for state in states:
        name = host.read(f"{CPU_DIR}/cpu{first}/cpuidle/state{state}/name")
        label = name.text.strip() if name.ok and name.text else f"state{state}"
        names.append(label)
        yield per_cpu_reading(
            host,
            IDLE_DISABLED.key(state=label),
            cpus,
            lambda cpu, s=state: f"{CPU_DIR}/cpu{cpu}/cpuidle/state{s}/disable",
            f"sysfs:devices/system/cpu/cpu*/cpuidle/state{state}/disable",
            parse_bool01,
        )
        yield host.reading(
            IDLE_LATENCY.key(state=label),
            f"{CPU_DIR}/cpu{first}/cpuidle/state{state}/latency",
            parse_int,
            IDLE_LATENCY.unit,
        )
    yield Reading("cpu.idle.states", names, source=source)
    if "C6" not in names:  # CPU003 judges C6: on this CPU there is none to judge
        reason = f"this CPU has no C6 idle state ({', '.join(names)})"
        yield IDLE_DISABLED.failed(ReadingStatus.UNSUPPORTED, reason, source, state="C6")


def collect(context: ProbeContext) -> Iterator[Reading]:
    """CPU readings."""
    host = context.host
    cpuinfo = host.read("/proc/cpuinfo", LARGE_HOST_FILE)
    blocks = parse_cpuinfo(cpuinfo.text or "")
    identity: dict[str, str] = {}
    failure = ""
    if cpuinfo.ok:
        try:
            identity = cpu_identity(blocks)  # cpuinfo parsed once, for every reading
        except ValueError as exc:
            failure = f"cannot parse /proc/cpuinfo: {exc}"
    sources = {"vendor": cpuinfo.source, "model": cpuinfo.source}
    first = next((b for b in blocks if "processor" in b), {})
    if identity and "model name" not in first and "cpu" not in first:
        found = _model_from_py_cpuinfo(host)  # Arm: cpuinfo gives only a part number
        if found:
            identity["model"], sources["model"] = found
    for field in ("vendor", "model"):
        key = f"cpu.{field}"
        if identity:
            yield Reading(key, identity[field], source=sources[field])
        elif failure:
            yield Reading.failed(key, ReadingStatus.ERROR, failure, cpuinfo.source)
        else:
            yield cpuinfo.reading(key)
    microcodes = sorted({b["microcode"] for b in blocks if "microcode" in b})
    if microcodes:
        value = microcodes[0] if len(microcodes) == 1 else microcodes
        yield Reading("cpu.microcode", value, source=cpuinfo.source)
    elif cpuinfo.ok:
        yield Reading.failed(
            "cpu.microcode",
            ReadingStatus.UNSUPPORTED,
            "/proc/cpuinfo lists no microcode (not x86, or a VM)",
            cpuinfo.source,
        )
    else:
        yield cpuinfo.reading("cpu.microcode")
    flags = notable_flags(blocks)
    if flags is not None:
        yield Reading("cpu.flags.notable", flags, source=cpuinfo.source)
    elif cpuinfo.ok:
        yield Reading.failed(
            "cpu.flags.notable",
            ReadingStatus.UNSUPPORTED,
            "/proc/cpuinfo has no x86 flags line",
            cpuinfo.source,
        )
    else:
        yield cpuinfo.reading("cpu.flags.notable")

    online = host.read(f"{CPU_DIR}/online")
    yield online.parsed("cpu.online", lambda t: format_cpulist(parse_cpulist(t)))
    try:
        cpus = parse_cpulist(online.text or "") if online.ok else None
    except ValueError:  # corrupt (the cpu.online reading says so): count the directories
        cpus = None
    online_ok = cpus is not None
    if cpus is None:
        cpus = node_ids(host, CPU_DIR, "cpu")
    yield Reading(
        "cpu.logical",
        len(cpus),
        source=online.source if online_ok else "sysfs:devices/system/cpu/cpu*",
    )
    for name in ("offline", "isolated"):
        yield host.reading(
            f"cpu.{name}", f"{CPU_DIR}/{name}", lambda t: format_cpulist(parse_cpulist(t))
        )
    yield host.reading("cpu.smt.active", f"{CPU_DIR}/smt/active", parse_bool01)
    yield host.reading("cpu.smt.control", f"{CPU_DIR}/smt/control")
    yield from _topology(host, cpus)
    if context.cancel.is_set():
        return
    vm = hypervisor(host)
    yield from _frequency(host, cpus, vm)
    yield from _idle(host, cpus, vm)


# the readings of one idle state, emitted through these
IDLE_DISABLED = catalog.config("cpu.idle.{state}.disabled")
IDLE_LATENCY = catalog.config("cpu.idle.{state}.latency", "us")

# the readings this probe makes (gpudiag/catalog.py)
READINGS = (
    *catalog.declare(
        "CPU",
        catalog.config("cpu.cores"),
        catalog.config("cpu.flags.notable"),
        catalog.config("cpu.freq.boost"),
        catalog.volatile("cpu.freq.cur_max", "MHz"),
        catalog.volatile("cpu.freq.cur_min", "MHz"),
        catalog.config("cpu.freq.driver"),
        catalog.config("cpu.freq.epp"),
        catalog.config("cpu.freq.governor"),
        catalog.config("cpu.freq.hw_max", "MHz"),
        catalog.config("cpu.freq.max", "MHz"),
        catalog.config("cpu.freq.min", "MHz"),
        catalog.config("cpu.idle.driver"),
        catalog.config("cpu.idle.states"),
        IDLE_DISABLED,
        IDLE_LATENCY,
        catalog.config("cpu.isolated"),
        catalog.config("cpu.logical"),
        catalog.config("cpu.microcode"),
        catalog.config("cpu.model"),
        catalog.config("cpu.offline"),
        catalog.config("cpu.online"),
        catalog.config("cpu.smt.active"),
        catalog.config("cpu.smt.control"),
        catalog.config("cpu.sockets"),
        catalog.config("cpu.threads_per_core"),
        catalog.config("cpu.vendor"),
    ),
)

PROBE = Probe(
    name="cpu",
    title="CPU, frequency scaling and idle states",
    cost=Cost.INSTANT,
    needs=frozenset(),
    collect=collect,
    timeout_s=10.0,
    readings=READINGS,
)
