"""Mutation fuzzing of gpudiag's loaders: valid seed files, mutated by a list of edits
(insert a hostile token, delete, duplicate, truncate, flip a byte, a number made one no
reading holds, a line break put in a string), fed to each loader. A loader may accept
the input or refuse it with its own one-line error; anything else (another exception, a
hang, a control character or a line break let into a one-line field, a report line that
a line break in a field started) is a crash. Each loader here returns True when the
input was accepted, False when it was refused. Used by tests/test_fuzz_loaders.py
(hypothesis, a bounded budget) and benchmarks/fuzz_loaders.py (a longer random run)."""

from __future__ import annotations

import contextlib
import random
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

TOKENS = (
    "nan",
    "inf",
    "-inf",
    "1e309",
    "-0",
    "1" * 5000,
    "9" * 400,
    "0x",
    "0xffffffffffffffffff",
    "[" * 1500,
    "{" * 1500,
    "<a>" * 1500,
    "\x1b[2J\x1b]0;t\x07",
    "\\u001b[2J\\u001b]52;c;eA==\\u0007",  # the same, as JSON escapes
    "\\u009b31m\\r",
    "\x00",
    "\xff",
    "\r\n",
    "\t",
    '"',
    "'''",
    '"""',
    "{",
    "}",
    "[",
    "]",
    "[[",
    "]]",
    "=",
    "==",
    ",",
    ".",
    ":",
    "\n",
    " " * 9,
    "true",
    "false",
    "-1",
    "0",
    "4294967296",
    "18446744073709551616",
    "GPU 0:",
    "Link 0: ",
    "GPU0\tGPU1\tCPU Affinity",
    "NV12",
    "X",
    "<pid>abc</pid>",
    "<gpu>",
    "</gpu>",
    "<?xml version='1.0'?>",
    "<!DOCTYPE x [<!ENTITY e SYSTEM 'file:///etc/passwd'>]>",
    "&e;",
    "==============NVSMI LOG==============",
    "GPU 00000000:01:00.0",
    "    Clocks Event Reasons",
    "error = 'GpuIsLost'",
    "all_calls",
    "schema_version = 1",
    "[end]",
    "[[probes]]",
    "[[rule]]",
    "[[override]]",
    "expect = { min = nan }",
    "__class__",
    "{gpu}",
    "{value}",
    "status = 'ok'",
    "value = []",
    "\u202e",
    "\ud7ff",
    "é",
)
EDITS = ("insert", "delete", "duplicate", "truncate", "flip", "replace", "number", "break")
# numbers past what a reading holds (a float64), and at its edges: what "number" puts in
# place of a number of the text
HUGE_NUMBERS = (
    "1" + "0" * 400,
    "-" + "9" * 309,
    str(2**1024),
    "1" + "0" * 308,
    "18446744073709551616",
    "-9223372036854775809",
    "1e308",
)
# a line break (or tab) and a forged report line: what "break" puts at the start of a
# string (after a quote, a tag's '>' or a text line's ':'), escaped as each format
# escapes it, and raw
FORGED = "FORGED"
BREAKS = (
    "\\nFORGED",
    "\\r\\nFORGED",
    "\\u2028FORGED",
    "\\u0085FORGED",
    "\\tFORGED",
    "&#10;FORGED",
    "&#x2028;FORGED",
    "\nFORGED",
    "\u2028FORGED",
)
_NUMBER = re.compile(r"(?<![\w.])-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?(?![\w.])")

Edit = tuple[str, float, int]


