"""Redaction for snapshots that leave the site.

Identifying values become placeholders, where they are and as whole tokens, and nothing
else changes: host names (and the short name of an FQDN), serial numbers, UUIDs (GPU,
MIG, DMI, `root=UUID=...`), MAC addresses (colon and dash forms, as in
`BOOTIF=01-0c-42-...`, and InfiniBand's 20-byte ones), IPv4 and IPv6 addresses, and user
names and ids in paths and cgroups (`/home/alice`, `user-1000.slice`).

A value counts as found only as a whole token: not inside a longer run of the characters
a host name is made of (letters, digits, '-'), so a host called `vm` leaves
`nvml:nvmlDeviceGetName` and `kvm-clock` alone. Keys and sources (gpudiag's own names
for readings and where they came from) are never changed.

Placeholders: without a key, `host-1`, `serial-3`, ... in order of appearance, the same
value always the same placeholder for one Redactor (so a redacted diff lines up). With a
key (`--redact-key FILE`), `host-3f9a0c2b7d1e`: an HMAC-SHA256 of the value under the key,
the same in every export made with that key, so a redacted fleet keeps one identity per
node and a node's history stays together.

Which readings' whole values identify the node is declared with the readings
(gpudiag/catalog.py: `identifying`), by the probe that makes them.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpudiag.inputs import InputError, read_input
from gpudiag.model import Snapshot
from gpudiag.shipped import identifying_kind
from gpudiag.snapshot import snapshot_from_dict, snapshot_to_dict

# Fields of a snapshot's plain form that gpudiag itself names: never redacted.
UNTOUCHED_FIELDS = frozenset(
    {
        "key",
        "source",
        "schema_version",
        "gpudiag_version",
        "created",
        "rule_id",
        "severity",
        "status",
        "unit",
        "end",
    }
)

_HEX = "[0-9A-Fa-f]"
# Identifying values found by their form, anywhere in a string: (pattern, kind).
PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(rf"\b(?:GPU|MIG)-{_HEX}{{8}}(?:-{_HEX}{{4}}){{3}}-{_HEX}{{12}}\b"), "uuid"),
    (
        re.compile(
            rf"(?<![0-9A-Za-z]){_HEX}{{8}}(?:-{_HEX}{{4}}){{3}}-{_HEX}{{12}}(?![0-9A-Za-z])"
        ),
        "uuid",
    ),
    (re.compile(rf"(?<![0-9A-Za-z:]){_HEX}{{2}}(?::{_HEX}{{2}}){{5,19}}(?![0-9A-Za-z:])"), "mac"),
    (re.compile(rf"(?<![0-9A-Za-z-]){_HEX}{{2}}(?:-{_HEX}{{2}}){{5,19}}(?![0-9A-Za-z-])"), "mac"),
    (re.compile(r"(?<![0-9A-Za-z.])(?:\d{1,3}\.){3}\d{1,3}(?![0-9A-Za-z]|\.\d)"), "ip"),
    (
        re.compile(r"(?<![0-9A-Za-z:])[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?![0-9A-Za-z:])"),
        "ip",
    ),
)
# User names and ids in paths and cgroups: (pattern, kind); the pattern's one group is
# the identifying part.
USER_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?<=/home/)([^/\s:\"',;]+)"), "user"),
    (re.compile(r"(?<=/Users/)([^/\s:\"',;]+)"), "user"),
    (re.compile(r"(?<=/run/user/)(\d+)"), "uid"),
    (re.compile(r"(?<=user-)(\d+)(?=\.slice)"), "uid"),
    (re.compile(r"(?<=user@)(\d+)(?=\.service)"), "uid"),
    (re.compile(r"(?<=/uid_)(\d+)"), "uid"),
)
# What firmware writes where it has no value: never taken for an identifying one.
NOT_VALUES = frozenset(
    v.lower()
    for v in (
        "N/A",
        "None",
        "Not Specified",
        "Not Applicable",
        "To Be Filled By O.E.M.",
        "Default string",
        "System Serial Number",
        "Chassis Serial Number",
        "0123456789",
        "unknown",
        "imported",
        "localhost",
        "localhost.localdomain",
        "[Not Supported]",
    )
)
_HOSTNAME_CHARS = "A-Za-z0-9-"


def read_key(path: str | Path) -> bytes:
    """The redaction key in FILE: its bytes (at most 4 KiB, at least 16), whitespace
    around them ignored. Raises InputError."""
    key = read_input(path, max_bytes=4096).strip()
    if len(key) < 16:
        raise InputError(str(path), "a redaction key needs at least 16 bytes")
    return key


def _identifying(value: str, shortest: int) -> bool:
    """Whether a learned value can stand for the node: long enough, not a placeholder
    that firmware writes where it has nothing."""
    return len(value) >= shortest and value.lower() not in NOT_VALUES and len(set(value)) > 1


def _is_address(text: str, kind: str) -> bool:
    """Whether a candidate of the ip patterns is an address that identifies a node
    (not a netmask, loopback or the unspecified address; not a time such as 12:30:00)."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return False
    if address.is_loopback or address.is_unspecified:
        return False
    if address.version == 4:
        bits = int(address)
        inverted = ~bits & 0xFFFFFFFF
        if bits and inverted & (inverted + 1) == 0:  # 255.255.255.0: a netmask
            return False
    return True


