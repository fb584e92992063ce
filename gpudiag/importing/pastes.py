"""What is pasted on GPU bring-up besides whole nvidia-smi outputs: a `nvidia-smi -q | grep
-A n Fabric` section, kernel-log lines with NVIDIA Xids, and a `dcgmi diag` table; and,
for anything else, one line that says what the file looks like.

Each is read into the readings the rules already judge: the fabric state and status
(NVL008, NVL009), the fault readings the live faults probe makes from the kernel log
(GPU026, GPU027), and DCGM's per-test verdicts (DCGM001).
"""

from __future__ import annotations

import re
from functools import partial

from gpudiag import catalog
from gpudiag.importing.common import ANSI, ImportError_, key_of
from gpudiag.importing.gpus import fabric_health, fabric_status, field_readings
from gpudiag.importing.query_text import _q_value, parse_q_text
from gpudiag.model import Reading, ReadingStatus

# ------------------------------------------------------------------ a Fabric section

_FABRIC = re.compile(r"^(\s*)Fabric\s*$")
_STATE = re.compile(r"^\s*State\s*:", re.MULTILINE)
_BUS_ID = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*$")


def is_fabric(text: str) -> bool:
    """Whether the text is one or more Fabric sections of `nvidia-smi -q` (grep -A)."""
    return any(_FABRIC.match(line) for line in text.splitlines()) and bool(_STATE.search(text))


def _fabric_blocks(text: str) -> list[list[str]]:
    """Each Fabric section's lines (its own line first), as grep prints them: a section
    ends where a line is not indented deeper than 'Fabric', at grep's '--' or a blank."""
    blocks: list[list[str]] = []
    current: list[str] | None = None
    indent = 0
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.rstrip()
        if match := _FABRIC.match(line):
            current, indent = [line], len(match.group(1))
            blocks.append(current)
            continue
        depth = len(line) - len(line.lstrip(" \t"))
        if current is not None and line.strip() and line.strip() != "--" and depth > indent:
            current.append(line)
        else:
            current = None
    return blocks


def parse_fabric(text: str) -> list[Reading]:
    """Fabric sections -> gpu.N.fabric.state, .status and .health_flags, read as from a
    whole -q file. A grep prints no GPU's name: the Nth section is taken as GPU N, the
    order nvidia-smi -q lists them in, and its bus id is missing, saying so."""
    readings: list[Reading] = []
    for index, block in enumerate(_fabric_blocks(text)):
        shift = len(block[0]) - len(block[0].lstrip(" \t"))
        lines = ["    " + line.expandtabs(4)[shift:] for line in block]
        tree = parse_q_text("GPU 00000000:00:00.0\n" + "\n".join(lines))[1][0][1]
        find = partial(_q_value, tree)
        prefix = f"pasted Fabric section {index + 1}"
        readings += field_readings(index, find, False, prefix, {"Fabric"})
        readings += fabric_status(index, find, False, prefix)
        readings += fabric_health(index, find, False, prefix)
        reason = (
            f"the paste names no GPU: GPU {index} is its Fabric section {index + 1}, "
            "in the order nvidia-smi -q lists the GPUs"
        )
        key = key_of("gpu.{gpu}.pci.bus_id", gpu=index)
        readings.append(Reading.failed(key, ReadingStatus.MISSING, reason, prefix))
    if not readings:
        raise ImportError_("no Fabric section with a State line")
    return readings


# ------------------------------------------------------------------ kernel-log Xid lines

# 'NVRM: Xid (PCI:0000:10:1c): 63, pid=..., ...': the form probes/faults.py reads (the
# same pattern: the importer does not load the probe), after a dmesg, journalctl or
# syslog prefix; the bus address names the device, its function is 0
_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})[^)]*\): (\d+)"
)


def is_kernel_log(text: str) -> bool:
    """Whether the text holds kernel-log Xid lines."""
    return bool(_XID.search(text))


# a dmesg line's seconds since boot ('[ 5.000000] NVRM: ...'), as probes/faults.py reads it
_DMESG_SECONDS = re.compile(r"^\[\s*(\d+\.\d+)\]")


def parse_xid_lines(text: str) -> list[Reading]:
    """Kernel-log lines -> the readings the live faults probe makes of them:
    faults.xid.total, faults.xid.codes and, per code, its count, its GPUs and (where the
    lines carry dmesg's seconds since boot) when it was last seen. Only the lines pasted
    are counted: the source says so."""
    source = "pasted kernel log (the Xid lines it holds)"
    events: list[tuple[int, str, float | None]] = []
    for line in text.splitlines():
        if (match := _XID.search(line)) is not None:
            seconds = _DMESG_SECONDS.match(line.strip())
            when = float(seconds.group(1)) if seconds else None
            events.append((int(match.group(2)), f"{match.group(1).lower()}.0", when))
    if not events:
        raise ImportError_("no NVRM Xid line")
    codes = sorted({code for code, _, _ in events})
    readings = [
        Reading(key_of("faults.xid.total"), len(events), source=source),
        Reading(key_of("faults.xid.codes"), codes, source=source),
    ]
    for code in codes:
        mine = [(pci, when) for c, pci, when in events if c == code]
        readings.append(Reading(key_of("faults.xid.{xid}.count", xid=code), len(mine), "", source))
        gpus = sorted({pci for pci, _ in mine})
        readings.append(Reading(key_of("faults.xid.{xid}.gpus", xid=code), gpus, "", source))
        times = [when for _, when in mine if when is not None]
        if times:
            key = key_of("faults.xid.{xid}.last_seen", xid=code)
            readings.append(Reading(key, max(times), "s since boot", source))
    return readings


