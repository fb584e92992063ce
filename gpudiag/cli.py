"""The `gpudiag` command line: the global options, the table of subcommands (each a
module of gpudiag/commands/ with add_parser(subparsers) and run(args) -> int), and main.

    gpudiag [--root DIR] [--nvml-replay FILE] [--rules DIR]      the TUI on this node
    gpudiag [...] --export FILE                                  headless snapshot ('-': stdout)
    gpudiag check SNAPSHOT [--rules DIR]                         findings of a saved snapshot
    gpudiag view SNAPSHOT                                        a saved snapshot in the TUI
    gpudiag [...] health [--for nagios|npd|slurm|json]           the check for fleets (health.py)

Exit codes: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (bad input, usage error, failure).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from gpudiag import inputs
from gpudiag.commands import COMMANDS, KERNEL_PLANS, command_module  # noqa: F401 (cli's names)
from gpudiag.commands.common import UsageError

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    import argparse
    from typing import Any

# What a command needs is imported when it runs (`gpudiag --help` and `--version` load
# only the parser's modules): each command module imports its work inside run, and its
# parser (gpudiag/commands/NAME.py's add_parser) is built only when that command is the
# one given (cli_parser._LazyCommands): --help lists the commands from COMMANDS (the
# table in gpudiag/commands/__init__.py).

# the commands that write what --redact hides, besides --export (the default command)
_REDACTING = ("import", "diff", "capture")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (its --help is the command-line reference): made by
    gpudiag/cli_parser.py, which imports argparse. A `check` of a snapshot with its own
    few options is read without it (commands/check.py's `plain_arguments`)."""
    from gpudiag.cli_parser import build_parser as build

    return build()


def __getattr__(name: str) -> Any:
    """The parser's classes (_Formatter, _Parser, _LazyCommands), from cli_parser."""
    if name in ("_Formatter", "_Parser", "_LazyCommands", "_size"):
        from gpudiag import cli_parser

        return getattr(cli_parser, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run(argv: Sequence[str]) -> int:
    """Run the command line; returns the exit code. Raises only for internal errors."""
    args = None
    if argv[:1] == ["check"]:  # the few options of a check read without argparse
        from gpudiag.commands.check import plain_arguments

        args = plain_arguments(argv)
    if args is None:
        args = build_parser().parse_args(list(argv))
    args.argv = tuple(argv)  # the command line a live node's snapshot records
    refuse_empty_targets(args)
    inputs.set_limit(args.max_input)
    if getattr(args, "redact", False) and not (
        args.command in _REDACTING or (args.command is None and args.export)
    ):
        raise UsageError(
            "--redact goes with --export, import, diff or capture (nothing else writes)"
        )
    if args.command is None:
        from gpudiag.commands import default

        return default.run(args)
    return int(command_module(args.command).run(args))


# the options that name where to write, by their dest: an empty one ('') is refused
# before anything runs (it read as "not given": `check --prometheus ''` wrote nothing and
# exited 0, `--export ''` asked for a terminal); '-' is standard output for --export
_WRITE_TARGETS = {
    "export": ("--export", "a file ('-' writes to stdout)"),
    "prometheus": ("--prometheus", "a file"),
    "dataset": ("--dataset", "a folder or URL"),
    "textfile": ("--textfile", "a file"),
    "history": ("--history", "a folder"),
}


def refuse_empty_targets(args: argparse.Namespace) -> None:
    """A UsageError for an option of _WRITE_TARGETS given as ''."""
    for dest, (option, what) in _WRITE_TARGETS.items():
        if getattr(args, dest, None) == "":
            raise UsageError(f"{option} '': the path is empty: name {what}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: one-line errors and exit 3 for bad input, never a traceback."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        code = run(argv)
        sys.stdout.flush()  # a reader gone by now is found here, not at the interpreter's exit
        return code
    except KeyboardInterrupt:
        print("gpudiag: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # stdout closed early (gpudiag --export - | head, check x.toml | true): not an
        # error of ours, and no bad input (3): quietly, with what a shell reports of a
        # command a closed pipe ended (128 + SIGPIPE), as for any other CLI
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except _user_errors() as exc:
        print(f"gpudiag: {inputs.printable(str(exc))}", file=sys.stderr)
        return _EXIT_UNKNOWN
    except Exception as exc:
        if os.environ.get("GPUDIAG_DEBUG"):
            import traceback

            traceback.print_exc()
        print(
            f"gpudiag: internal error: {type(exc).__name__}: {inputs.printable(str(exc))} "
            "(set GPUDIAG_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return _EXIT_UNKNOWN


# the errors that are bad input (one line, exit 3): (module, class name)
_USER_ERRORS = (
    ("gpudiag.snapshot", "SnapshotError"),
    ("gpudiag.nvml", "ReplayError"),
    ("gpudiag.rule_operators", "RuleError"),
    ("gpudiag.inputs", "InputError"),
    ("gpudiag.capture", "CaptureError"),
)
_EXIT_UNKNOWN = 3  # gpudiag.session.EXIT_UNKNOWN (test_cli checks they agree)
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of standard output went away


def _user_errors() -> tuple[type[Exception], ...]:
    """UsageError and the _USER_ERRORS of the modules this run loaded (a module that was
    never imported raised nothing), so that an error costs no import."""
    loaded = (sys.modules.get(module) for module, _ in _USER_ERRORS)
    return (
        UsageError,
        *(getattr(m, name) for m, (_, name) in zip(loaded, _USER_ERRORS, strict=True) if m),
    )


if __name__ == "__main__":
    sys.exit(main())
