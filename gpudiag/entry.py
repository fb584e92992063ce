"""The `gpudiag` command's entry point (and `python -m gpudiag`'s).

Ctrl-C at any moment ends with one line and exit code 130, never a traceback: also
while gpudiag's modules are still being imported (the first few hundred milliseconds),
which `gpudiag.cli.main`'s own handler cannot cover. This module imports nothing else
of gpudiag's at import time, so that the window before its handler is as short as the
interpreter's start.
"""

from __future__ import annotations

import sys


def _interrupted() -> int:
    try:
        sys.stderr.write("gpudiag: interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass
    return 130


def main() -> int:
    """Run the command line (gpudiag.cli.main) with Ctrl-C covered from the start.
    `gpudiag --version` alone is answered here, loading nothing else: the same line as
    the parser's --version (test_cli checks it)."""
    try:
        if sys.argv[1:] == ["--version"]:
            from gpudiag import __version__

            print(f"gpudiag {__version__}")
            return 0
        from gpudiag.cli import main as cli_main

        return cli_main()
    except KeyboardInterrupt:
        return _interrupted()
    except RuntimeError as exc:
        # Ctrl-C while a class is being created (a dataclass's fields, __set_name__):
        # Python 3.11 raises it as a RuntimeError caused by the KeyboardInterrupt
        if isinstance(exc.__cause__, KeyboardInterrupt):
            return _interrupted()
        raise
