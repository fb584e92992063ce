"""The one way gpudiag reads the host: every file goes through a `HostFS` holding the
root, so `--root DIR` points the whole tool at a captured tree (`DIR/sys`, `DIR/proc`,
`DIR/etc`, `DIR/dev`, ...).

Paths are always written as on the live host (`/sys/class/dmi/id/bios_version`) and
joined onto the root in exactly one place, `HostFS.path`.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from gpudiag.catalog import natural_key  # its home before: still imported from here too
from gpudiag.inputs import printable
from gpudiag.model import Reading, ReadingStatus, Value

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import Any

MAX_HOST_FILE = 1024 * 1024  # a sysfs or procfs file larger than this is corrupt
# ... except the files that grow with the CPU count (/proc/cpuinfo, /proc/interrupts: a
# few MiB on a node with hundreds of CPUs), which callers read with this bound
LARGE_HOST_FILE = 16 * 1024 * 1024
_MAX_LINKS = 40  # as the kernel's path walk (ELOOP)
_LOOP_MARKER = ".gpudiag-symlink-loop"
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
        # a capture's host files are its own node's, whatever `is_live` says of that node
        self.is_this_machine = self.is_live
        self.is_root_user = (os.geteuid() == 0) if is_root_user is None else is_root_user

    def path(self, host_path: str) -> Path:
        """The real path of a host path under the root. Host paths must be absolute
        and must not climb out of the root with '..'. Below a root other than '/', every
        symlink on the way is resolved inside the root, as a chroot would: an absolute
        target starts again at the root and '..' stops there, so `proc/cmdline ->
        /etc/shadow` in a captured tree reads the tree's own etc/shadow."""
        pure = PurePosixPath(host_path)
        if not pure.is_absolute():
            raise ValueError(f"host paths are absolute, got {host_path!r}")
        if ".." in pure.parts:
            raise ValueError(f"host paths may not contain '..': {host_path!r}")
        if self.is_live:
            return self.root.joinpath(*pure.parts[1:])
        return self._resolve_in_root(pure.parts[1:])

    def _resolve_in_root(self, parts: Sequence[str]) -> Path:
        """Follow symlinks component by component, never leaving the root (a link loop
        or more than 40 links gives a path that does not exist, read as missing)."""
        resolved: list[str] = []
        pending = list(reversed(parts))
        links = 0
        while pending:
            part = pending.pop()
            if part in ("", "."):
                continue
            if part == "..":
                if resolved:
                    resolved.pop()
                continue
            candidate = self.root.joinpath(*resolved, part)
            try:
                is_link = stat.S_ISLNK(os.lstat(candidate).st_mode)
            except OSError:
                is_link = False
            if not is_link:
                resolved.append(part)
                continue
            links += 1
            if links > _MAX_LINKS:
                return self.root.joinpath(*resolved, part, _LOOP_MARKER)
            target = PurePosixPath(os.readlink(candidate))
            if target.is_absolute():
                resolved = []
            pending.extend(reversed([p for p in target.parts if p != "/"]))
        return self.root.joinpath(*resolved)

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

    def read(self, host_path: str, max_bytes: int = MAX_HOST_FILE) -> FileText:
        """Read a text file; failures come back as a status, never as an exception.
        Only regular files are read (a FIFO or a device in a captured tree is an error,
        at once, without blocking), at most `max_bytes` (1 MiB unless the caller says
        otherwise: a larger file is an error, not a silent cut); control characters are
        removed from the text (`data` keeps the bytes)."""
        source = source_name(host_path)
        try:
            fd = os.open(self.path(host_path), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except IsADirectoryError:
            return FileText(
                host_path, source, None, ReadingStatus.ERROR, f"{host_path} is a directory"
            )
        except OSError as exc:
            return self._failure(host_path, exc)
        try:
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode):
                return FileText(
                    host_path, source, None, ReadingStatus.ERROR, f"{host_path} is a directory"
                )
            if not stat.S_ISREG(mode):
                return FileText(
                    host_path,
                    source,
                    None,
                    ReadingStatus.ERROR,
                    f"{host_path} is not a regular file (a FIFO or a device)",
                )
            # Small reads: procfs sysctl files refuse a multi-megabyte read (ENOMEM).
            chunks: list[bytes] = []
            size = 0
            while size <= max_bytes:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            if size > max_bytes:
                return FileText(
                    host_path,
                    source,
                    None,
                    ReadingStatus.ERROR,
                    f"{host_path} is larger than {max_bytes} bytes (corrupt?)",
                )
            data = b"".join(chunks)
        except OSError as exc:
            return self._failure(host_path, exc)
        finally:
            os.close(fd)
        text = printable(data.decode("utf-8", errors="replace"))
        return FileText(host_path, source, text, data=data)

    def reading(
        self, key: str, host_path: str, parse: Callable[[str], Value] = str.strip, unit: str = ""
    ) -> Reading:
        """Read one file and parse it into one reading."""
        return self.read(host_path).parsed(key, parse, unit)

    def realpath(self, host_path: str) -> str | None:
        """The host path a (sysfs) symlink resolves to, inside the root as a chroot
        would resolve it (None is kept for callers: it never leaves the root)."""
        if self.is_live:
            return os.path.realpath(host_path)
        real = self.path(host_path)
        return "/" + str(real.relative_to(self.root)) if real != self.root else "/"

    def glob(self, host_pattern: str) -> list[str]:
        """Host paths matching a glob pattern (wildcards within one path component),
        sorted naturally (cpu2 before cpu10); every step resolved inside the root."""
        matches = ["/"]
        for part in PurePosixPath(host_pattern).parts[1:]:
            if not any(c in part for c in "*?["):
                matches = [str(PurePosixPath(m) / part) for m in matches]
                matches = [m for m in matches if os.path.lexists(self.path(m))]
                continue
            matches = [
                str(PurePosixPath(m) / name)
                for m in matches
                for name in self.listdir(m)
                if fnmatch.fnmatchcase(name, part)
            ]
        return sorted(matches, key=natural_key)

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
