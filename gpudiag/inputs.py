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
nesting and oversized integers included, as one `InputError`; every string in what it
returns, keys too, is `printable`) and `printable` (control characters and terminal
escapes removed from text read from a file, before it reaches a terminal). The guard is a
property of the parser every loader calls, not a call each loader must remember; the
loaders that parse JSON with msgspec for speed (the fleet's fast path, the Parquet fleet
entry) ask `json_may_hold_controls` of the raw bytes, one C-speed pass per file, and
take the guarded path where it says yes. A file name in an `InputError` is printable too.
"""

from __future__ import annotations

import errno
import math
import os
import re
import stat
import sys
from collections.abc import Callable

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:  # json, zlib and pathlib are imported where used: not by --help
    from pathlib import Path
    from typing import Any

MiB = 1024 * 1024
DEFAULT_MAX_INPUT = 256 * MiB
_limit = DEFAULT_MAX_INPUT
GZIP_MAGIC = b"\x1f\x8b"


class InputError(ValueError):
    """An input that cannot be used; str() is 'NAME: problem', one line."""

    def __init__(self, name: str, problem: str) -> None:
        name, problem = printable(name), printable(problem)
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


def not_regular(path: str | Path) -> str | None:
    """Why `path` cannot be read as a file (a FIFO, a device, a socket, a directory, a
    symbolic link to nothing or in a loop), or None for a regular file: what a folder's
    walk says of an entry it skips. Never opens it."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "a symbolic link to nothing" if os.path.islink(path) else "no such file"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symbolic link loop"
        return f"cannot read: {exc.strerror or exc}"
    return None if stat.S_ISREG(mode) else _describe(mode)


