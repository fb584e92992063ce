"""`nvidia-smi nvlink -s` (each link's state and speed, and the counts per GPU) and
`nvidia-smi nvlink -e` (each link's error counters), with each GPU's name and UUID from
the header line nvidia-smi prints for it."""

from __future__ import annotations

import re

from gpudiag.importing.common import (
    ImportError_,
    integer,
    key_of,
    number,
    reading_of,
    text_value,
)
from gpudiag.model import Reading, ReadingStatus

# 'GPU 6: NVIDIA A100-SXM4-80GB (UUID: GPU-9667d95e-...)'; 'GPU 0: NVIDIA GB300' (no UUID)
_HEADER = re.compile(r"^GPU (\d+): (.*?)\s*(?:\(UUID: ([^)]*)\))?\s*$")
# nvlink -e: 'Link 0: Replay Errors: 0', 'Link 0: CRC Errors: 0'. Its one CRC count is
# taken as the flit CRC (NVML_NVLINK_ERROR_DL_CRC_FLIT, what NVL002 judges): the pastes
# seen (H100, GB300) print no other; checked against no nvidia-smi source. Lines naming
# the flit and data CRC apart, should a driver print them, go to each's own reading.
_COUNTER = re.compile(r"^Link (\d+): ((?:Replay|Recovery|CRC(?: Flit| Data)?) Errors): (.+)$")
COUNTERS = {
    "Replay Errors": "replay",
    "Recovery Errors": "recovery",
    "CRC Errors": "crc_flit",
    "CRC Flit Errors": "crc_flit",
    "CRC Data Errors": "crc_data",
}
# what a paste puts where it left lines out
ELISIONS = frozenset({"...", "[...]", "\u2026", "[\u2026]", "<snip>", "[snip]", "[snipped]"})
CUT = "the paste is cut here (lines replaced by '...'): how many links is not known"


def is_error_counters(text: str) -> bool:
    """Whether the text is `nvidia-smi nvlink -e` (its links' lines name counters)."""
    return any(_COUNTER.match(line.strip()) for line in text.splitlines()[:400])


def header_readings(gpu: int, name: str, uuid: str | None, source: str) -> list[Reading]:
    """The GPU's name and UUID as nvidia-smi's header line for it gives them."""
    out = [reading_of(key_of("gpu.{gpu}.name", gpu=gpu), name, text_value, "", source)]
    if uuid:
        out.append(reading_of(key_of("gpu.{gpu}.uuid", gpu=gpu), uuid, text_value, "", source))
    return out


def parse_nvlink_errors(text: str) -> list[Reading]:
    """`nvidia-smi nvlink -e` -> gpu.N.nvlink.L.errors.{replay,recovery,crc_flit,crc_data}
    (what NVL002-NVL005 judge), with each GPU's name and UUID. Only the counters it
    prints are read: a link an elision ('[...]') hides has no readings, never zeros."""
    readings: list[Reading] = []
    gpu = None
    source = "nvidia-smi-nvlink-e"
    seen: set[int] = set()
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.strip()
        if (header := _HEADER.match(line)) is not None and not line.startswith("GPU 0000"):
            gpu = int(header.group(1))
            seen.add(gpu)
            readings += header_readings(gpu, header.group(2), header.group(3), source)
            continue
        match = _COUNTER.match(line)
        if gpu is None or match is None:
            continue
        link, name, value = int(match.group(1)), COUNTERS[match.group(2)], match.group(3)
        key = key_of(f"gpu.{{gpu}}.nvlink.{{link}}.errors.{name}", gpu=gpu, link=link)
        readings.append(reading_of(key, value, integer, "", source))
    if not seen:
        raise ImportError_("no 'GPU N:' lines of nvidia-smi nvlink -e")
    return readings


def parse_nvlink(text: str) -> list[Reading]:
    """A file of `nvidia-smi nvlink -s`, `nvlink -e` or both: the readings of each, the
    GPUs' names and UUIDs once. Raises ImportError_ where it holds neither."""
    readings: dict[str, Reading] = {}
    for parse in (parse_nvlink_status, parse_nvlink_errors):
        try:
            for reading in parse(text):
                readings.setdefault(reading.key, reading)
        except ImportError_:
            continue
    if not readings:
        raise ImportError_("no 'GPU N:' lines of nvidia-smi nvlink -s or -e")
    return list(readings.values())


