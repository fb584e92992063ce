"""`gpudiag diff A B`: what differs between two snapshots, and why."""

from __future__ import annotations

import argparse
import sys

from gpudiag.commands.common import PausedGC, redactor

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import Any


def add_parser(subparsers: Any) -> None:
    """`gpudiag diff`."""
    diff = subparsers.add_parser("diff")
    diff.add_argument("snapshot_a", metavar="A", help="the snapshot compared against ('-': stdin)")
    diff.add_argument("snapshot_b", metavar="B", help="the snapshot compared with A")
    diff.add_argument(
        "--format",
        choices=("text", "markdown", "json"),
        default=None,
        help="print a report in this form (default: the TUI in a terminal, else text)",
    )
    diff.add_argument(
        "--all",
        action="store_true",
        help="also show readings that always differ (serials, idle clocks, ...)",
    )
    diff.add_argument(
        "--redact",
        action="store_true",
        default=argparse.SUPPRESS,
        help="replace host names, serials, UUIDs, MAC and IP addresses",
    )


def run(args: argparse.Namespace) -> int:
    """The diff screen in a terminal, else the report; exit code by the differences."""
    import json

    if args.snapshot_a == args.snapshot_b == "-":
        from gpudiag.commands.common import UsageError

        raise UsageError("diff - -: standard input can be read once only; name a file for A or B")
    with PausedGC():  # the modules too: they live to the end, with no cycles to collect
        from gpudiag.diff import diff_snapshots, report_json, report_text
        from gpudiag.snapshot import load

        a, b = load(args.snapshot_a), load(args.snapshot_b)
        if getattr(args, "redact", False):
            redact = redactor(args)
            a, b = redact.snapshot(a), redact.snapshot(b)
        result = diff_snapshots(a, b)
        _left_to_the_exit(a, b, result)
    if args.format is None and sys.stdout.isatty() and sys.stdin.isatty():
        from gpudiag.tui_diff import DiffApp

        app = DiffApp(result, a, b, args.all, (args.snapshot_a, args.snapshot_b))
        app.run()
        return int(app.return_code or 0) if app.signalled else result.exit_code()
    with PausedGC():
        if args.format == "json":
            print(json.dumps(report_json(result, args.all), indent=1))
        else:
            from gpudiag.termtext import output_width

            names = (args.snapshot_a, args.snapshot_b)
            markdown = args.format == "markdown"
            width = output_width()  # the header wraps at a terminal's width, whole in a pipe
            sys.stdout.write(report_text(result, a, b, args.all, markdown, names, width))
    return result.exit_code()


def _left_to_the_exit(*made: object) -> None:
    """Where the process ends with the command (PausedGC.process_ends, the `gpudiag`
    command's), what it made is left for the exit, which takes the process's memory
    back at once, rather than freed object by object as `run` returns and the
    interpreter ends: held by a reference cycle, which the PausedGC block around this
    freezes, so that no collection ever frees it (two 64-GPU snapshots and their diff
    are about 300,000 objects: 27 ms of the command's 289, wheel, CPU). A caller that
    goes on (a test, a program calling cli.main) frees them as before."""
    if PausedGC.process_ends:
        kept: list[object] = [*made]
        kept.append(kept)