# ------------------------------------------------------------------ dcgmi diag

DIAG_TEST = catalog.volatile(
    "dcgm.diag.{test}", help="a dcgmi diag test's result as printed: Pass, Fail - GPU 2, Skip"
)
DIAG_FAILED = catalog.volatile("dcgm.diag.failed", help="the dcgmi diag tests that failed")
DIAG_WARNINGS = catalog.volatile("dcgm.diag.warnings", help="dcgmi diag's Warning rows")
DCGM_READINGS = catalog.declare("DCGM diagnostics", DIAG_TEST, DIAG_FAILED, DIAG_WARNINGS)

_ROW = re.compile(r"^\|([^|]*)\|(.*)\|\s*$")
# rows that are no test: the metadata, and the notes printed under a test
_NOT_TESTS = {"dcgm version", "driver version detected", "gpu device ids detected"}
_NOTES = {"info", "warning", "error"}


def is_dcgm_diag(text: str) -> bool:
    """Whether the text is dcgmi diag's table (its 'Diagnostic | Result' header)."""
    return bool(re.search(r"^\|\s*Diagnostic\s*\|\s*Result\s*\|", text, re.MULTILINE))


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def parse_dcgm_diag(text: str) -> list[Reading]:
    """`dcgmi diag -r N` -> dcgm.diag.<test> for each test row (its result as printed),
    dcgm.diag.failed (the tests whose result is Fail) and dcgm.diag.warnings (each
    Warning or Error row, its wrapped lines joined)."""
    source = "pasted dcgmi diag table"
    results: dict[str, tuple[str, str]] = {}
    notes: list[list[str]] = []
    last = ""
    for raw in ANSI.sub("", text).splitlines():
        match = _ROW.match(raw.strip())
        if match is None:
            continue
        name, cell = match.group(1).strip(), match.group(2)
        value = cell.strip()
        chunk = cell[1:-2] if len(cell) > 3 else value  # ' ' + the wrapped text + '  '
        if name.startswith("-") or name == "Diagnostic":
            continue
        if not name:  # a wrapped line of the row above
            if last == "note" and notes:
                notes[-1].append(chunk)
            continue
        if name.lower() in _NOTES:
            last = "note" if name.lower() != "info" else ""
            if last:
                notes.append([chunk])
            continue
        last = ""
        if name.lower() in _NOT_TESTS:
            continue
        results.setdefault(_slug(name), (name, value))
    if not results:
        raise ImportError_("a dcgmi diag table without test rows")
    readings = [DIAG_TEST.reading(value, source, test=slug) for slug, (_, value) in results.items()]
    failed = [name for name, value in results.values() if value.lower().startswith("fail")]
    readings.append(DIAG_FAILED.reading(failed, source))
    # dcgmi wraps a note at its column, mid-word: the pieces are joined as printed
    warnings = [" ".join("".join(part).split())[:500] for part in notes]
    readings.append(DIAG_WARNINGS.reading(warnings, source))
    return readings


# ------------------------------------------------------------------ anything else


def what_it_looks_like(text: str) -> str:
    """One line that says what a file that is none of the formats looks like."""
    stripped = text.strip()
    lines = stripped.splitlines()
    first = " ".join(lines[0].split())[:60] if lines else ""
    if stripped.startswith(("{", "[")):
        kind = "JSON"
    elif stripped.startswith("<"):
        kind = "XML or HTML that is not nvidia-smi -q -x"
    elif re.match(r"^\+-+\+", stripped) or "NVIDIA-SMI" in stripped[:400]:
        kind = "nvidia-smi's summary table (plain `nvidia-smi`), which holds too little"
    elif len(lines) > 1 and lines[0].count(",") >= 2 and lines[1].count(",") == lines[0].count(","):
        kind = "CSV (nvidia-smi --query-gpu?), which is not imported"
    elif re.search(r"^\[\s*\d+\.\d+\]|kernel:", stripped, re.MULTILINE):
        kind = "a kernel log without NVRM Xid lines"
    else:
        kind = "text"
    return f"it looks like {kind}: {len(lines)} line{'s' * (len(lines) != 1)}, starting {first!r}"