def parse_nvlink_status(text: str) -> list[Reading]:
    """`nvidia-smi nvlink -s` -> per link state and speed, counts per GPU, and each GPU's
    name and UUID. A GPU whose list a paste cut ('...', '[...]') has its links' count
    and active count unknown, saying so: never the links the paste kept. The blocks of
    an `nvlink -e` output in the same file are not links (parse_nvlink_errors)."""
    readings: list[Reading] = []
    gpu = None
    links: dict[int, list[bool]] = {}
    notes: dict[int, str] = {}
    cut: set[int] = set()
    counters: set[int] = set()
    fresh = after_header = in_counters = False
    source = "nvidia-smi-nvlink"
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.strip()
        if (header := _HEADER.match(line)) is not None:  # never a -q section's 'GPU 0000:3B:..
            gpu = int(header.group(1))
            links.setdefault(gpu, [])
            readings += header_readings(gpu, header.group(2), header.group(3), source)
            fresh = after_header = True
            in_counters = False
            continue
        if gpu is None:
            continue
        if _COUNTER.match(line):  # an nvlink -e block: its elisions are no links' either
            counters.add(gpu)
            fresh = after_header = False
            in_counters = True
            continue
        if in_counters:
            continue
        if line in ELISIONS:
            cut.add(gpu)
            after_header = False
            continue
        match = re.match(r"^Link (\d+): (.+)$", line)
        if line and fresh:  # the GPU's first line of an nvlink -s block: a new list
            links[gpu], fresh = [], False
            notes.pop(gpu, None)
            cut.discard(gpu)
        if line and not match and after_header:
            # 'NVML: Unable to retrieve NVLink information as ...': the line right after
            # the GPU's (in a bundle, the other outputs' lines that follow are not)
            notes[gpu] = line
        after_header = after_header and not line
        if not match:
            continue
        link, state = int(match.group(1)), match.group(2).strip()
        state_key = key_of("gpu.{gpu}.nvlink.{link}.state", gpu=gpu, link=link)
        if "inactive" in state.lower():
            readings.append(Reading(state_key, "inactive", source=source))
            links[gpu].append(False)
        else:
            readings.append(Reading(state_key, "active", source=source))
            speed_key = key_of("gpu.{gpu}.nvlink.{link}.speed", gpu=gpu, link=link)
            readings.append(reading_of(speed_key, state, number, "GB/s", source))
            links[gpu].append(True)
    for gpu in counters:  # an nvlink -e block only: nothing said of its links' state
        if not links[gpu] and gpu not in notes and gpu not in cut:
            del links[gpu]
            readings = [r for r in readings if not r.key.startswith(f"gpu.{gpu}.")]
    if not links:
        raise ImportError_("no 'GPU N:' lines of nvidia-smi nvlink -s")
    for gpu, states in links.items():
        note = notes.get(gpu, "nvidia-smi nvlink -s lists no links")
        count_key = key_of("gpu.{gpu}.nvlink.count", gpu=gpu)
        active_key = key_of("gpu.{gpu}.nvlink.active", gpu=gpu)
        if gpu in cut:
            readings += [
                Reading.failed(k, ReadingStatus.MISSING, CUT, source)
                for k in (count_key, active_key)
            ]
        elif states:
            readings.append(Reading(count_key, len(states), source=source))
            readings.append(Reading(active_key, sum(states), source=source))
        elif "all links are inactive" in note.lower():
            readings.append(Reading(active_key, 0, source=source))
            reason = f"nvidia-smi: {note}"
            readings.append(Reading.failed(count_key, ReadingStatus.MISSING, reason, source))
        else:  # no NVLink, or MIG mode: the active count does not apply either, as live
            reason = f"nvidia-smi: {note}"
            readings.append(Reading.failed(count_key, ReadingStatus.UNSUPPORTED, reason, source))
            readings.append(Reading.failed(active_key, ReadingStatus.UNSUPPORTED, reason, source))
    return readings