def mutate(text: str, edits: list[Edit]) -> str:
    """Apply the edits (kind, position as a fraction of the length, a number) in order."""
    for kind, where, number in edits:
        at = int(where * len(text))
        if kind == "insert":
            text = text[:at] + TOKENS[number % len(TOKENS)] + text[at:]
        elif kind == "delete":
            text = text[:at] + text[at + 1 + number % 64 :]
        elif kind == "duplicate":
            text = text[:at] + text[at : at + 1 + number % 256] * 2 + text[at + 1 + number % 256 :]
        elif kind == "truncate":
            text = text[:at]
        elif kind == "flip" and text:
            at = min(at, len(text) - 1)
            text = text[:at] + chr((ord(text[at]) ^ (1 << number % 7)) or 32) + text[at + 1 :]
        elif kind == "replace":
            end = at + 1 + number % 32
            text = text[:at] + TOKENS[number % len(TOKENS)] + text[end:]
        elif kind == "number":  # the first number from `at` on (else the first of all)
            found = _NUMBER.search(text, at) or _NUMBER.search(text)
            if found:
                huge = HUGE_NUMBERS[number % len(HUGE_NUMBERS)]
                text = text[: found.start()] + huge + text[found.end() :]
        elif kind == "break":  # at the start of the next string or value from `at` on
            starts = [i for i in (text.find(c, at) for c in "\"'>:") if i >= 0]
            if starts:
                i = min(starts) + 1
                text = text[:i] + BREAKS[number % len(BREAKS)] + text[i:]
    return text


# the edits that leave a file well-formed: a loader reads such an input through to its
# fields, where numbers no reading holds and line breaks in one-line fields matter
WELL_FORMED = ("number", "break")


def random_edits(rng: random.Random) -> list[Edit]:
    """1 to 6 random edits (the benchmark's source of inputs); half the inputs get only
    WELL_FORMED edits (1 to 3), which most random edits would otherwise leave unread."""
    if rng.random() < 0.5:
        return [
            (rng.choice(WELL_FORMED), rng.random(), rng.randrange(1 << 16))
            for _ in range(rng.randint(1, 3))
        ]
    return [
        (rng.choice(EDITS), rng.random(), rng.randrange(1 << 16)) for _ in range(rng.randint(1, 6))
    ]


# ------------------------------------------------------------------ seeds

XML_SEED = """<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
  <driver_version>550.54.15</driver_version>
  <cuda_version>12.4</cuda_version>
  <attached_gpus>1</attached_gpus>
  <gpu id="00000000:18:00.0">
    <product_name>NVIDIA H100 80GB HBM3</product_name>
    <uuid>GPU-0123abcd-0000-1111-2222-333344445555</uuid>
    <pci><pci_bus_id>00000000:18:00.0</pci_bus_id><pci_device_id>233010DE</pci_device_id></pci>
    <fb_memory_usage><total>81559 MiB</total><used>0 MiB</used></fb_memory_usage>
    <persistence_mode>Enabled</persistence_mode>
    <clocks_event_reasons><clocks_event_reason_gpu_idle>Active</clocks_event_reason_gpu_idle>
    </clocks_event_reasons>
    <gpu_power_readings><instant_power_draw>70.12 W</instant_power_draw></gpu_power_readings>
    <processes><process_info><pid>1234</pid><type>C</type></process_info></processes>
  </gpu>
</nvidia_smi_log>
"""
Q_SEED = """==============NVSMI LOG==============

Driver Version                            : 550.54.15
CUDA Version                              : 12.4
Attached GPUs                             : 1
GPU 00000000:18:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    Persistence Mode                      : Enabled
    PCI
        Bus Id                            : 00000000:18:00.0
        Device Id                         : 0x233010DE
    FB Memory Usage
        Total                             : 81559 MiB
    Clocks Event Reasons
        Idle                              : Active
        HW Slowdown                       : Not Active
    ECC Errors
        Volatile
            DRAM Correctable              : 0
"""
TOPO_SEED = (
    "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tNV18\tPXB\t0-55\t0\t\tN/A\n"
    "GPU1\tNV18\t X \tSYS\t56-111\t1\t\tN/A\n"
    "NIC0\tPXB\tSYS\t X \t\t\t\t\n\nLegend:\n\n  X    = Self\n\nNIC Legend:\n\n  NIC0: mlx5_0\n"
)
NVLINK_SEED = (
    "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0123abcd-0000-1111-2222-333344445555)\n"
    "\t Link 0: 26.562 GB/s\n\t Link 1: <inactive>\n"
)


