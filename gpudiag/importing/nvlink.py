"""`nvidia-smi nvlink -s`: each link's state and speed, and the counts per GPU."""

from __future__ import annotations

import re

from gpudiag.importing.common import (
    ImportError_,
    key_of,
    number,
    reading_of,
)
from gpudiag.model import Reading, ReadingStatus


def parse_nvlink_status(text: str) -> list[Reading]:
    """`nvidia-smi nvlink -s` -> per link state and speed, and counts per GPU."""
    readings: list[Reading] = []
    gpu = None
    links: dict[int, list[bool]] = {}
    notes: dict[int, str] = {}
    after_header = False
    source = "nvidia-smi-nvlink"
    for raw in text.replace("\r\n", "\n").split("\n"):
        line = raw.strip()
        if match := re.match(r"^GPU (\d+): ", line):  # never a -q section's 'GPU 0000:3B:..
            gpu = int(match.group(1))
            links[gpu] = []
            notes.pop(gpu, None)
            after_header = True
            continue
        match = re.match(r"^Link (\d+): (.+)$", line)
        if gpu is not None and line and not match and after_header:
            # 'NVML: Unable to retrieve NVLink information as ...': the line right after
            # the GPU's (in a bundle, the other outputs' lines that follow are not)
            notes[gpu] = line
        after_header = after_header and not line
        if gpu is None or not match:
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
    if not links:
        raise ImportError_("no 'GPU N:' lines of nvidia-smi nvlink -s")
    for gpu, states in links.items():
        note = notes.get(gpu, "nvidia-smi nvlink -s lists no links")
        count_key = key_of("gpu.{gpu}.nvlink.count", gpu=gpu)
        active_key = key_of("gpu.{gpu}.nvlink.active", gpu=gpu)
        if states:
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