class Redactor:
    """Replaces identifying values with placeholders, the same value always the same
    one (keyed: the same across exports)."""

    def __init__(self, key: bytes | None = None) -> None:
        self.key = key
        self.placeholders: dict[str, str] = {}
        self.counts: dict[str, int] = {}
        self._values: re.Pattern[str] | None = None

    def placeholder(self, value: str, kind: str) -> str:
        """The placeholder of a value, made on first sight."""
        if value not in self.placeholders:
            if self.key is not None:
                digest = hmac.new(self.key, f"{kind}:{value}".encode(), hashlib.sha256)
                self.placeholders[value] = f"{kind}-{digest.hexdigest()[:12]}"
            else:
                self.counts[kind] = self.counts.get(kind, 0) + 1
                self.placeholders[value] = f"{kind}-{self.counts[kind]}"
            self._values = None
        return self.placeholders[value]

    def learn(self, host: str, readings: list[tuple[str, Any]]) -> None:
        """Learn the identifying values of a snapshot: its host name (and an FQDN's
        short name) and the values of the readings the catalog declares identifying."""
        names = [host]
        for key, value in readings:
            kind = identifying_kind(key) if isinstance(value, str) else ""
            if kind == "host":
                names.append(value)
            elif kind and _identifying(value.strip(), 4):
                self.placeholder(value.strip(), kind)
        for name in names:
            name = name.strip()
            if not _identifying(name, 2):
                continue
            self.placeholder(name, "host")
            short = name.split(".", 1)[0]
            if short != name and _identifying(short, 2):
                self.placeholder(short, "host")

    def text(self, text: str) -> str:
        """A string with every identifying value replaced, as whole tokens."""
        if self.placeholders:
            if self._values is None:
                alternatives = "|".join(
                    re.escape(v) for v in sorted(self.placeholders, key=len, reverse=True)
                )
                self._values = re.compile(
                    rf"(?<![{_HOSTNAME_CHARS}])(?:{alternatives})(?![{_HOSTNAME_CHARS}])"
                )
            text = self._values.sub(lambda m: self.placeholders[m.group(0)], text)
        for pattern, kind in PATTERNS:
            text = pattern.sub(self._replacer(kind), text)
        for pattern, kind in USER_PATTERNS:
            text = pattern.sub(lambda m, k=kind: self.placeholder(m.group(1), k), text)
        return text

    def _replacer(self, kind: str) -> Callable[[re.Match[str]], str]:
        def replace(match: re.Match[str]) -> str:
            found = match.group(0)
            if kind == "ip" and not _is_address(found, kind):
                return found
            return self.placeholder(found, kind)

        return replace

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self._walk(v) for v in value]
        if isinstance(value, dict):
            return {k: (v if k in UNTOUCHED_FIELDS else self._walk(v)) for k, v in value.items()}
        return value

    def capture(self, capture: dict[str, Any], snapshot: Snapshot) -> dict[str, Any]:
        """A capture (gpudiag/capture.py) with what its snapshot shows sensitive, and every
        MAC, IP address and GPU UUID, replaced wherever it appears."""
        self.learn(snapshot.host, [(r.key, r.value) for p in snapshot.probes for r in p.readings])
        return self.plain(capture)

    def snapshot(self, snapshot: Snapshot) -> Snapshot:
        """The snapshot with every identifying value replaced."""
        data = snapshot_to_dict(snapshot)
        self.learn(
            snapshot.host,
            [(r.key, r.value) for p in snapshot.probes for r in p.readings],
        )
        return snapshot_from_dict(self._walk(data))

    def plain(self, data: dict[str, Any]) -> dict[str, Any]:
        """Any plain data (a capture file's, say) with its strings redacted, the
        UNTOUCHED_FIELDS left as they are; call `learn` first."""
        return self._walk(data)
