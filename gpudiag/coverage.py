"""Which readings each source of a snapshot can hold: the live probes by their name; an
nvidia-smi import (a probe named import-KIND) holds what it wrote: the importer writes
every field of the sections its file holds, missing where a section lacks it, and
leaves out the sections the file does not print (see nvsmi._field_readings).

A rule whose evidence is absent is `unknown` when some source of the snapshot should
have produced it, and `not-applicable` when none of its sources can hold it (host rules
on an nvidia-smi import). A source not listed here is taken to hold anything, so a
reading missing beside it stays unknown: not knowing is never turned into a pass.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

# live probe name -> the keys it writes (tests/test_contract.py checks every live key)
LIVE_PROBE_KEYS: dict[str, tuple[str, ...]] = {
    "host": (r"host\..+",),
    "cpu": (r"cpu\..+",),
    "numa": (r"numa\..+",),
    "memory": (r"mem\..+",),
    "pcie": (r"pcie\..+", r"iommu\..+"),
    "platform": (r"dmi\..+", r"platform\..+"),
    "power": (r"power\..+",),
    "kernel": (r"kernel\..+",),
    "faults": (r"faults\..+",),
    "driver": (r"nvml\..+",),
    "gpu": (r"gpu\..+", r"topo\..+"),
}


@lru_cache(maxsize=64)
def _pattern(probe_name: str) -> re.Pattern[str] | None:
    """The keys a source can hold, or None when it is not known here (holds anything)."""
    if probe_name.startswith("import-"):
        return re.compile(r"(?!)")  # holds what it wrote, which is not absent
    patterns = LIVE_PROBE_KEYS.get(probe_name, ())
    if not patterns:
        return None
    return re.compile("|".join(f"(?:{p})" for p in patterns) + r"\Z")


def can_hold(probe_names: Iterable[str], key: str) -> bool:
    """Whether any of these sources can hold `key` (True when one is not known here)."""
    for name in probe_names:
        pattern = _pattern(name)
        if pattern is None or pattern.match(key):
            return True
    return False


def describe(probe_names: Iterable[str]) -> str:
    """The sources in words, for a not-applicable finding's message."""
    names = sorted(set(probe_names))
    imports = [n.removeprefix("import-") for n in names if n.startswith("import-")]
    if imports and len(imports) == len(names):
        return "an import of nvidia-smi " + ", ".join(imports) + " output"
    return "probes " + ", ".join(names)
