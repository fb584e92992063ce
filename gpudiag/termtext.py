"""Plain text for a terminal of any width (80x24 over SSH): the width a command's text
wraps at, and a line wrapped to it under a hanging indent.

The width is $COLUMNS where it is set (to a positive number), else the terminal's when the
text goes to one. In a pipe without $COLUMNS lines are written whole, as `watch` writes
every field there: `gpudiag check node.toml | grep GPU001` finds a finding on one line.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

TYPE_CHECKING = False  # typing's, without importing typing (`check` imports this module)
if TYPE_CHECKING:
    from typing import TextIO

MIN_WIDTH = 20  # narrower than this, a hanging indent leaves no room: it is dropped


def output_width(stream: TextIO | None = None) -> int | None:
    """The columns text written to `stream` (standard output) wraps at, or None (a pipe
    without $COLUMNS: lines whole)."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    stream = sys.stdout if stream is None else stream
    try:
        if stream is not None and stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns or None
    except (AttributeError, OSError, ValueError):  # no descriptor (a test's), or gone
        pass
    return None


def terminal_columns() -> int:
    """shutil.get_terminal_size().columns (COLUMNS, else the terminal's, else 80) without
    importing shutil, and bz2 and lzma behind it: 3 ms of --help's and check's CPU time,
    which argparse's formatter spends on every parser it builds (issue 44). For text that
    wraps at 80 columns in a pipe too (argparse's help, goodput's report)."""
    return output_width(sys.__stdout__) or 80


def wrap(line: str, width: int | None, indent: int = 2) -> list[str]:
    """`line` as lines of at most `width` columns, each after the first indented by
    `indent` spaces; the line whole where `width` is None or it fits. A word is never
    cut (a URL cut in two cannot be followed, nor a path pasted): one that the indent
    would leave no room for goes unindented, and one wider than the width goes whole on
    a line of its own, the one line that may pass the width."""
    import textwrap  # where a line is wider than the terminal only

    if width is None or len(line) <= width:
        return [line]
    longest = max(map(len, line.split()), default=0)
    pad = " " * indent if width - indent >= max(MIN_WIDTH, longest) else ""
    return textwrap.wrap(
        line,
        width,
        subsequent_indent=pad,
        break_on_hyphens=False,
        break_long_words=False,
        drop_whitespace=True,
    ) or [line]


def wrap_all(lines: Iterable[str], width: int | None, indent: int = 2) -> list[str]:
    """Every line wrapped (`wrap`), blank lines kept."""
    return [part for line in lines for part in wrap(line, width, indent)]
