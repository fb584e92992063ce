"""Reading what a user hands gpudiag (snapshots, imports, rule files, replays, captures),
bounded: one function, `read_input`, for every loader.

- The input is a regular file, or `-` (standard input) where the command takes it. A FIFO,
  a device (`/dev/zero`), a socket or a directory is refused at once, without blocking:
  the file is opened with O_NONBLOCK and checked with fstat before anything is read.
- At most `max_bytes` are read (`limit()`: 256 MiB unless `--max-input` says otherwise);
  a larger input is refused, saying how to raise the limit.
- gzip is unpacked only where it is the format's own (`gzip_ok`: an
  nvidia-bug-report.log.gz, a capture), and the unpacked size is bounded the same way,
  so a gzip bomb stops at the limit.

Also here: `parse_data` (TOML or JSON text into plain data, every parser failure, deep
nesting and oversized integers included, as one `InputError`) and `printable` (control
characters removed from text read from a file, before it reaches a terminal).
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import sys
import zlib
from pathlib import Path
from typing import Any

from gpudiag import tomlcompat

MiB = 1024 * 1024
DEFAULT_MAX_INPUT = 256 * MiB
_limit = DEFAULT_MAX_INPUT
GZIP_MAGIC = b"\x1f\x8b"


class InputError(ValueError):
    """An input that cannot be used; str() is 'NAME: problem', one line."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"{name}: {problem}")
        self.name = name
        self.problem = problem


def set_limit(max_bytes: int) -> None:
    """Set the input size limit (`--max-input`) for this process."""
    global _limit
    if max_bytes <= 0:
        raise ValueError("the input limit must be positive")
    _limit = max_bytes


def limit() -> int:
    """The input size limit in bytes."""
    return _limit


def parse_size(text: str) -> int:
    """'256M', '1G', '4096', '64KiB' -> bytes (the --max-input argument)."""
    match = re.fullmatch(r"\s*(\d{1,15})\s*([kKmMgGtT]?)(i?[bB])?\s*", text)
    if not match:
        raise ValueError(f"not a size: {text!r} (say 512M or 2G)")
    scale = {"": 1, "k": 1024, "m": MiB, "g": 1024 * MiB, "t": 1024 * 1024 * MiB}
    value = int(match.group(1)) * scale[match.group(2).lower()]
    if value <= 0:
        raise ValueError("the size must be positive")
    return value


