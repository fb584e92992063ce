"""`nvidia-smi -q -x` XML (DTD v10 to v13), read with defusedxml."""

from __future__ import annotations

import re
from functools import partial
from typing import Any

import defusedxml.ElementTree as SafeET

from gpudiag.importing.common import (
    MAX_DIGITS,
    ImportError_,
    key_of,
    status_of,
)
from gpudiag.importing.gpus import (
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


def _pid(text: str) -> int:
    """A process id: a decimal integer."""
    stripped = text.strip()
    if not stripped.isdigit() or len(stripped) > MAX_DIGITS:
        raise ValueError(f"not a process id: {stripped[:60]!r}")
    return int(stripped)


def _xml_value(gpu: Any, path: str) -> str | None:
    """As _q_value, for one <gpu> element: `<remapped_rows>N/A</remapped_rows>`."""
    element = gpu
    for part in path.split("/"):
        child = element.find(part)
        if child is None:
            text = (element.text or "").strip()
            return text if element is not gpu and text and status_of(text) else None
        element = child
    return element.text or ""


def _xml_mig(index: int, gpu: Any, prefix: str) -> list[Reading]:
    """As _q_mig, for <mig_devices><mig_device> (never seen in a real file here: the
    real XML files have MIG off or 'None'; the tags are nvidia-smi's DTD's)."""
    if (gpu.findtext("mig_mode/current_mig") or "").strip() != "Enabled":
        return []
    holder = gpu.find("mig_devices")
    if holder is None:
        return []
    devices = [
        (
            d.findtext("index"),
            d.findtext("gpu_instance_id"),
            d.findtext("compute_instance_id"),
            d.findtext("shared_fb_memory_usage/total") or d.findtext("fb_memory_usage/total"),
        )
        for d in holder.findall("mig_device")
    ]
    return [mig_instances(index, devices, f"{prefix}/mig_devices")]


_XML_TAG = re.compile(r"<(/?)([A-Za-z_][\w.:-]*)((?:\s[^<>]*?)?)(/?)>")
_GPU_ID = re.compile(r"""\bid\s*=\s*["']([^"']+)["']""")


def xml_stops_part_way(text: str) -> str | None:
    """Where an XML that stops before its end leaves off: 'in <gpu id=...>, <clocks>',
    naming the elements it does not close, innermost last; None where every element it
    opens is closed (any other fault is the parser's to name)."""
    stack: list[str] = []
    for match in _XML_TAG.finditer(text):
        closing, name, attributes, empty = match.groups()
        if empty:
            continue
        if not closing:
            bus = _GPU_ID.search(attributes) if name == "gpu" else None
            stack.append(f"<gpu id={bus.group(1)}>" if bus else f"<{name}>")
        elif stack and stack[-1].startswith((f"<{name}>", f"<{name} ")):
            stack.pop()
        else:
            return None  # mismatched: not a file cut short
    if not stack:
        return None
    shown = stack if len(stack) <= 8 else [*stack[:3], "...", *stack[-4:]]
    return ", ".join(shown)


def xml_readings(text: str) -> list[Reading]:
    try:
        root = SafeET.fromstring(text.encode("utf-8"))
    except Exception as exc:  # defusedxml raises several types for hostile or broken XML
        if (open_ := xml_stops_part_way(text)) is not None:
            raise ImportError_(
                f"the XML stops part-way ({exc}): the end of {open_} is missing"
            ) from None
        raise ImportError_(f"not readable XML: {exc}") from None
    if root.tag != "nvidia_smi_log":
        raise ImportError_(f"XML root is <{root.tag}>, not <nvidia_smi_log>")
    readings = node_readings(
        root.findtext("driver_version"),
        root.findtext("cuda_version"),
        root.findtext("attached_gpus"),
        "nvidia-smi-xml",
        len(root.findall("gpu")),
    )
    for index, gpu in enumerate(root.findall("gpu")):
        prefix = f"nvidia-smi-xml:gpu[{index}]"
        readings.append(Reading(key_of("gpu.{gpu}.health", gpu=index), "ok", source=prefix))
        sections = {child.tag for child in gpu}
        find = partial(_xml_value, gpu)
        readings.extend(field_readings(index, find, True, prefix, sections))
        if "ecc_errors" in sections:
            readings.extend(ecc_readings(index, find, True, prefix))
        if "temperature" in sections:
            readings.extend(tlimit_readings(index, find, True, prefix))
        readings.extend(fabric_status(index, find, True, prefix))
        readings.extend(fabric_health(index, find, True, prefix))
        readings.extend(_xml_mig(index, gpu, prefix))
        reasons = gpu.find("clocks_event_reasons")
        if reasons is None:
            reasons = gpu.find("clocks_throttle_reasons")
        active = (
            None
            if reasons is None
            else [
                name
                for child in reasons
                if (child.text or "").strip() == "Active" and (name := throttle_name(child.tag))
            ]
        )
        if reasons is not None:  # a file without them cannot hold them
            readings.append(throttle_reading(index, active, f"{prefix}/clocks_event_reasons"))
        processes = gpu.find("processes")
        if processes is not None:
            infos = processes.findall("process_info")
            for suffix, letter in (("compute", "C"), ("graphics", "G")):
                try:
                    pids = [
                        _pid(p.findtext("pid") or "")
                        for p in infos
                        if letter in (p.findtext("type") or "")
                    ]
                except ValueError as exc:
                    readings.append(
                        Reading.failed(
                            key_of(f"gpu.{{gpu}}.processes.{suffix}", gpu=index),
                            ReadingStatus.ERROR,
                            f"cannot parse a process id: {exc}",
                            f"{prefix}/processes",
                        )
                    )
                    continue
                readings.append(
                    Reading(
                        key_of(f"gpu.{{gpu}}.processes.{suffix}", gpu=index),
                        pids,
                        source=f"{prefix}/processes",
                    )
                )
    return list(with_ecc_totals(tuple(readings)))
