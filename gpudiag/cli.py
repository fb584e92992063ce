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

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import import_module
from types import ModuleType

from gpudiag import __version__, inputs
from gpudiag.commands.common import UsageError
from gpudiag.output import add_format_options
from gpudiag.termtext import terminal_columns

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any, NoReturn

# What a command needs is imported when it runs (`gpudiag --help` and `--version` load
# only the parser's modules): each command module imports its work inside run, and its
# parser (gpudiag/commands/NAME.py's add_parser) is built only when that command is the
# one given (_LazyCommands): --help lists the commands from this table.

# The subcommands, in --help's order: name -> (the module of gpudiag/commands/ that adds
# its parser and runs it, its line in --help).
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("check", "evaluate the rules on a saved snapshot"),
    "diff": ("diff", "compare two snapshots: what differs, and why"),
    "run": ("run", "run measurement kernels and print the results"),
    "rules": ("rules", "list, explain and lint rules; list profiles"),
    "watch": ("watch", "sample every GPU at an interval: one row per GPU per sample"),
    "demo": ("demo", "the TUI on a recorded 8-GPU HGX H100 node (healthy or faulty)"),
    "capture": (
        "capture",
        "record this node (every NVML call, host file and command output the probes"
        " use) into one file that --replay probes later",
    ),
    "view": ("view", "open a saved snapshot in the TUI (read-only)"),
    "import": (
        "import_",
        "turn nvidia-smi outputs (-q -x XML, -q text, a bug report, topo -m, nvlink -s) "
        "into a snapshot",
    ),
    "health": ("health", "the quick, safe check for Nagios, NPD, Slurm or a pipeline"),
    "fleet": (
        "fleet",
        "what is odd across many nodes' snapshots, and why the slow ones are slow",
    ),
    "baseline": ("baseline", "write a site rules file from a fleet known to be good"),
    "goodput": (
        "goodput",
        "what failures cost a large job: rates from the fleet's history, ETTR, checkpoints",
    ),
    "monitor": ("monitor", "always on: what bounds each GPU, for Prometheus and node_exporter"),
}
# gpudiag.kernels.plans.PLANS' names (test_cli checks they agree): that module is loaded
# only when kernels run
KERNEL_PLANS = ("quick", "full")
# the commands that write what --redact hides, besides --export (the default command)
_REDACTING = ("import", "diff", "capture")


def command_module(name: str) -> ModuleType:
    """The module of gpudiag/commands/ that runs command `name`."""
    return import_module(f"gpudiag.commands.{COMMANDS[name][0]}")


class _LazyCommands(argparse._SubParsersAction):  # type: ignore[type-arg]
    """The subcommands: --help lists each from COMMANDS, and a command's parser (its
    module's add_parser) is built when the command line names it, the others never."""

    def add_command(self, name: str, help: str) -> None:
        self._name_parser_map[name] = None  # type: ignore[assignment]
        self._choices_actions.append(self._ChoicesPseudoAction(name, (), help))

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        """A command's parser, as argparse makes it (its --help line is COMMANDS')."""
        kwargs.setdefault("help", COMMANDS[name][1])
        line = COMMANDS[name][1]  # its description, at the top of its own --help
        kwargs.setdefault("description", f"{line[0].upper()}{line[1:]}.")
        listed = len(self._choices_actions)
        parser = super().add_parser(name, **kwargs)
        del self._choices_actions[listed:]  # listed once, by add_command
        return parser

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        name = values[0]
        if name in COMMANDS and self._name_parser_map.get(name) is None:
            del self._name_parser_map[name]
            command_module(name).add_parser(self)
        super().__call__(parser, namespace, values, option_string)


def _path(text: str) -> Path:
    """An argparse type: a path (pathlib is imported when one is given, not by --help)."""
    from pathlib import Path

    return Path(text)


def _size(text: str) -> int:
    """An argparse type: a size in bytes ('512M', '2G')."""
    try:
        return inputs.parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


class _Formatter(argparse.HelpFormatter):
    """argparse's help formatter, its width found by `termtext.terminal_columns`."""

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
        **options: Any,
    ) -> None:
        if width is None:
            width = terminal_columns() - 2  # as HelpFormatter does with shutil's
        super().__init__(prog, indent_increment, max_help_position, width, **options)


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error in one line and exits 3; its commands'
    parsers (made by this class too) format with `_Formatter` unless told otherwise."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see gpudiag --help)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (its --help is the command-line reference)."""
    parser = _Parser(
        prog="gpudiag",
        description="Bring up and diagnose a GPU server node.",
        epilog="Exit codes: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (bad input or failure).",
    )
    parser.add_argument("--version", action="version", version=f"gpudiag {__version__}")
    parser.add_argument(
        "--root",
        metavar="DIR",
        default="/",
        help="read host files below DIR (a captured tree: DIR/sys, DIR/proc, ...)",
    )
    parser.add_argument(
        "--nvml-replay",
        metavar="FILE",
        help="answer NVML calls from a recorded replay file instead of the driver",
    )
    parser.add_argument(
        "--replay",
        metavar="CAPTURE",
        help="probe a node recorded by 'gpudiag capture' as if it were this one",
    )
    parser.add_argument(
        "--rules",
        metavar="DIR",
        action="append",
        default=[],
        type=_path,
        help="also load the *.toml rule files in DIR (repeatable)",
    )
    parser.add_argument(
        "--export",
        metavar="FILE",
        help="headless: write a snapshot to FILE (TOML; JSON if it ends in .json;"
        " '-' for stdout) and print a summary",
    )
    parser.add_argument(
        "--redact",
        action="store_true",
        help="with --export: replace host names, serials, UUIDs, MAC and IP addresses",
    )
    parser.add_argument(
        "--redact-key",
        metavar="FILE",
        help="with --redact: placeholders are a keyed hash (HMAC) of each value with the key"
        " in FILE, the same in every export made with the same key",
    )
    parser.add_argument(
        "--max-input",
        metavar="SIZE",
        type=_size,
        default=inputs.DEFAULT_MAX_INPUT,
        help="largest snapshot, import, replay or rule file read (default 256M)",
    )
    parser.add_argument(
        "--profile",
        metavar="NAME",
        help="judge against this GPU-model profile instead of the detected one",
    )
    parser.add_argument(
        "--kernels",
        choices=KERNEL_PLANS,
        help="with --export: also run kernels on the CPU and every GPU and add their results"
        " (quick: STREAM, GEMM, copies; full: larger, and a 60 s burn)",
    )
    parser.add_argument(
        "--until-confident",
        type=inputs.number_option(0, 86400, above=True),
        metavar="S",
        help="with --kernels: STREAM goes on until its intervals are within 3%% or S seconds",
    )
    parser.add_argument(
        "--timeout-scale",
        type=inputs.number_option(0, 100, above=True),
        default=1.0,
        metavar="X",
        help="multiply every probe's timeout by X (slow or loaded nodes)",
    )
    add_format_options(parser)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", action=_LazyCommands)
    for name, (_, help_line) in COMMANDS.items():
        commands.add_command(name, help_line)
    return parser


def run(argv: Sequence[str]) -> int:
    """Run the command line; returns the exit code. Raises only for internal errors."""
    args = build_parser().parse_args(list(argv))
    args.argv = tuple(argv)  # the command line a live node's snapshot records
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
