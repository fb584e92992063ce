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
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO


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
    # a short temporary name: a legal 255-byte target name must still be writable
    fd, temp_name = tempfile.mkstemp(prefix=".gpudiag-", suffix=suffix, dir=directory)
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