def size_text(n: int) -> str:
    """1024 -> '1 KiB', 268435456 -> '256 MiB'."""
    for unit, scale in (("GiB", 1024 * MiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{n} bytes"


def _too_large(max_bytes: int) -> str:
    """Only the --max-input limit is raised with --max-input: a fixed bound of a kind of
    file (a redaction key's 4 KiB, a settings file's 64 KiB) is said as it is."""
    if max_bytes != _limit:
        return f"larger than {size_text(max_bytes)}, the most it can be"
    return f"larger than {size_text(max_bytes)} (--max-input raises the limit)"


def _read_fd(fd: int, max_bytes: int, name: str, expected: int = 0) -> bytes:
    """At most `max_bytes` of the file, else InputError. `expected`: its size where known
    (a regular file's), read in one call of that size and one more byte, so that a single
    chunk is returned as it is, not copied again by a join (a 4.5 MB snapshot took 8 ms
    to read in 1 MiB chunks, 5 so; issue 44)."""
    chunks: list[bytes] = []
    size = 0
    step = max(expected + 1, 1 << 20)
    while True:
        chunk = os.read(fd, min(step, max_bytes + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            raise InputError(name, _too_large(max_bytes))


_UNPACK_CHUNK = 256 * 1024  # what one step of unpacking gzip may produce


def _gunzip(data: bytes, max_bytes: int, name: str) -> bytes:
    """The unpacked bytes of (possibly several concatenated) gzip members. Unpacked twice,
    in bounded steps: first only counted, so that a gzip bomb is refused at the limit with
    no more than a step held (300 MB of zeros peaked at 540 MB when the whole was kept),
    then kept, once it is known to fit."""
    _unpack(data, max_bytes, name, keep=None)
    out: list[bytes] = []
    _unpack(data, max_bytes, name, keep=out)
    return b"".join(out)


def _unpack(data: bytes, max_bytes: int, name: str, keep: list[bytes] | None) -> None:
    import zlib

    size = 0
    while data:
        stream = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            chunk = stream.decompress(data, _UNPACK_CHUNK)
            while chunk:
                size += len(chunk)
                if size > max_bytes:
                    raise InputError(name, f"unpacked, {_too_large(max_bytes)}")
                if keep is not None:
                    keep.append(chunk)
                chunk = stream.decompress(stream.unconsumed_tail, _UNPACK_CHUNK)
        except zlib.error as exc:
            raise InputError(name, f"damaged gzip data: {exc}") from None
        if not stream.eof:
            raise InputError(name, "truncated gzip data")
        data = stream.unused_data if stream.unused_data.startswith(GZIP_MAGIC) else b""


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
            status = os.fstat(fd)
            mode = status.st_mode
            if not stat.S_ISREG(mode):
                raise InputError(name, _describe(mode))
            try:
                data = _read_fd(fd, max_bytes, name, status.st_size)
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
    if not data or data.isspace():  # data.strip() without copying the whole text
        raise InputError(name, "file is empty")
    if b"\x00" in data:
        raise InputError(name, f"binary data, not {what}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(name, f"not UTF-8 text (binary?) at byte {exc.start}") from None


def text_fingerprint(text: str) -> tuple[int, int]:
    """(CRC-32, length in bytes) of the text's UTF-8: how a module compiled ahead from a
    shipped file (rules/compiled.py) records which text it was made from. It tells an edit
    from the text compiled; it is no security boundary (whoever can write the file can
    write the module beside it)."""
    import zlib

    data = text.encode("utf-8")
    return zlib.crc32(data), len(data)


def compiled_module(name: str) -> Any:
    """A module compiled ahead from shipped files (gpudiag.shipped_compiled,
    gpudiag.rules.compiled), or None where it cannot be loaded: missing, truncated or
    damaged (a SyntaxError, or any error its code raises). The caller then parses the
    sources, as it does where the module is stale; a name the module lacks it asks with
    getattr, for the same reason."""
    import importlib

    try:
        return importlib.import_module(name)
    except Exception:  # whatever a damaged file raises: the sources are there
        sys.modules.pop(name, None)
        return None


def _refuse_constant(token: str) -> float:
    raise ValueError(f"non-finite number {token} is not allowed")


def parse_data(
    text: str, name: str, as_json: bool | None = None, *, keep_controls: bool = False
) -> Any:
    """TOML or JSON text (JSON when `as_json`, or when None and it starts with '{') into
    plain data, every string `printable` (but with `keep_controls`, for a loader that
    holds a file's raw bytes as text and guards them itself: a capture's host files);
    NaN and infinity refused; every failure an InputError.

    One pass in Python at most: every float is checked as the parser makes it, and the
    strings are walked (`printable_data`) only where the text may hold a control
    character or an escape (`_may_hold_controls`, a scan in C); a file gpudiag wrote
    holds none."""
    import json

    if as_json is None:
        as_json = text.lstrip().startswith("{")
    # TOML's parser (and its error class) only for TOML: a JSON load never imports it
    toml_error: type[Exception] = json.JSONDecodeError
    if not as_json:
        from gpudiag import tomlcompat

        toml_error = tomlcompat.TOMLDecodeError
    try:
        try:
            data = _parse(text, as_json, _finite_float)
        except _NonFinite as exc:  # parsed again, to say where
            check_finite(_parse(text, as_json, float))
            raise ValueError(f"non-finite number {exc} is not allowed") from None
        if keep_controls or not _may_hold_controls(text, as_json):
            return data
        return printable_data(data)
    except json.JSONDecodeError as exc:
        raise InputError(
            name, f"not valid JSON (truncated?): {exc.msg} at line {exc.lineno}"
        ) from None
    except toml_error as exc:
        raise InputError(name, f"not valid TOML (truncated?): {exc}") from None
    except RecursionError:
        raise InputError(name, "nested too deeply") from None
    except ValueError as exc:  # an integer over Python's 4,300-digit limit, NaN, ...
        raise InputError(name, _one_line(str(exc))) from None


class _NonFinite(ValueError):
    """A float the parser met that is NaN or infinite (str(): its text)."""


def _finite_float(text: str) -> float:
    """The parsers' parse_float: a finite float, else _NonFinite (TOML's nan and inf,
    JSON's 1e999)."""
    value = float(text)
    if value - value != 0:  # inf - inf and nan - nan are nan
        raise _NonFinite(text)
    return value


def _parse(text: str, as_json: bool, parse_float: Callable[[str], float]) -> Any:
    if as_json:
        import json

        return json.loads(text, parse_constant=_refuse_constant, parse_float=parse_float)
    from gpudiag import tomlcompat

    return tomlcompat.loads(text, parse_float=parse_float)


class _Compiled:
    """A regular expression compiled when one of its methods is first used (then held
    as this object's own attribute): this module's patterns took 1.4 ms of every
    command's start to compile, and a command that reads clean files uses few of them
    (issue 44)."""

    def __init__(self, pattern: str | bytes) -> None:
        self.pattern = pattern

    def __getattr__(self, name: str) -> Any:
        compiled = re.compile(self.pattern)
        for method in ("search", "sub", "match", "fullmatch"):
            setattr(self, method, getattr(compiled, method))
        return getattr(compiled, name)


# What `printable` removes can only reach a parsed string through these characters in
# the text: a backslash (an escape), a control character, DEL, C1 or a surrogate
_MAY_CONTROL = _Compiled(r"[\\\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029]")
# and, in TOML, a line break or tab without an escape too: a raw tab in a string, a
# multi-line string (one scan of the text for both)
_MAY_CONTROL_TOML = _Compiled(
    r"[\\\x00-\x09\x0b-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029]|\"\"\"|'''"
)


def _may_hold_controls(text: str, as_json: bool) -> bool:
    """Whether a string parsed from `text` may hold something `printable` removes or
    `one_line` replaces (a line break, a tab). ASCII
    JSON: only through an escape of such a character or a raw DEL (a raw control
    character in a JSON string is refused by the parser): `json_may_hold_controls`,
    one-byte searches in C (microseconds for a snapshot), so that an innocent escape (the
    quotes of a rule's fix, which every export holds) does not walk every string; else
    (non-ASCII JSON, TOML) one regular-expression scan of the text."""
    if as_json and text.isascii():
        return json_may_hold_controls(text.encode("ascii"))
    return (_MAY_CONTROL if as_json else _MAY_CONTROL_TOML).search(text) is not None


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


# The largest magnitude of a number a reading (a kernel sample, a statistic) can hold: a
# float64's largest over 2**32. The fleet's arrays, the Parquet table and the rules'
# comparisons hold numbers as float64, and the fleet's statistics of up to 2**32 values
# (sums, differences from a median, a MAD scaled by 1.4826) must not overflow; so an
# integer past it (a captured temperature of 10**400) or a float (a 1e308 in a file) is
# refused where it is read. No measurement comes near: NVML's widest counters are 64-bit.
MAX_NUMBER = sys.float_info.max / 2**32


def number_too_large(value: object) -> bool:
    """Whether `value` is a number (int or float, not bool) a reading cannot hold: beyond
    `MAX_NUMBER`, or not finite."""
    if type(value) is int or type(value) is float:
        return not -MAX_NUMBER <= value <= MAX_NUMBER
    return False


def too_large_text(value: float) -> str:
    """What is wrong with such a number, in a few words (never its 400 digits)."""
    if type(value) is int:
        what = f"a number of {len(str(abs(value)))} digits"
    else:
        what = f"the number {value:.4g}"
    return f"{what} is larger than a reading can hold (at most about {MAX_NUMBER:.2g})"


def check_numbers(data: Any, where: str = "") -> None:
    """Raise ValueError naming the place (`where`.key[index]) of the first number in
    plain data that a reading cannot hold (`number_too_large`): the bound of every
    loader, the snapshot's included (model.check_value)."""
    stack: list[tuple[Any, str]] = [(data, where)]
    while stack:
        value, at = stack.pop()
        if number_too_large(value):
            raise ValueError(f"{at or 'value'}: {too_large_text(value)}")
        if isinstance(value, dict):
            stack.extend((v, f"{at}.{k}" if at else str(k)) for k, v in value.items())
        elif isinstance(value, list | tuple):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(value))


_CONTROL = _Compiled(
    "\x1b\\[[0-?]*[ -/]*[@-~]"  # CSI sequences: colours, cursor moves, modes
    "|\x1b\\][^\x07\x1b]*(?:\x07|\x1b\\\\)?"  # OSC sequences: titles, hyperlinks
    "|\x1b[@-_]?"  # other escapes
    "|[\x00-\x08\x0b-\x1f\x7f-\x9f]"  # other C0 and C1 controls but tab and newline
    "|[\ud800-\udfff]"  # a lone surrogate (JSON's \ud800): not text, cannot be written
)


def printable(text: str) -> str:
    """Text with terminal escape sequences, control characters (tabs and newlines stay)
    and lone surrogates removed: what a file says reaches the terminal as text, never as
    commands, and can always be written as UTF-8."""
    return _CONTROL.sub("", text) if _CONTROL.search(text) else text


# How a control character or a line break can appear in JSON text that a strict parser
# accepts (a raw one below 0x20 is invalid JSON, refused by the parser): a \u escape of
# C0, DEL, C1, a surrogate (a lone one is not text) or a line or paragraph separator, the
# short escapes \b \f \n \r \t, a raw DEL, a raw C1 in UTF-8 (0xC2 0x80-0x9F), or a raw
# U+2028 or U+2029 (0xE2 0x80 0xA8-0xA9). gpudiag writes none of them in a snapshot.
_JSON_CONTROL = _Compiled(
    rb"\\u(?:00(?:0[0-9a-fA-F]|1[0-9a-fA-F]|7[fF]|[89][0-9a-fA-F])|[dD][89a-fA-F]|202[89])"
    rb"|\\[bfnrt]|\x7f|\xc2[\x80-\x9f]|\xe2\x80[\xa8\xa9]"
)
# one-byte hints, each a memchr (a two-byte search is 300 times slower here): a snapshot
# without a backslash, DEL, 0xC2 or 0xE2 (gpudiag writes none) is clear in microseconds
_JSON_HINTS = (b"\\", b"\x7f", b"\xc2", b"\xe2")


def json_may_hold_controls(raw: bytes) -> bool:
    """Whether JSON bytes may hold a string with a control character or escape (then the
    caller takes the guarded path). One-byte searches, in C, and the pattern tried only
    where one hits (searched over the whole file, with no literal to skip by, it took about
    a JSON parse's time on a snapshot holding one backslash). May say yes for a text that
    only looks like one (an escaped backslash before 'u00'): the guarded path is then taken
    for nothing."""
    for hint in _JSON_HINTS:  # every match begins with a hint: try the pattern there only
        at = raw.find(hint)
        while at != -1:
            if _JSON_CONTROL.match(raw, at):
                return True
            at = raw.find(hint, at + 1)
    return False


def printable_data(data: Any) -> Any:
    """Plain data (dicts, lists, strings) with `printable` applied to every string, and
    `one_line` to the strings of a one-line field (`ONE_LINE_FIELDS`: the string a table
    holds under that name, or any string of a list it holds there)."""
    if isinstance(data, str):
        return printable(data)
    if isinstance(data, list):
        return [printable_data(v) for v in data]
    if isinstance(data, dict):
        return {
            printable(str(k)): _one_line_data(v) if k in ONE_LINE_FIELDS else printable_data(v)
            for k, v in data.items()
        }
    return data


def _one_line_data(data: Any) -> Any:
    if isinstance(data, str):
        return one_line(data)
    if isinstance(data, list):
        return [_one_line_data(v) for v in data]
    return printable_data(data)


# The fields of what gpudiag reads (snapshots, the Parquet fleet's entry, rule files,
# profiles) whose text is one line wherever it is shown: a host or node name, a reading's
# key, unit, source, status and value (a model, a driver version, a serial, a bus id), a
# finding's rule, severity, subject and title, a kernel's names. A finding's message, why
# and fix, a reading's reason and an error may hold several lines.
ONE_LINE_FIELDS = frozenset(
    {
        "host",
        "node",
        "path",
        "created",
        "gpudiag_version",
        "name",
        "title",
        "key",
        "keys",
        "unit",
        "units",
        "source",
        "status",
        "statuses",
        "value",
        "configs",
        "rule_id",
        "severity",
        "subject",
        "action",
        "findings",
        "kernel",
        "device",
        "metric",
        "model",
        "driver",
        "serial",
        "bus_id",
    }
)
# what breaks a line where one-line text is shown (a terminal, a text or Markdown report,
# a Slurm reason, str.splitlines): tab, line feed, the other C0 separators, NEL, and
# Unicode's line and paragraph separators
_BREAKS = _Compiled("[\t\n\x0b\x0c\r\x1c-\x1e\x85\u2028\u2029]+")


# Linux's HOST_NAME_MAX: no node's host name (/proc/sys/kernel/hostname, what nvidia-smi
# and gpudiag record) is longer. A name of a host name's characters that is longer is cut
# to it: the fleet folds such names into node sets (ClusterShell), which cannot read a
# range of 102 digits or more ('node-1' and 300 digits ended a fleet report).
HOST_NAME_MAX = 64
_HOST_CHARACTERS = _Compiled(r"[A-Za-z0-9._-]+")


def host_name(text: str) -> str:
    """A host name as every loader keeps it: `one_line`; and where it is made of a host
    name's characters (letters, digits, '.', '_', '-': what the fleet folds into node
    sets), at most HOST_NAME_MAX of them. Other text is shown as it is, literally."""
    text = one_line(text)
    if len(text) > HOST_NAME_MAX and _HOST_CHARACTERS.fullmatch(text):
        return text[:HOST_NAME_MAX]
    return text


def one_line(text: str) -> str:
    """The one rule of every one-line field, at every loader (a snapshot's or capture's
    host, a node name, a reading's key and value, an imported model, driver, serial or
    bus id): `printable`, and each run of line breaks and tabs one space, so that a host
    named 'n\\nCRITICAL fake' can never start a line of a report. Cheap where there is
    nothing to do (str.isprintable, in C)."""
    if text.isprintable():
        return text
    return printable(_BREAKS.sub(" ", text))


def number_option(
    minimum: float,
    maximum: float,
    *,
    integer: bool = False,
    above: bool = False,
) -> Callable[[str], Any]:
    """The one validator of every number a user gives gpudiag (an argparse `type`, and
    settings files through `check_number`): finite, and between `minimum` (excluded
    where `above`) and `maximum`; anything else is a usage error (exit 3) saying so."""

    def parse(text: str) -> float | int:
        import argparse  # a number given on a command line: argparse is reading it

        try:
            value: float | int = int(text) if integer else float(text)
        except (ValueError, OverflowError):
            kind = "a whole number" if integer else "a number"
            raise argparse.ArgumentTypeError(f"not {kind}: {text[:40]!r}") from None
        try:
            return check_number(value, minimum, maximum, above=above, integer=integer)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"{exc}, got {text[:40]!r}") from None

    parse.__name__ = "integer" if integer else "number"  # argparse names it in errors
    return parse


def check_number(
    value: Any, minimum: float, maximum: float, *, above: bool = False, integer: bool = False
) -> Any:
    """`value` if it is a finite number in range (see `number_option`), else ValueError
    saying the range."""
    low = "above" if above else "at least"
    kind = "a whole number" if integer else "a finite number"
    wanted = f"must be {kind} {low} {_figure(minimum)} and at most {_figure(maximum)}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(wanted)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(wanted)
    if value < minimum or (above and value == minimum) or value > maximum:
        raise ValueError(wanted)
    return value


def _figure(x: float) -> str:
    """4096 and 604800 as written, 0.5 as 0.5, never 1e+06."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"
