"""Import of nvidia-smi outputs into readings with the same keys a live probe gives:
`nvidia-smi -q -x` XML (DTD v10 to v13), `nvidia-smi -q` text, an nvidia-bug-report.log
holding either, `nvidia-smi topo -m`, `nvidia-smi nvlink -s` and `nvlink -e`; one module
per format. What is pasted on bring-up besides them (a -q Fabric section, kernel-log Xid
lines, a dcgmi diag table) is read by gpudiag/importing/pastes.py.

`detect` tells which format a file is and `import_text` reads it with that format's module;
`import_files` makes a snapshot of files. A field that is absent is missing; 'N/A',
'[Not Supported]' and 'deprecated' are unsupported; '[Insufficient Permissions]' is
needs-root; an error text is an error (gpudiag/importing/common.py).
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timezone
from pathlib import Path

from gpudiag import __version__
from gpudiag.importing import common, pastes
from gpudiag.importing.bug_report import extract_from_bug_report, with_bundled
from gpudiag.importing.burn import is_gpu_burn, parse_gpu_burn
from gpudiag.importing.common import ImportError_
from gpudiag.importing.gpus import lost_gpus, with_lost_gpus, with_unreached
from gpudiag.importing.nvlink import is_error_counters, parse_nvlink
from gpudiag.importing.pastes import (
    is_dcgm_diag,
    is_fabric,
    is_kernel_log,
    parse_dcgm_diag,
    parse_fabric,
    parse_xid_lines,
    what_it_looks_like,
)
from gpudiag.importing.query_text import q_readings
from gpudiag.importing.query_xml import xml_readings
from gpudiag.importing.topo import parse_topo_matrix
from gpudiag.inputs import InputError, printable, read_input
from gpudiag.model import ProbeResult, ProbeStatus, Reading, Snapshot

__all__ = ["READINGS", "ImportError_", "detect", "import_files", "import_text"]

# the readings the imports make (gpudiag/catalog.py)
READINGS = (*common.READINGS, *pastes.DCGM_READINGS)
# what is pasted besides nvidia-smi's own outputs: detected in this order, after them
PASTES = (
    ("fabric", is_fabric, parse_fabric),
    ("kernel-log", is_kernel_log, parse_xid_lines),
    ("dcgmi-diag", is_dcgm_diag, parse_dcgm_diag),
)


def detect(text: str) -> str:
    """Which format a file is: xml, q, topo, nvlink, nvlink-e (a bug report yields xml or
    q), gpu-burn (a gpu-burn log), or a paste: fabric, kernel-log, dcgmi-diag."""
    stripped = text.lstrip()
    if stripped.startswith(("ERROR:", "Failed to", "NVIDIA-SMI has failed")):
        first = stripped.splitlines()[0].strip()
        raise ImportError_(f"the file holds an nvidia-smi error, not its output: {first}")
    if "<nvidia_smi_log" in text[:4096] or stripped.startswith("<?xml"):
        return "xml"
    if "==============NVSMI LOG==============" in text or re.search(
        r"^GPU [0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:", text, re.MULTILINE
    ):
        return "q"
    if re.search(r"^\s*(\x1b?\[[0-9;]*m)?GPU0(\x1b?\[[0-9;]*m)?\s", text, re.MULTILINE) and (
        "Legend" in text or "CPU Affinity" in text
    ):
        return "topo"
    if is_gpu_burn(text):  # before nvlink: it starts with nvidia-smi -L's lines
        return "gpu-burn"
    if re.search(r"^GPU \d+: .+\n\s*Link \d+:", text, re.MULTILINE) or re.search(
        r"^GPU \d+: .+\(UUID", text, re.MULTILINE
    ):
        return "nvlink-e" if is_error_counters(text) else "nvlink"
    if lost_gpus(text):  # nothing but the error lines of GPUs it could not reach
        return "q"
    for kind, found, _ in PASTES:
        if found(text):
            return kind
    raise ImportError_(
        "not an nvidia-smi -q, -q -x, topo -m or nvlink -s/-e output, a -q Fabric section, "
        f"kernel-log Xid lines or a dcgmi diag table; {what_it_looks_like(text)}"
    )


def import_files(paths: list[str]) -> Snapshot:
    """A snapshot (without findings) of the nvidia-smi outputs in `paths`: one pseudo-probe
    result per file. Raises ImportError_ naming the file and the problem."""
    results = []
    host = "imported"
    seen: dict[bytes, str] = {}  # each file's content, once: the same file twice is read once
    held: dict[str, tuple[str, Reading]] = {}
    created = ""  # what identifies a GPU, and the file it is from
    for path in paths:
        try:  # '-' is standard input; an nvidia-bug-report.log.gz is unpacked
            raw = read_input(path, stdin_ok=True, gzip_ok=True)
        except InputError as exc:
            raise ImportError_(str(exc)) from None
        digest = hashlib.sha256(raw).digest()
        if digest in seen:
            continue
        seen[digest] = path
        if not raw.strip():
            raise ImportError_(f"{path}: file is empty")
        if b"\x00" in raw:
            raise ImportError_(f"{path}: binary data, not an nvidia-smi output")
        text = printable(raw.decode("utf-8", errors="replace"))
        try:
            kind, readings = import_text(text)
        except ValueError as exc:  # ImportError_, or a malformed number in a table
            raise ImportError_(f"{path}: {exc}") from None
        except RecursionError:
            raise ImportError_(f"{path}: nested too deeply") from None
        _refuse_conflicts(path, readings, held)
        if match := re.search(r"<hostname>([^<]+)</hostname>", text):
            host = match.group(1).strip()
        elif host == "imported" and path != "-":
            host = host_from_name(path)
        created = created or file_time(text)
        results.append(
            ProbeResult(
                name=f"import-{kind}",
                title=f"imported {'standard input' if path == '-' else Path(path).name}",
                status=ProbeStatus.OK,
                duration_s=0.0,
                readings=tuple(readings),
            )
        )
    return Snapshot(
        host=host,
        created=created or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        gpudiag_version=__version__,
        command_line=("gpudiag", "import", *paths),
        probes=tuple(results),
    )


_TIMESTAMP = re.compile(r"<timestamp>([^<]{1,64})</timestamp>|^Timestamp\s*:\s*(.{1,64})$", re.M)


def file_time(text: str) -> str:
    """When the output was taken, from its own Timestamp (-q 'Timestamp : Tue Nov 24
    23:37:56 2026', -q -x <timestamp>), as the snapshot's created time; '' where the file
    has none. nvidia-smi prints the machine's clock without its zone: it is taken as UTC."""
    match = _TIMESTAMP.search(text)
    if match is None:
        return ""
    shown = " ".join((match.group(1) or match.group(2)).split())
    try:
        when = datetime.strptime(shown, "%a %b %d %H:%M:%S %Y")
    except ValueError:
        return ""
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def host_from_name(path: str) -> str:
    """The host of an import whose files name none: the first file's name without its
    extensions ('node017.xml' -> 'node017'), so that imports of many machines are many
    nodes; 'imported' where nothing is left of it."""
    name = Path(path).name
    while (stem := Path(name).stem) != name and Path(name).suffix.lower() in _EXTENSIONS:
        name = stem
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:63] or "imported"


