"""Atomic file writes: a failed write never damages a file already on disk."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO


def write_atomic(path: Path, write: Callable[[IO[str]], None]) -> None:
    """Write a text file by calling `write(stream)` on a temporary file beside `path`,
    then renaming it over `path`, which must be absent or a regular file. On any error
    the temporary file is removed and an existing `path` is left as it was. The new file
    gets the usual 0666 & ~umask mode.
    """
    directory = path.parent if str(path.parent) else Path(".")
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode):
        # never replace a device (/dev/null), a FIFO, a symlink or a directory
        raise OSError(errno.EEXIST, "exists and is not a regular file", str(path))
    # a short temporary name: a legal 255-byte target name must still be writable
    fd, temp_name = tempfile.mkstemp(prefix=".gpudiag-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as stream:
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temp_name, 0o666 & ~umask)
        os.replace(temp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp_name)
        raise
