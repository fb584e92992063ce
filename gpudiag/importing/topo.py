"""`nvidia-smi topo -m`: the GPU and NIC matrix, the CPU and NUMA affinity."""

from __future__ import annotations

import re

from gpudiag.importing.common import (
    ANSI,
    ImportError_,
    integer,
    key_of,
    reading_of,
    text_value,
)
from gpudiag.model import Reading

_TOPO_COLUMN = re.compile(r"GPU NUMA ID|CPU Affinity|NUMA Affinity|\S+")
_CPU_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


def split_glued_affinity(cell: str) -> tuple[str, str] | None:
    """'0-45,92-1370' (CPU affinity and NUMA node printed without a gap) -> ('0-45,92-137',
    '0'); None when no split gives a CPU list. The NUMA node is the last one or two digits;
    where both splits give a list, the one whose ranges are all the same size wins (a
    GPU's CPUs are its socket's cores and their SMT siblings), else the one-digit node."""
    candidates = []
    for digits in (1, 2):
        cpus, node = cell[:-digits], cell[-digits:]
        if not node.isdigit() or not _CPU_LIST.match(cpus):
            continue
        sizes = []
        for part in cpus.split(","):
            low, _, high = part.partition("-")
            if high and int(high) < int(low):
                break
            sizes.append(int(high or low) - int(low) + 1)
        else:
            candidates.append((len(set(sizes)) == 1, -digits, cpus, node))
    if not candidates:
        return None
    _, _, cpus, node = max(candidates)
    return cpus, str(int(node))


def _topo_cells(line: str, header: str, columns: list[str]) -> list[str]:
    """The cells of one matrix row after its label, one per column: tab-separated as
    nvidia-smi prints them (empty cells kept), or space-aligned as pasted. Space-aligned
    cells go to the column they stand under; where that is not clear (spaces lost in the
    paste) they are taken in order. A CPU affinity glued to its NUMA node is split."""
    if "\t" in line:
        cells = [c.strip() for c in line.split("\t")[1:]]
        while len(cells) > len(columns) and "" in cells:
            del cells[len(cells) - 1 - cells[::-1].index("")]  # nvidia-smi's extra tab
        return cells
    tokens = [(m.start(), m.group()) for m in re.finditer(r"\S+", line)][1:]
    if "CPU Affinity" in columns and "NUMA Affinity" in columns and len(tokens) == len(columns) - 1:
        # one cell short: the CPU affinity ran into the NUMA node; take the cells in order
        cells = [token for _, token in tokens]
        cpu = columns.index("CPU Affinity")
        if cpu < len(cells) and (split := split_glued_affinity(cells[cpu])) is not None:
            cells[cpu : cpu + 1] = list(split)
            return cells
    starts = [m.start() for m in _TOPO_COLUMN.finditer(header)]
    placed: dict[int, str] = {}
    for start, token in tokens:
        # the column it starts under (' X ' and NV18 may start a character or two late)
        at = max((i for i, s in enumerate(starts) if s <= start + 2), default=-1)
        if at < 0 or at in placed:
            return [token for _, token in tokens]  # not aligned: in order
        placed[at] = token
    return [placed.get(i, "") for i in range(len(columns))]


def _is_row(line: str) -> bool:
    """Whether a line starting with GPU0 is a row of the matrix: its cells hold 'X' or
    an NVLink count ('NV18'), which no column name is."""
    cells = re.split(r"\s+", line.strip())[1:]
    return any(c == "X" or re.fullmatch(r"NV\d+", c) for c in cells)


def parse_topo_matrix(text: str) -> list[Reading]:
    """`nvidia-smi topo -m` -> topo.gpu.I.J, topo.gpu.I.nic.NAME, gpu.I.cpu_affinity,
    gpu.I.numa_node and gpu.I.memory_numa_node ('GPU NUMA ID', Grace) readings. Reads
    what nvidia-smi prints (tab-separated, with ANSI underlining, or its residue without
    the ESC byte) and what people paste: space-aligned, after a prompt line, with the NIC
    legend, and with the CPU and NUMA affinity glued together on wide CPU lists."""
    lines = [
        ANSI.sub("", line).replace("\r", "").rstrip()
        for line in text.replace("\r\n", "\n").split("\n")
    ]
    starts = [i for i, line in enumerate(lines) if re.match(r"^\s*GPU0(\s|$)", line)]
    # the header names columns; a line whose cells are ' X ' or NV# is the GPU0 row (the
    # header lost to a paste), never the header
    header_index = next((i for i in starts if not _is_row(lines[i])), None)
    if header_index is None and starts:
        raise ImportError_(
            "a topology matrix without its header line: the line starting with GPU0 "
            "holds cells (X, NV#), not column names"
        )
    if header_index is None:
        raise ImportError_("no topology matrix (a header line starting with GPU0)")
    header = lines[header_index]
    if "\t" in header:
        columns = [c.strip() for c in header.split("\t") if c.strip()]
    else:
        columns = _TOPO_COLUMN.findall(header)
    nic_names = {}
    for line in lines:
        if match := re.match(r"^\s*(NIC\d+):\s*(\S+)\s*$", line):
            nic_names[match.group(1)] = match.group(2)
    readings: list[Reading] = []
    source = "nvidia-smi-topo"
    for line in lines[header_index + 1 :]:
        label = line.strip().split("\t")[0].split(" ")[0] if line.strip() else ""
        if not re.match(r"^GPU\d+$", label):
            if label and not label.startswith(("NIC", "GPU")):  # the legend: the matrix ended
                break
            continue
        gpu = int(label[3:])
        values = _topo_cells(line, header, columns)
        for column, value in zip(columns, values, strict=False):
            if column.startswith("GPU") and column[3:].isdigit():
                other = int(column[3:])
                if other != gpu:
                    key = key_of("topo.gpu.{gpu}.{peer}", gpu=gpu, peer=other)
                    readings.append(Reading(key, value, source=source))
            elif column.startswith("NIC"):
                nic = nic_names.get(column, column)
                key = key_of("topo.gpu.{gpu}.nic.{nic}", gpu=gpu, nic=nic)
                readings.append(Reading(key, value, source=source))
            elif column == "CPU Affinity":
                key = key_of("gpu.{gpu}.cpu_affinity", gpu=gpu)
                readings.append(reading_of(key, value, text_value, "", source))
            elif column == "NUMA Affinity":
                key = key_of("gpu.{gpu}.numa_node", gpu=gpu)
                readings.append(reading_of(key, value, integer, "", source))
            elif column == "GPU NUMA ID":
                key = key_of("gpu.{gpu}.memory_numa_node", gpu=gpu)
                readings.append(reading_of(key, value, integer, "", source))
    if not readings:
        raise ImportError_("the topology matrix has no GPU rows")
    return readings