_EXTENSIONS = {".xml", ".txt", ".log", ".gz", ".out"}


# what names one GPU: two files that give one GPU index two of these are two machines (or
# two different nvidia-smi -i choices), never one snapshot
IDENTIFYING = (".uuid", ".serial", ".pci.bus_id", ".name")


def _refuse_conflicts(
    path: str, readings: list[Reading], held: dict[str, tuple[str, Reading]]
) -> None:
    """Raise ImportError_ where `path` gives a GPU another file gave otherwise (its UUID,
    serial, bus id or name); else note what it gives in `held`."""
    for reading in readings:
        if (
            not reading.ok
            or not reading.key.startswith("gpu.")
            or not reading.key.endswith(IDENTIFYING)
        ):
            continue
        other = held.setdefault(reading.key, (path, reading))
        if other[1].value != reading.value:
            raise ImportError_(
                f"{path} and {other[0]} conflict: {reading.key} is {reading.value!r} in one and "
                f"{other[1].value!r} in the other (two machines? import each on its own)"
            )


def import_text(text: str) -> tuple[str, list[Reading]]:
    """(format, readings) of one file's text."""
    kind = detect(text)
    if kind == "xml":
        readings = with_lost_gpus(xml_readings(extract_from_bug_report(text)), lost_gpus(text))
        return kind, common.held(with_bundled(text, with_unreached(readings)))
    if kind == "q":
        readings = with_lost_gpus(q_readings(extract_from_bug_report(text)), lost_gpus(text))
        return kind, common.held(with_bundled(text, with_unreached(readings)))
    if kind == "topo":
        return kind, parse_topo_matrix(text)
    if kind == "gpu-burn":
        return kind, parse_gpu_burn(text)
    for name, _, parse in PASTES:
        if kind == name:
            return kind, parse(text)
    return kind, parse_nvlink(text)
