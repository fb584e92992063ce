"""`nvidia-smi -q` text: one output, or several one after another (a bug report, an
exporter's bundle), whole or pasted with lines left out or cut short at the end."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial

from gpudiag.catalog import normalize_bus_id
from gpudiag.importing.common import (
    ABSENT,
    key_of,
    reading_of,
    status_of,
    text_value,
)
from gpudiag.importing.gpus import (
    FIELDS,
    ecc_readings,
    fabric_health,
    fabric_status,
    field_readings,
    mig_instances,
    node_readings,
    throttle_name,
    throttle_reading,
    tlimit_readings,
    with_ecc_totals,
)
from gpudiag.model import Reading, ReadingStatus


@dataclass
class Node:
    """One line of `nvidia-smi -q`: a label, its value (may be None) and nested lines."""

    value: str | None = None
    children: dict[str, Node] = field(default_factory=dict)
    entries: list[tuple[str, Node]] = field(default_factory=list)  # in order, repeats kept

    def find(self, path: str) -> Node | None:
        node: Node | None = self
        for part in path.split("/"):
            if node is None:
                return None
            node = node.children.get(part)
        return node

    def walk(self) -> Iterator[tuple[str, Node]]:
        for label, child in self.children.items():
            yield label, child
            yield from child.walk()


def parse_q_text(text: str) -> tuple[dict[str, str], list[tuple[str, Node]]]:
    """`nvidia-smi -q` -> (header fields, [(GPU bus id, tree of its lines)])."""
    header: dict[str, str] = {}
    gpus: list[tuple[str, Node]] = []
    stack: list[tuple[int, Node]] = []
    for raw_line in text.replace("\r\n", "\n").split("\n"):
        line = raw_line.rstrip()
        if not line.strip() or line.startswith("="):
            continue
        indent = len(line) - len(line.lstrip(" "))
        label, sep, value = line.strip().partition(":")
        label = label.strip()
        if indent == 0:
            match = re.match(
                r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])$", line.strip()
            )
            if match:
                root = Node()
                gpus.append((match.group(1), root))
                stack = [(0, root)]
            elif sep:
                header[label] = value.strip()
            continue
        if not stack:
            continue
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if not stack:
            continue
        node = Node(value.strip() if sep else None)
        stack[-1][1].children.setdefault(label, node)
        stack[-1][1].entries.append((label, node))
        stack.append((indent, node))
    return header, gpus


def _q_value(tree: Node, path: str) -> str | None:
    """The value at `path`, or the placeholder a whole section was printed as
    ('Remapped Rows : N/A' holds no fields: each is N/A), or None when absent."""
    node = tree
    for part in path.split("/"):
        child = node.children.get(part)
        if child is None:
            placeholder = node is not tree and node.value and status_of(node.value)
            return node.value if placeholder else None
        node = child
    return node.value


def _q_mig(index: int, tree: Node, prefix: str) -> list[Reading]:
    """MIG devices of a GPU in MIG mode: 'MIG Device' blocks (R590 prints them in the
    GPU's section, older drivers under 'MIG Devices'); none where MIG is off."""
    current = _q_value(tree, "MIG Mode/Current")
    if current is None or current.strip() != "Enabled":
        return []
    holder = tree.children.get("MIG Devices", tree)
    if holder is not tree and holder.value is not None and holder.value.strip() == "None":
        return [
            Reading(
                key_of("gpu.{gpu}.mig.instances", gpu=index), [], source=f"{prefix}/MIG Devices"
            )
        ]
    blocks = [node for label, node in holder.entries if label == "MIG Device"]
    if not blocks:
        return []
    devices = [
        (
            _q_value(b, "Index"),
            _q_value(b, "GPU Instance ID"),
            _q_value(b, "Compute Instance ID"),
            _q_value(b, "Shared FB Memory Usage/Total") or _q_value(b, "FB Memory Usage/Total"),
        )
        for b in blocks
    ]
    return [mig_instances(index, devices, f"{prefix}/MIG Device")]


def _q_processes(index: int, tree: Node, prefix: str) -> list[Reading]:
    """gpu.N.processes.{compute,graphics}: the PIDs by type ('C', 'G', 'C+G')."""
    processes = tree.children.get("Processes")
    if processes is None:
        return []
    source = f"{prefix}/Processes"
    if processes.value is not None and status_of(processes.value):
        return [
            reading_of(
                key_of(f"gpu.{{gpu}}.processes.{kind}", gpu=index),
                processes.value,
                text_value,
                "",
                source,
            )
            for kind in ("compute", "graphics")
        ]
    entries = [
        (int(node.value), node)
        for label, node in processes.entries
        if label == "Process ID" and node.value and node.value.strip().isdigit()
    ]
    readings = []
    for kind, letter in (("compute", "C"), ("graphics", "G")):
        pids = [pid for pid, node in entries if letter in (_q_value(node, "Type") or "")]
        readings.append(
            Reading(key_of(f"gpu.{{gpu}}.processes.{kind}", gpu=index), pids, source=source)
        )
    return readings


# what a paste puts where it left lines out
ELISIONS = frozenset({"...", "[...]", "\u2026", "[\u2026]", "<snip>", "[snip]", "[snipped]"})
CUT = "the paste is cut here (lines replaced by '...'): not known"


def _is_cut(tree: Node) -> bool:
    """Whether a GPU's section had lines left out of the paste."""
    return any(label in ELISIONS for label, _ in tree.walk())


def _said_cut(readings: list[Reading]) -> list[Reading]:
    """A cut section's readings that are absent say so: unknown, never 'not there'."""
    return [
        Reading.failed(r.key, ReadingStatus.MISSING, CUT, r.source, r.unit)
        if r.status is ReadingStatus.MISSING and r.reason == ABSENT
        else r
        for r in readings
    ]


NVSMI_BANNER = re.compile(r"^==============NVSMI LOG==============\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Cut:
    """Where a -q file stops part-way through its last GPU's section."""

    bus_id: str
    kept: str  # the text without its last line (it may be cut mid-value)
    open_section: str | None  # the top-level section the cut is inside, None between two


def ends_cut(text: str) -> Cut | None:
    """Where the file stops part-way through its last GPU's section: a whole -q section
    (it starts with 'Product Name') always prints 'Processes', and this one does not.
    Its last line may be cut mid-value, so it is dropped; the top-level section that line
    is nested in is the one the cut can have hidden lines of (the sections before it are
    whole). None where the last section is whole, or cannot be told whole (a `-q -d` file
    prints only the sections asked for)."""
    last = [p for p in NVSMI_BANNER.split(text) if p.strip()] or [text]
    gpus = parse_q_text(last[-1])[1]
    if not gpus:
        return None
    bus_id, tree = gpus[-1]
    if "Product Name" not in tree.children or "Processes" in tree.children:
        return None
    kept, _, dropped = text.rstrip().rpartition("\n")
    product = next((x for x in last[-1].splitlines() if "Product Name" in x), "    ")
    top = len(product) - len(product.lstrip(" "))  # a GPU section's top-level indent
    nested = len(dropped) - len(dropped.lstrip(" ")) > top
    kept_tree = parse_q_text(kept)[1][-1][1]
    open_section = kept_tree.entries[-1][0] if nested and kept_tree.entries else None
    return Cut(bus_id, kept, open_section)


def _merged_q(text: str) -> tuple[dict[str, str], list[tuple[str, Node]]]:
    """A file of one or several -q outputs one after another (a bug report, an
    exporter's bundle: idle, then under load): the first output's header, and each GPU
    once, by bus id, as the first output that lists it shows it."""
    parts = [p for p in NVSMI_BANNER.split(text) if p.strip()] or [text]
    header: dict[str, str] = {}
    gpus: dict[str, tuple[str, Node]] = {}
    for part in parts:
        part_header, part_gpus = parse_q_text(part)
        if not header and "Driver Version" in part_header:
            header = part_header
        for bus_id, tree in part_gpus:
            gpus.setdefault(normalize_bus_id(bus_id), (bus_id, tree))
    if not header:
        header = parse_q_text(parts[0])[0]
    return header, list(gpus.values())


def _ended(bus_id: str) -> str:
    return f"the file stops part-way through GPU {bus_id}'s section: not known"


def q_readings(text: str) -> list[Reading]:
    cut_at_end = ends_cut(text)
    if cut_at_end is not None:
        text = cut_at_end.kept
    header, gpus = _merged_q(text)
    readings = node_readings(
        header.get("Driver Version"),
        header.get("CUDA Version"),
        header.get("Attached GPUs"),
        "nvidia-smi-q",
        len(gpus),
    )
    cut = any(line.strip() in ELISIONS for line in text.splitlines())
    if cut and header.get("Attached GPUs") is None:  # a count of a cut paste's GPUs: wrong
        readings = [
            Reading.failed(r.key, ReadingStatus.MISSING, f"{CUT}: how many GPUs", r.source, "GPUs")
            if r.key == "nvml.gpu_count"
            else r
            for r in readings
        ]
    ended = cut_at_end is not None and gpus[-1][0] == cut_at_end.bus_id
    if ended and header.get("Attached GPUs") is None:  # GPUs after the cut are not listed
        reason = f"{_ended(gpus[-1][0])}: how many GPUs"
        readings = [
            Reading.failed(r.key, ReadingStatus.MISSING, reason, r.source, "GPUs")
            if r.key == "nvml.gpu_count"
            else r
            for r in readings
        ]
    for index, (bus_id, tree) in enumerate(gpus):
        source_prefix = f"nvidia-smi-q:GPU {bus_id}"
        readings.append(Reading(key_of("gpu.{gpu}.health", gpu=index), "ok", source=source_prefix))
        sections = set(tree.children)
        find = partial(_q_value, tree)
        if ended and index == len(gpus) - 1:  # what the file does not reach is unknown
            assert cut_at_end is not None
            readings.extend(_ended_readings(index, tree, cut_at_end, source_prefix))
            continue
        if _is_cut(tree):  # a section left out may be one the GPU has: every field is asked
            every = {p.split("/")[0] for spec in FIELDS for p in spec.text}
            readings.extend(_said_cut(field_readings(index, find, False, source_prefix, every)))
        else:
            readings.extend(field_readings(index, find, False, source_prefix, sections))
        if "ECC Errors" in sections:
            readings.extend(ecc_readings(index, find, False, source_prefix))
        if "Temperature" in sections:
            readings.extend(tlimit_readings(index, find, False, source_prefix))
        readings.extend(fabric_status(index, find, False, source_prefix))
        readings.extend(fabric_health(index, find, False, source_prefix))
        readings.extend(_q_mig(index, tree, source_prefix))
        readings.extend(_q_processes(index, tree, source_prefix))
        reasons = tree.find("Clocks Event Reasons") or tree.find("Clocks Throttle Reasons")
        if reasons is None:
            continue
        active = (
            None
            if reasons is None
            else [
                name
                for label, node in reasons.walk()
                if node.value and node.value.strip() == "Active" and (name := throttle_name(label))
            ]
        )
        readings.append(throttle_reading(index, active, f"{source_prefix}/Clocks Event Reasons"))
    return list(with_ecc_totals(tuple(readings)))


def _ended_readings(index: int, tree: Node, cut: Cut, prefix: str) -> list[Reading]:
    """The readings of a GPU whose section the file stops in: every whole line it shows
    is read; what the cut can have hidden (the rest of the section it stops in, and the
    sections after it) is unknown, saying so; a field absent from a section that ends
    before the cut is missing, as in a whole file."""
    find = partial(_q_value, tree)
    every = {p.split("/")[0] for spec in FIELDS for p in spec.text}
    readings = field_readings(index, find, False, prefix, every)
    readings += ecc_readings(index, find, False, prefix)
    readings += _q_processes(index, tree, prefix) or [
        Reading.failed(
            key_of(f"gpu.{{gpu}}.processes.{kind}", gpu=index), ReadingStatus.MISSING, "", prefix
        )
        for kind in ("compute", "graphics")
    ]
    label = next(
        (n for n in ("Clocks Event Reasons", "Clocks Throttle Reasons") if n in tree.children), None
    )
    reasons = tree.children.get(label) if label else None
    source = f"{prefix}/Clocks Event Reasons"
    active = (
        []
        if reasons is None
        else [
            name
            for label, node in reasons.walk()
            if node.value and node.value.strip() == "Active" and (name := throttle_name(label))
        ]
    )
    if reasons is None:
        readings.append(throttle_reading(index, None, source))
    elif label == cut.open_section:  # its whole lines are shown, the rest is not known
        shown = ", ".join(active) or "none"
        reason = f"{_ended(cut.bus_id)} (its whole lines show active: {shown})"
        key = key_of("gpu.{gpu}.throttle_reasons", gpu=index)
        readings.append(Reading.failed(key, ReadingStatus.MISSING, reason, source))
    else:
        readings.append(throttle_reading(index, active, source))
    whole = set(tree.children) - {cut.open_section}
    reason = _ended(cut.bus_id)
    return [
        Reading.failed(r.key, ReadingStatus.MISSING, reason, r.source, r.unit)
        if r.status is ReadingStatus.MISSING
        and _section_of(r, prefix) not in whole
        and not r.reason.startswith(reason)
        else r
        for r in readings
    ]


def _section_of(reading: Reading, prefix: str) -> str:
    """The top-level -q section a reading of this GPU was looked for in."""
    return reading.source.removeprefix(f"{prefix}/").split("/")[0].split("+")[0]
