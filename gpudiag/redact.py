"""Redaction for snapshots that leave the site: host names, serial numbers, UUIDs, MAC
and IP addresses become stable placeholders (`host-1`, `serial-3`, `uuid-2`, `mac-1`,
`ip-1`). One Redactor used on two snapshots gives the same value the same placeholder,
so a redacted diff still lines up."""

from __future__ import annotations

import re
from typing import Any

from gpudiag.model import Snapshot
from gpudiag.snapshot import snapshot_from_dict, snapshot_to_dict

SENSITIVE_KEYS = (
    (re.compile(r"^host\.hostname$"), "host"),
    (re.compile(r"\.serial$|^dmi\..*serial"), "serial"),
    (re.compile(r"\.uuid$"), "uuid"),
)
PATTERNS = (
    (re.compile(r"\b(?:[0-9a-fA-F]{2}:){5}[0-9a-fA-F]{2}\b"), "mac"),
    (re.compile(r"\b(?:(?:25[0-5]|2[0-4]\d|1?\d?\d)\.){3}(?:25[0-5]|2[0-4]\d|1?\d?\d)\b"), "ip"),
    (re.compile(r"\bGPU-[0-9a-fA-F-]{36}\b|\bMIG-[0-9a-fA-F-]{36}\b"), "uuid"),
)


class Redactor:
    """Replaces sensitive values with placeholders, the same value always the same one."""

    def __init__(self) -> None:
        self.placeholders: dict[str, str] = {}
        self.counts: dict[str, int] = {}

    def placeholder(self, value: str, kind: str) -> str:
        if value not in self.placeholders:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            self.placeholders[value] = f"{kind}-{self.counts[kind]}"
        return self.placeholders[value]

    def _learn(self, data: dict[str, Any]) -> None:
        self.placeholder(str(data["host"]), "host")
        for probe in data["probes"]:
            for reading in probe["readings"]:
                value = reading.get("value")
                for pattern, kind in SENSITIVE_KEYS:
                    if isinstance(value, str) and value and pattern.search(reading["key"]):
                        self.placeholder(value, kind)

    def _text(self, text: str) -> str:
        for value in sorted(self.placeholders, key=len, reverse=True):
            if value and value in text:
                text = text.replace(value, self.placeholders[value])
        for pattern, kind in PATTERNS:
            text = pattern.sub(lambda m, k=kind: self.placeholder(m.group(0), k), text)
        return text

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._text(value)
        if isinstance(value, list):
            return [self._walk(v) for v in value]
        if isinstance(value, dict):
            return {
                k: (v if k in ("key", "schema_version") else self._walk(v))
                for k, v in value.items()
            }
        return value

    def capture(self, capture: dict[str, Any], snapshot: Snapshot) -> dict[str, Any]:
        """A capture (gpudiag/capture.py) with what its snapshot shows sensitive, and every
        MAC, IP address and GPU UUID, replaced wherever it appears."""
        self._learn(snapshot_to_dict(snapshot))
        return self._walk(capture)

    def snapshot(self, snapshot: Snapshot) -> Snapshot:
        """The snapshot with every sensitive value replaced."""
        data = snapshot_to_dict(snapshot)
        self._learn(data)
        return snapshot_from_dict(self._walk(data))