def _describe(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "is a directory"
    if stat.S_ISFIFO(mode):
        return "is a FIFO (named pipe), not a regular file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device, not a regular file"
    if stat.S_ISSOCK(mode):
        return "is a socket, not a regular file"
    return "is not a regular file"


def size_text(n: int) -> str:
    """1024 -> '1 KiB', 268435456 -> '256 MiB'."""
    for unit, scale in (("GiB", 1024 * MiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} bytes"


def _too_large(max_bytes: int) -> str:
    return f"larger than {size_text(max_bytes)} (--max-input raises the limit)"


def _read_fd(fd: int, max_bytes: int, name: str) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            raise InputError(name, _too_large(max_bytes))


def _gunzip(data: bytes, max_bytes: int, name: str) -> bytes:
    out: list[bytes] = []
    size = 0
    while data:
        stream = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            chunk = stream.decompress(data, max_bytes + 1 - size)
            while chunk:
                out.append(chunk)
                size += len(chunk)
                if size > max_bytes:
                    raise InputError(name, f"unpacked, {_too_large(max_bytes)}")
                chunk = stream.decompress(stream.unconsumed_tail, max_bytes + 1 - size)
        except zlib.error as exc:
            raise InputError(name, f"damaged gzip data: {exc}") from None
        if not stream.eof:
            raise InputError(name, "truncated gzip data")
        data = stream.unused_data if stream.unused_data.startswith(GZIP_MAGIC) else b""
    return b"".join(out)


def read_input(
    path: str | Path,
    *,
    stdin_ok: bool = False,
    gzip_ok: bool = False,
    max_bytes: int | None = None,
) -> bytes:
    """The bytes of one input: a regular file, or standard input for '-' (`stdin_ok`),
    at most `max_bytes` (default: `limit()`), gzip unpacked where `gzip_ok`.
    Raises InputError naming the input and the problem in one line."""
    name = str(path)
    max_bytes = limit() if max_bytes is None else max_bytes
    if name == "-":
        if not stdin_ok:
            raise InputError(name, "standard input is not accepted here; name a file")
        if sys.stdin is None:
            raise InputError("<stdin>", "standard input is closed")
        data = _read_fd(sys.stdin.fileno(), max_bytes, "<stdin>")
    else:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            raise InputError(name, "no such file") from None
        except IsADirectoryError:
            raise InputError(name, "is a directory") from None
        except OSError as exc:
            raise InputError(name, f"cannot read: {exc.strerror or exc}") from None
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise InputError(name, _describe(mode))
            try:
                data = _read_fd(fd, max_bytes, name)
            except OSError as exc:
                raise InputError(name, f"cannot read: {exc.strerror or exc}") from None
        finally:
            os.close(fd)
    if gzip_ok and data.startswith(GZIP_MAGIC):
        data = _gunzip(data, max_bytes, name)
    return data


def read_text(path: str | Path, what: str, **options: Any) -> str:
    """`read_input`, then checks for text: not empty, no NUL bytes, UTF-8."""
    data = read_input(path, **options)
    name = "<stdin>" if str(path) == "-" else str(path)
    if not data.strip():
        raise InputError(name, "file is empty")
    if b"\x00" in data:
        raise InputError(name, f"binary data, not {what}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(name, f"not UTF-8 text (binary?) at byte {exc.start}") from None


def _refuse_constant(token: str) -> float:
    raise ValueError(f"non-finite number {token} is not allowed")


def parse_data(text: str, name: str, as_json: bool | None = None) -> Any:
    """TOML or JSON text (JSON when `as_json`, or when None and it starts with '{') into
    plain data; NaN and infinity refused; every failure an InputError."""
    if as_json is None:
        as_json = text.lstrip().startswith("{")
    try:
        if as_json:
            data = json.loads(text, parse_constant=_refuse_constant)
        else:
            data = tomlcompat.loads(text)
        check_finite(data)
        return data
    except json.JSONDecodeError as exc:
        raise InputError(
            name, f"not valid JSON (truncated?): {exc.msg} at line {exc.lineno}"
        ) from None
    except tomlcompat.TOMLDecodeError as exc:
        raise InputError(name, f"not valid TOML (truncated?): {exc}") from None
    except RecursionError:
        raise InputError(name, "nested too deeply") from None
    except ValueError as exc:  # an integer over Python's 4,300-digit limit, NaN, ...
        raise InputError(name, _one_line(str(exc))) from None


def check_finite(data: Any, where: str = "") -> None:
    """Raise ValueError naming the place of the first NaN or infinity in plain data."""
    stack: list[tuple[Any, str]] = [(data, where)]
    while stack:
        value, at = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{at or 'value'}: non-finite number {value!r} is not allowed")
        if isinstance(value, dict):
            stack.extend((v, f"{at}.{k}" if at else str(k)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(value))


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]


_CONTROL = re.compile(
    "\x1b\\[[0-?]*[ -/]*[@-~]"  # CSI sequences: colours, cursor moves, modes
    "|\x1b\\][^\x07\x1b]*(?:\x07|\x1b\\\\)?"  # OSC sequences: titles, hyperlinks
    "|\x1b[@-_]?"  # other escapes
    "|[\x00-\x08\x0b-\x1f\x7f-\x9f]"  # other C0 and C1 controls but tab and newline
)


def printable(text: str) -> str:
    """Text with terminal escape sequences and control characters removed (tabs and
    newlines stay): what a file says reaches the terminal as text, never as commands."""
    return _CONTROL.sub("", text) if _CONTROL.search(text) else text


def printable_data(data: Any) -> Any:
    """Plain data (dicts, lists, strings) with `printable` applied to every string."""
    if isinstance(data, str):
        return printable(data)
    if isinstance(data, list):
        return [printable_data(v) for v in data]
    if isinstance(data, dict):
        return {printable(str(k)): printable_data(v) for k, v in data.items()}
    return data
