"""The one way gpudiag reads the host: every file goes through a `HostFS` holding the
root, so `--root DIR` points the whole tool at a captured tree (`DIR/sys`, `DIR/proc`,
`DIR/etc`, `DIR/dev`, ...).

Paths are always written as on the live host (`/sys/class/dmi/id/bios_version`) and
joined onto the root in exactly one place, `HostFS.path`.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from gpudiag.model import Reading, ReadingStatus, Value

_UNSUPPORTED_ERRNOS = {errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENODEV, errno.EINVAL, errno.ENXIO}


@dataclass(frozen=True)
class FileText:
    """The outcome of reading one host file: its text, or a status and reason."""

    host_path: str
    source: str
    text: str | None
    status: ReadingStatus = ReadingStatus.OK
    reason: str = ""
    data: bytes | None = None

    @property
    def ok(self) -> bool:
        """True when the file was read."""
        return self.text is not None

    def reading(self, key: str, value: Value | None = None, unit: str = "") -> Reading:
        """A reading of `value` (default: the stripped text) from this file, or a reading
        carrying this file's failure status."""
        if self.text is None:
            return Reading.failed(key, self.status, self.reason, source=self.source, unit=unit)
        if value is None:
            value = self.text.strip()
        return Reading(key=key, value=value, unit=unit, source=self.source)

    def parsed(self, key: str, parse: Callable[[str], Value], unit: str = "") -> Reading:
        """A reading of `parse(text)`; a parse failure is an error reading, not an exception."""
        if self.text is None:
            return self.reading(key, unit=unit)
        try:
            value = parse(self.text)
        except (ValueError, IndexError, KeyError) as exc:
            return Reading.failed(
                key, ReadingStatus.ERROR, f"cannot parse {self.host_path}: {exc}", self.source, unit
            )
        return Reading(key=key, value=value, unit=unit, source=self.source)


def natural_key(text: str) -> list[object]:
    """Sort key that orders embedded numbers numerically: node2 < node10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def source_name(host_path: str) -> str:
    """How a reading names the host file it came from: `sysfs:class/dmi/id/bios_version`,
    `procfs:cpuinfo`, or `file:/etc/os-release`."""
    for prefix, label in (("/sys/", "sysfs:"), ("/proc/", "procfs:")):
        if host_path.startswith(prefix):
            return label + host_path[len(prefix) :]
    return "file:" + host_path


class HostFS:
    """Reads host files below `root` ('/' on the live node)."""

    def __init__(self, root: str | Path = "/", is_root_user: bool | None = None) -> None:
        self.root = Path(root)
        self.is_live = self.root.resolve() == Path("/")
        self.is_root_user = (os.geteuid() == 0) if is_root_user is None else is_root_user

    def path(self, host_path: str) -> Path:
        """The real path of a host path under the root. Host paths must be absolute
        and must not climb out of the root with '..'."""
        pure = PurePosixPath(host_path)
        if not pure.is_absolute():
            raise ValueError(f"host paths are absolute, got {host_path!r}")
        if ".." in pure.parts:
            raise ValueError(f"host paths may not contain '..': {host_path!r}")
        return self.root.joinpath(*pure.parts[1:])

    def _failure(self, host_path: str, exc: OSError) -> FileText:
        source = source_name(host_path)
        if isinstance(exc, FileNotFoundError) or exc.errno == errno.ENOTDIR:
            return FileText(
                host_path, source, None, ReadingStatus.MISSING, f"{host_path} not found"
            )
        if isinstance(exc, PermissionError):
            if self.is_root_user:
                return FileText(
                    host_path, source, None, ReadingStatus.ERROR, f"{host_path}: permission denied"
                )
            return FileText(
                host_path,
                source,
                None,
                ReadingStatus.NEEDS_ROOT,
                f"{host_path} is readable by root only",
            )
        if exc.errno in _UNSUPPORTED_ERRNOS:
            return FileText(
                host_path,
                source,
                None,
                ReadingStatus.UNSUPPORTED,
                f"{host_path}: {exc.strerror or 'not supported'}",
            )
        return FileText(
            host_path, source, None, ReadingStatus.ERROR, f"{host_path}: {exc.strerror or exc}"
        )

    def read(self, host_path: str, max_bytes: int = 4 * 1024 * 1024) -> FileText:
        """Read a text file; failures come back as a status, never as an exception."""
        source = source_name(host_path)
        try:
            with open(self.path(host_path), "rb", buffering=0) as stream:
                # Small reads: procfs sysctl files refuse a multi-megabyte read (ENOMEM).
                chunks: list[bytes] = []
                size = 0
                while size < max_bytes:
                    chunk = stream.read(65536)
                    if not chunk:
                        break
                    chunks.append(chunk)
                    size += len(chunk)
                data = b"".join(chunks)[:max_bytes]
        except IsADirectoryError:
            return FileText(
                host_path, source, None, ReadingStatus.ERROR, f"{host_path} is a directory"
            )
        except OSError as exc:
            return self._failure(host_path, exc)
        return FileText(host_path, source, data.decode("utf-8", errors="replace"), data=data)

    def reading(
        self, key: str, host_path: str, parse: Callable[[str], Value] = str.strip, unit: str = ""
    ) -> Reading:
        """Read one file and parse it into one reading."""
        return self.read(host_path).parsed(key, parse, unit)

    def realpath(self, host_path: str) -> str | None:
        """The host path a (sysfs) symlink resolves to, or None when it does not resolve
        inside the root."""
        real = os.path.realpath(self.path(host_path))
        root = os.path.realpath(self.root)
        if real != root and not real.startswith(root.rstrip("/") + "/"):
            return None
        return "/" + os.path.relpath(real, root) if real != root else "/"

    def glob(self, host_pattern: str) -> list[str]:
        """Host paths matching a glob pattern, sorted naturally (cpu2 before cpu10)."""
        base = self.path("/")
        matches = base.glob(host_pattern.lstrip("/"))
        return sorted(("/" + str(m.relative_to(base)) for m in matches), key=natural_key)

    def exists(self, host_path: str) -> bool:
        """True when the path exists under the root (a dangling link counts as absent)."""
        return self.path(host_path).exists()

    def output(self, name: str, produce: Callable[[], Any]) -> Any:
        """What a command or device gives (`dmidecode -t 17`, the kernel log): `produce()`
        on this host. The one seam a capture records and a replay answers; what
        `produce` returns must be plain data (JSON)."""
        return produce()

    def listdir(self, host_path: str) -> list[str]:
        """Entry names of a directory, sorted naturally; empty when absent or unreadable."""
        try:
            return sorted(os.listdir(self.path(host_path)), key=natural_key)
        except OSError:
            return []