def snapshot_seed(as_json: bool = False) -> str:
    """A small snapshot made by the code that writes them (a reading of each kind); JSON
    of the current schema is what the fleet's fast path reads."""
    from gpudiag.model import (
        Finding,
        KernelResult,
        ProbeResult,
        ProbeStatus,
        Reading,
        ReadingStatus,
        Severity,
        Snapshot,
    )
    from gpudiag.snapshot import dumps

    readings = (
        Reading("host.hostname", "node-1", source="procfs:sys/kernel/hostname"),
        Reading("cpu.logical", 8, source="sysfs:devices/system/cpu/online"),
        Reading("gpu.0.power.draw", 70.5, "W", "nvml:nvmlDeviceGetPowerUsage"),
        Reading("gpu.0.throttle_reasons", ["idle", "sw_power_cap"]),
        Reading.failed("gpu.0.serial", ReadingStatus.NEEDS_ROOT, "run as root"),
    )
    return dumps(
        Snapshot(
            host="node-1",
            created="2026-11-23T00:00:00Z",
            gpudiag_version="0.1.0",
            command_line=("gpudiag", "--export", "x.toml"),
            probes=(ProbeResult("host", ProbeStatus.OK, 0.01, readings),),
            kernels=(KernelResult("stream", "cpu", "triad", "GB/s", ProbeStatus.OK, (1.0, 2.0)),),
            findings=(Finding("GPU001", Severity.WARNING, "gpu0", "t", "m", readings[:1]),),
        ),
        as_json=as_json,
    )


def _head(path: Path, rules: int = 8) -> str:
    """The first rules of a rule file (whole tables)."""
    return "\n[[rule]]".join(path.read_text().split("\n[[rule]]")[: rules + 1]) + "\n"


def seeds() -> dict[str, list[str]]:
    """Seed texts per loader, all from this repository."""
    fixtures = REPO / "tests" / "fixtures"
    return {
        "snapshot": [snapshot_seed(), snapshot_seed().replace("\n", "\n ")],
        "import": [XML_SEED, Q_SEED, TOPO_SEED, NVLINK_SEED],
        "rules": [_head(REPO / "rules" / name) for name in ("gpu.toml", "host.toml")],
        "replay": [p.read_text() for p in sorted(fixtures.glob("replay-*"))],
        "capture": [capture_seed()],
        "nvml": [nvml_seed()],
        "fleet": [snapshot_seed(as_json=True), snapshot_seed(as_json=True).replace(",", ", ")],
        "samples": [capture_seed(samples=2)],
        "healthcheck": [HEALTHCHECK_SEED],
    }


def capture_seed(samples: int = 0) -> str:
    """A small whole-node capture: the healthy demo's, cut to one GPU and a few of each
    kind of host record (the loader's checks see every section); with `samples`, that
    many recordings of the GPU's NVML after the first (what `watch --replay` reads)."""
    import json

    data = json.loads((REPO / "snapshots" / "demo-hgx-h100-healthy.capture.json").read_text())
    data["nvml"]["devices"] = data["nvml"]["devices"][:1]
    data["host"] = {kind: dict(list(records.items())[:4]) for kind, records in data["host"].items()}
    if samples:
        data["samples"] = [{"seconds": float(n), "nvml": data["nvml"]} for n in range(1, samples)]
    return json.dumps(data, indent=1)


HEALTHCHECK_SEED = """options = ["--rules", "/etc/gpudiag/site"]
timeout = 30
kernels = "quick"
drain_on = ["drain", "service"]
slurm_conf = "/etc/slurm/slurm.conf"
scontrol = "/usr/bin/scontrol"
"""


# ------------------------------------------------------------------ the loaders


def _snapshot(text: str, work: Path) -> bool:
    from gpudiag.snapshot import SnapshotError, loads

    try:
        snapshot = loads(text, "fuzz.toml")
    except SnapshotError:
        return False
    _snapshot_one_line(snapshot)
    return True


def _import(text: str, work: Path) -> bool:
    from gpudiag.importing import ImportError_, import_files

    path = work / "fuzz.txt"
    path.write_bytes(text.encode("utf-8", errors="surrogatepass"))
    try:
        snapshot = import_files([str(path)])
    except ImportError_:
        return False
    _snapshot_one_line(snapshot)
    return True


def _rules(text: str, work: Path) -> bool:
    from gpudiag.rule_operators import RuleError
    from gpudiag.rulefile import merge_rules

    try:
        merge_rules([("fuzz.toml", text)])
    except RuleError:
        return False
    return True


