"""Pure parsers for the text formats Linux uses in /sys and /proc."""

from __future__ import annotations

import re

# The most CPUs a Linux kernel is built for (NR_CPUS with x86-64's MAXSMP): a CPU list or
# mask naming more is corrupt, and is refused before it is materialised.
MAX_CPUS = 8192


def parse_cpulist(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11]; '' -> []. A list naming more than
    MAX_CPUS CPUs (`0-100000000` in a corrupt cpu/online) is a ValueError."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            first, _, last = part.partition("-")
            last, _, stride = last.partition(":")  # 0-15:2 (rare, from cmdline syntax)
            span = range(int(first), int(last) + 1, int(stride) if stride else 1)
            if len(cpus) + len(span) > MAX_CPUS:
                raise ValueError(f"names more than {MAX_CPUS} CPUs: {text.strip()[:60]!r}")
            cpus.extend(span)
        else:
            cpus.append(int(part))
            if len(cpus) > MAX_CPUS:
                raise ValueError(f"names more than {MAX_CPUS} CPUs: {text.strip()[:60]!r}")
    return sorted(set(cpus))


def format_cpulist(cpus: list[int]) -> str:
    """[0, 1, 2, 3, 8] -> '0-3,8': the kernel's own compact form."""
    ranges: list[str] = []
    values = sorted(set(cpus))
    start = prev = None
    for cpu in [*values, None]:
        if cpu is not None and prev is not None and cpu == prev + 1:
            prev = cpu
            continue
        if start is not None:
            ranges.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = cpu
    return ",".join(ranges)


def parse_cpumask(text: str) -> list[int]:
    """A sysfs hex CPU mask ('ffff,00000000' as in local_cpus) -> CPU numbers; a mask
    wider than MAX_CPUS bits is a ValueError."""
    digits = text.strip().replace(",", "")
    if len(digits) > MAX_CPUS // 4:
        raise ValueError(f"a CPU mask wider than {MAX_CPUS} bits: {digits[:60]!r}...")
    value = int(digits, 16)
    return [bit for bit in range(value.bit_length()) if value >> bit & 1]


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo or a node's meminfo -> {field: kB}. 'Node 0 MemTotal: 5 kB' -> MemTotal."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        if not sep:
            continue
        words = rest.split()
        if not words:
            continue
        name = re.sub(r"^Node \d+ ", "", name.strip())
        fields[name] = int(words[0])
    return fields


def parse_bracketed(text: str) -> str:
    """'always [madvise] never' -> 'madvise' (the kernel marks the active choice)."""
    match = re.search(r"\[([^\]]+)\]", text)
    if not match:
        raise ValueError(f"no [selected] choice in {text.strip()!r}")
    return match.group(1)


def parse_int(text: str) -> int:
    """A decimal integer file."""
    return int(text.strip())


def parse_bool01(text: str) -> bool:
    """'1' -> True, '0' -> False."""
    value = text.strip()
    if value not in ("0", "1"):
        raise ValueError(f"expected 0 or 1, got {value!r}")
    return value == "1"


def parse_words(text: str) -> list[str]:
    """Whitespace-separated words."""
    return text.split()


def parse_key_counts(text: str) -> dict[str, int]:
    """'TOTAL_ERR_COR 3\\nBadTLP 1' (AER counter files) -> {'TOTAL_ERR_COR': 3, ...}."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2:
            counts[words[0]] = int(words[1])
    return counts
