"""The `gpudiag` command line's parser (argparse): the global options and the table of
subcommands of gpudiag/cli.py, each command's parser built when the command is named.
Imported where a parser is built (gpudiag.cli.build_parser): a `check` of a snapshot with
its own few options is read without argparse (issue 44: its import and the parser were 3
ms of the command)."""

from __future__ import annotations

import argparse

from gpudiag import __version__, inputs
from gpudiag.commands import COMMANDS, KERNEL_PLANS, command_module
from gpudiag.commands.common import UsageError
from gpudiag.commands.common import path_argument as _path
from gpudiag.output import add_format_options
from gpudiag.termtext import terminal_columns

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import Any, NoReturn


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