def _replay(text: str, work: Path) -> bool:
    from gpudiag.nvml import NvmlError, ReplayBackend, ReplayError

    path = work / ("fuzz.json" if text.lstrip().startswith("{") else "fuzz.toml")
    path.write_bytes(text.encode("utf-8", errors="surrogatepass"))
    try:
        backend = ReplayBackend.from_file(path)
    except ReplayError:
        return False
    for device in (None, 0, 1):  # what the probes ask first: answered or an NvmlError
        for function in ("nvmlDeviceGetCount", "nvmlDeviceGetName", "nvmlDeviceGetClockInfo"):
            with contextlib.suppress(NvmlError):
                backend.call(function, device, *((0,) if function.endswith("Info") else ()))
    return True


def _written(text: str, work: Path) -> Path:
    """The fuzz input as a file a loader reads (lone surrogates kept, as bytes)."""
    path = work / "fuzz.json"
    path.write_bytes(text.encode("utf-8", errors="surrogatepass"))
    return path


def _capture(text: str, work: Path) -> bool:
    from gpudiag import capture
    from gpudiag.nvml import NvmlError

    path = _written(text, work)
    try:
        host, nvml, _ = capture.load(path)
    except capture.CaptureError:
        return False
    for name in ("/proc/cpuinfo", "/sys/devices/system/node/online", "/etc/os-release"):
        host.read(name)  # a recorded file, or a status saying it was not recorded
    host.listdir("/sys/bus/pci/devices")
    with contextlib.suppress(NvmlError):
        nvml.backend.call("nvmlDeviceGetCount", None)
        nvml.backend.call("nvmlDeviceGetName", 0)
    return True


_CONTROLS = frozenset("\x1b\x07\x9b\x7f\r\x00")
# what str.splitlines breaks a line at, and a tab: never in a one-line field
_LINE_BREAKS = frozenset("\n\r\t\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")


def _printable(*texts: str) -> None:
    """A loader's output with a control character is a crash (it reaches a terminal)."""
    for text in texts:
        if not _CONTROLS.isdisjoint(text):
            raise AssertionError(f"a control character passed the loader: {text[:80]!r}")


def _one_line(*texts: str) -> None:
    """A one-line field (inputs.one_line) with a line break or tab is a crash."""
    for text in texts:
        if not _LINE_BREAKS.isdisjoint(text):
            raise AssertionError(f"a line break in a one-line field: {text[:80]!r}")


def _no_forged_line(text: str) -> None:
    """A report none of whose lines a field's line break started ('FORGED ...')."""
    for line in text.splitlines():
        if line.lstrip(" -|*#>").startswith(FORGED):
            raise AssertionError(f"a report line forged by a line break: {line[:80]!r}")


def _snapshot_one_line(snapshot: Any) -> None:
    """Every one-line field of a loaded snapshot is one line."""
    readings = [r for p in snapshot.probes for r in p.readings]
    readings += [r for f in snapshot.findings for r in f.evidence]
    _one_line(snapshot.host, snapshot.gpudiag_version)
    _one_line(*(t for p in snapshot.probes for t in (p.name, p.title)))
    _one_line(*(t for f in snapshot.findings for t in (f.rule_id, f.subject, f.title)))
    _one_line(*(t for k in snapshot.kernels for t in (k.kernel, k.device, k.metric, k.unit)))
    for r in readings:
        values = r.value if isinstance(r.value, list) else [r.value]
        _one_line(r.key, r.unit, r.source, *(v for v in values if isinstance(v, str)))


def _fleet(text: str, work: Path) -> bool:
    """The fleet's loader and its report, the file beside a clean seed read first: a file
    of the shape of one already read takes the fast path whole (its values into the
    node's float64 array without a check of each), where a number no reading holds
    overflowed. Accepted: the fuzzed file was read (not skipped)."""
    from gpudiag.fleet.analysis import analyse
    from gpudiag.fleet.load import load_fleet
    from gpudiag.fleet.report import report_text

    folder = work / "fleet"
    if not folder.is_dir():
        folder.mkdir()
        (folder / "a-clean.json").write_text(snapshot_seed(as_json=True))
    _written(text, folder).rename(folder / "b-fuzz.json")
    loaded = load_fleet([folder], workers=1)
    _printable(*loaded.bad)
    for run in loaded.runs:
        _printable(run.host, run.path, *(s for f in run.findings for s in f))
        _one_line(run.host, *(s for f in run.findings for s in f))
    report = report_text(analyse(loaded))
    _printable(report)
    _no_forged_line(report)
    return len(loaded.runs) == 2


