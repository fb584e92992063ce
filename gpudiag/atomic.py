"""Atomic file writes: a failed write never damages a file already on disk.

Every writer (snapshots, exports, captures, baselines, the Parquet fleet file) goes
through `atomic_target`: the target must be absent or a regular file; the data is
written to a temporary file beside it, which then gets the target's mode (an existing
file keeps its permissions: a 0600 snapshot stays 0600) or, for a new file, the usual
0666 & ~umask, and is renamed over the target.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

TEMP_PREFIX = ".gpudiag-"
# tempfile.mkstemp's names: the prefix, 8 of [a-z0-9_], the writer's suffix
_TEMP_NAME = re.compile(r"\.gpudiag-[a-z0-9_]{8}(?:\.tmp|\.parquet\.tmp)")
# A temporary file of ours this old is left by a killed writer (kill -9 mid-export), never
# one being written: the slowest write gpudiag makes, a 10,000-node Parquet fleet, takes
# seconds (benchmarks/fleet_scale.py), a snapshot or an export milliseconds
STALE_TEMP_S = 3600.0


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


@contextlib.contextmanager
def atomic_target(path: str | Path, suffix: str = ".tmp") -> Iterator[str]:
    """Yield a temporary file name beside `path` to write; on leaving without an error
    it takes `path`'s mode (or 0666 & ~umask) and is renamed over `path`. On any error
    the temporary file is removed and an existing `path` is left as it was."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        # never replace a device (/dev/null), a FIFO, a symlink or a directory
        raise OSError(errno.EEXIST, "exists and is not a regular file", str(path))
    remove_stale_temporaries(directory)
    # a short temporary name: a legal 255-byte target name must still be writable
    fd, temp_name = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=suffix, dir=directory)
    os.close(fd)
    try:
        yield temp_name
        os.chmod(temp_name, stat.S_IMODE(mode) if mode is not None else 0o666 & ~_umask())
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp_name)
        raise


def write_atomic(path: Path, write: Callable[[IO[str]], None]) -> None:
    """Write a text file by calling `write(stream)` on a temporary file beside `path`,
    then renaming it over `path` (`atomic_target`: an existing file keeps its mode, a
    new one gets 0666 & ~umask)."""
    with (
        atomic_target(path) as temp_name,
        open(temp_name, "w", encoding="utf-8", newline="\n") as stream,
    ):
        write(stream)
        stream.flush()
        os.fsync(stream.fileno())


def remove_stale_temporaries(directory: str | Path, now: float | None = None) -> list[str]:
    """Remove gpudiag's own temporary files in `directory` that a killed writer left:
    named as `atomic_target` names them, regular files of this user, unchanged for
    STALE_TEMP_S. Returns the names removed. Nothing else is touched; a folder that
    cannot be listed is left as it is (the write then says what is wrong)."""
    now = time.time() if now is None else now
    removed = []
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            if not entry.name.startswith(TEMP_PREFIX) or not _TEMP_NAME.fullmatch(entry.name):
                continue
            with contextlib.suppress(OSError):
                info = entry.stat(follow_symlinks=False)
                if (
                    stat.S_ISREG(info.st_mode)
                    and info.st_uid == os.getuid()
                    and now - info.st_mtime > STALE_TEMP_S
                ):
                    os.unlink(entry.path)
                    removed.append(entry.name)
    return removed


# a default file name's part taken from data (a host name): letters, digits, '.', '_', '-'
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
NAME_PART_MAX = 64


def default_file_name(prefix: str, part: str, suffix: str) -> str:
    """A default file name (`gpudiag-HOST.toml`) whose `part` comes from data: no
    separator, no '..', no leading dot or dash, at most NAME_PART_MAX characters of it,
    so that a capture's host 'x/../../victimdir/pwned' names a file in the current
    folder and nowhere else. The one helper of every default file name."""
    safe = _UNSAFE.sub("_", part)
    safe = re.sub(r"\.{2,}", "_", safe).lstrip(".-")[:NAME_PART_MAX] or "unknown"
    return f"{prefix}{safe}{suffix}"
