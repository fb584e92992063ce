"""The `gpudiag` command's entry point (and `python -m gpudiag`'s), and
`gpudiag-slurm-healthcheck`'s.

Ctrl-C at any moment ends with one line and exit code 130, never a traceback: also
while gpudiag's modules are still being imported (the first few hundred milliseconds),
which `gpudiag.cli.main`'s own handler cannot cover. This module imports nothing else
of gpudiag's at import time, so that the window before its handler is as short as the
interpreter's start.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Sequence


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
        if "dataclasses" not in sys.modules:
            _on_first_use("copy", "inspect")
        _import_with_the_collector_paused()
        from gpudiag.cli import main as cli_main
        from gpudiag.commands.common import PausedGC

        PausedGC.process_ends = True  # this process ends when the command returns
        return cli_main()
    except KeyboardInterrupt:
        return _interrupted()
    except RuntimeError as exc:
        # Ctrl-C while a class is being created (a dataclass's fields, __set_name__):
        # Python 3.11 raises it as a RuntimeError caused by the KeyboardInterrupt
        if isinstance(exc.__cause__, KeyboardInterrupt):
            return _interrupted()
        raise


def _import_with_the_collector_paused() -> None:
    """Import the command line with the cyclic garbage collector paused, then freeze what
    the imports made (modules, classes, functions: they live as long as the process) and
    resume it: its passes over them cost 2.5 ms of `--help` (issue 44), and
    no later pass looks at them again, whichever command runs."""
    import gc

    if not gc.isenabled():
        return
    gc.disable()
    try:
        import gpudiag.cli  # imported here, for the collector's sake
        import gpudiag.commands.common  # noqa: F401
    finally:
        gc.freeze()
        gc.enable()


def slurm_healthcheck_main(argv: Sequence[str] | None = None) -> int:
    """`gpudiag-slurm-healthcheck [--config FILE]`: Slurm's HealthCheckProgram, which
    slurmd runs with no arguments and almost no environment. Settings come from FILE, or
    the first of gpudiag.health.config_paths() that exists; without one, the defaults."""
    from pathlib import Path

    from gpudiag.cli import main as cli_main
    from gpudiag.health import HealthError, config_arguments, config_paths
    from gpudiag.session import EXIT_UNKNOWN

    argv = list(sys.argv[1:] if argv is None else argv)
    path: Path | None = None
    if argv[:1] == ["--config"] and len(argv) == 2:
        path = Path(argv[1])
    elif argv:
        print("usage: gpudiag-slurm-healthcheck [--config FILE]", file=sys.stderr)
        return EXIT_UNKNOWN
    else:
        path = next((p for p in config_paths() if p.is_file()), None)
    try:
        arguments = config_arguments(path)
    except HealthError as exc:
        print(f"gpudiag: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    return cli_main(arguments)


class _OnFirstUse(types.ModuleType):
    """A standard module's stand-in in sys.modules until one of its names is used: then
    the module is imported and the stand-in takes its names. `dataclasses` imports `copy`
    (for asdict's deepcopy) and `inspect` (for the signature of a class without a
    docstring; for every class's annotations from Python 3.12), about 7 ms of a `gpudiag
    check` process that, before 3.12, uses neither (issue 44). Unlike importlib's
    LazyLoader, an `import copy` elsewhere does not load it: the stand-in has a __spec__
    of its own. Put in place by `main` only, in the `gpudiag` command's own process and
    before any gpudiag module imports dataclasses: a program that imports gpudiag as a
    library keeps its standard modules as they are."""

    def __getattr__(self, name: str) -> object:
        import importlib

        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        module = importlib.import_module(self.__name__)
        self.__dict__.update(module.__dict__)
        return getattr(module, name)


def _on_first_use(*names: str) -> None:
    """Stand-ins (_OnFirstUse) for the modules named that are not imported yet."""
    spec_type = type(sys.__spec__)  # importlib's ModuleSpec, without importing importlib
    for name in names:
        if name not in sys.modules:
            stand_in = _OnFirstUse(name)
            stand_in.__spec__ = spec_type(name, None)
            sys.modules[name] = stand_in