def _nvml(text: str, work: Path) -> bool:
    """A capture's NVML answers (and host name) through the probes that read them, the
    rules, and the export's plain data: `--replay CAPTURE --export -` cut to the host and
    GPU probes (each run as the session runs it, on this thread) and the GPU rules. A
    number no reading holds must be refused when the capture is read (it overflowed a
    reading-vs-reading rule); a probe that raises, or a reading not one line, is a crash."""
    from gpudiag import capture
    from gpudiag.model import ProbeStatus, Snapshot
    from gpudiag.probe import ProbeContext, _run_one
    from gpudiag.probes import default_probes
    from gpudiag.rulefile import load_rules
    from gpudiag.session import with_findings
    from gpudiag.snapshot import snapshot_to_dict

    path = _written(text, work)
    try:
        host, nvml, _ = capture.load(path)
    except capture.CaptureError as exc:
        _printable(str(exc))
        return False
    context = ProbeContext(host=host, nvml=nvml)
    results = [_run_one(p, context) for p in default_probes() if p.name in ("host", "gpu")]
    for result in results:
        if result.status is ProbeStatus.ERROR:
            raise AssertionError(f"probe {result.name} raised: {result.error[:200]}")
    hostname = next((r.value for p in results for r in p.readings if r.key == "host.hostname"), "")
    snapshot = Snapshot(str(hostname), "2026-11-23T00:00:00Z", "0.1.0", probes=tuple(results))
    snapshot = with_findings(snapshot, [r for r in load_rules() if r.applies_to == "gpu"])
    _snapshot_one_line(snapshot)
    _printable(snapshot.host)
    _no_forged_line("\n".join(f"{f.subject}: {f.message}" for f in snapshot.findings))
    snapshot_to_dict(snapshot)
    return True


def nvml_seed() -> str:
    """The one-GPU capture with its host name recorded and its NVLink answers left out
    (the probe then reads every link as not recorded: a tenth of the time)."""
    import json

    data = json.loads(capture_seed())
    device = data["nvml"]["devices"][0]
    for function in [f for f in device if "NvLink" in f]:
        del device[function]
    for name in ("/proc/sys/kernel/hostname", "/etc/hostname"):
        data["host"]["files"][name] = {"text": "node-1\n"}
    return json.dumps(data, indent=1)


def _samples(text: str, work: Path) -> bool:
    """A capture's samples as `gpudiag --replay CAPTURE watch` reads them."""
    from gpudiag import capture
    from gpudiag.nvml import NvmlError

    path = _written(text, work)
    try:
        _, _, data = capture.load(path)
        series = capture.recorded_samples(data)
    except capture.CaptureError as exc:
        _printable(str(exc))
        return False
    for _, nvml in series:
        with contextlib.suppress(NvmlError):
            nvml.backend.call("nvmlDeviceGetCount", None)
            nvml.backend.call("nvmlDeviceGetPowerUsage", 0)
    return True


def _healthcheck(text: str, work: Path) -> bool:
    """gpudiag-slurm-healthcheck's settings file, then the command line it stands for."""
    from gpudiag.cli import build_parser
    from gpudiag.commands.common import UsageError
    from gpudiag.health import HealthError, config_arguments

    path = work / "slurm-healthcheck.toml"
    path.write_bytes(text.encode("utf-8", errors="surrogatepass"))
    try:
        arguments = config_arguments(path)
        build_parser().parse_args(arguments)
    except (HealthError, UsageError) as exc:
        _printable(str(exc))
        return False
    return True


LOADERS: dict[str, Callable[[str, Path], bool]] = {
    "snapshot": _snapshot,
    "import": _import,
    "rules": _rules,
    "replay": _replay,
    "capture": _capture,
    "nvml": _nvml,
    "fleet": _fleet,
    "samples": _samples,
    "healthcheck": _healthcheck,
}


def work_dir() -> Path:
    """A scratch folder for loaders that read files."""
    return Path(tempfile.mkdtemp(prefix="gpudiag-fuzz-"))
