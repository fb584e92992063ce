"""An nvidia-bug-report.log, or a bundle of several nvidia-smi outputs: the -q or
-q -x section out of it, and the topo -m and nvlink -s outputs bundled after it."""

from __future__ import annotations

import re

from gpudiag.importing.common import (
    ImportError_,
)
from gpudiag.importing.nvlink import parse_nvlink
from gpudiag.importing.pastes import is_kernel_log, parse_xid_lines
from gpudiag.importing.topo import parse_topo_matrix
from gpudiag.model import Reading


def extract_from_bug_report(text: str) -> str:
    """The nvidia-smi XML or -q section of an nvidia-bug-report.log, or the text itself."""
    start = text.find("<?xml")
    end = text.find("</nvidia_smi_log>")
    if start != -1 and end != -1:
        return text[start : end + len("</nvidia_smi_log>")]
    marker = text.find("==============NVSMI LOG==============")
    if marker != -1:
        rest = text[marker:]
        stop = re.search(r"\n\*{3,}|\n_{5,}|\n____", rest[1:])
        return rest[: stop.start() + 1] if stop else rest
    return text


def with_bundled(text: str, readings: list[Reading]) -> list[Reading]:
    """A file holding other outputs after the -q or -q -x one (an exporter's or a bug
    report's bundle): its `topo -m` matrix and `nvlink -s` / `-e` too, each read as its kind,
    where they add what the first did not say, and the Xids of its kernel log."""
    have = {r.key for r in readings}
    for parse in (parse_topo_matrix, parse_nvlink):
        try:
            extra = parse(text)
        except ImportError_:
            continue  # not in this file
        readings += [r for r in extra if r.key not in have and r.key.startswith("gpu.")]
        have |= {r.key for r in extra}
    if is_kernel_log(text):  # a bug report's kernel log: its Xids, as the faults probe's
        readings += [r for r in parse_xid_lines(text) if r.key not in have]
    return readings
