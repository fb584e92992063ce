"""Atomic file writes: a failed write never damages a file already on disk."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO


def write_atomic(path: Path, write: Callable[[IO[str]], None]) -> None:
    """Write a text file by calling `write(stream)` on a temporary file beside `path`,
    then renaming it over `path`. On any error the temporary file is removed and an
    existing `path` is left as it was. The new file gets the usual 0666 & ~umask mode.
    """
    directory = path.parent if str(path.parent) else Path(".")
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
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
