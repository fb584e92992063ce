"""The `gpudiag fleet` and `gpudiag baseline` subcommands (registered by cli.py).

    gpudiag fleet PATH... [--format text|markdown|json] [--threshold Z] [--parquet FILE]
    gpudiag baseline PATH... -o FILE.toml [--quantile Q] [--margin M]

PATH: snapshot files (TOML or JSON) or folders of them, or (fleet) a FILE.parquet that
`fleet --parquet` wrote, alone or with more snapshots. Unreadable files are named on
stderr and skipped. fleet exits 0 when nothing is odd, 1 when something is, 3 when
nothing is odd but some input was bad; baseline 0, or 3 when nothing could be read or
the file cannot be written. Polars is imported only to read or write Parquet.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpudiag import inputs

EXIT_BAD = 3


def add_fleet_commands(commands: Any) -> None:
    """Add `fleet` and `baseline` to the command line's subparsers."""
    fleet = commands.add_parser(
        "fleet", help="what is odd across many nodes' snapshots, and why the slow ones are slow"
    )
    fleet.add_argument(
        "paths",
        metavar="PATH",
        nargs="+",
        help="snapshot files or folders, or a fleet written by --parquet",
    )
    fleet.add_argument(
        "--format",
        choices=("text", "markdown", "json"),
        default=None,
        help="print a report in this form (default: a screen in a terminal, else text)",
    )
    fleet.add_argument(
        "--threshold",
        type=inputs.number_option(0, 1e6, above=True),
        default=5.0,
        metavar="Z",
        help="robust z (distance from the median in MADs x 1.4826) that makes a value odd",
    )
    fleet.add_argument("--parquet", metavar="FILE", help="also write the fleet table as Parquet")
    fleet.add_argument(
        "--workers",
        type=inputs.number_option(1, 1024, integer=True),
        default=None, metavar="N", help="processes reading files"
    )
    baseline = commands.add_parser(
        "baseline", help="write a site rules file from a fleet known to be good"
    )
    baseline.add_argument("paths", metavar="PATH", nargs="+", help="snapshot files or folders")
    baseline.add_argument(
        "-o", "--output", metavar="FILE.toml", required=True, help="the rules file to write"
    )
    baseline.add_argument(
        "--quantile",
        type=inputs.number_option(0, 0.5),
        default=0.01,
        metavar="Q",
        help="a metric's lower bound is this quantile of the fleet's figures (default 0.01)",
    )
    baseline.add_argument(
        "--margin",
        type=inputs.number_option(0, 1),
        default=0.05,
        metavar="M",
        help="and this fraction below it (default 0.05)",
    )


def _fail(message: str) -> int:
    print(f"gpudiag: {inputs.printable(message)}", file=sys.stderr)  # names are data
    return EXIT_BAD


def _load(paths: list[str], workers: int | None) -> Any:
    from gpudiag.fleet.load import load_fleet

    loaded = load_fleet(paths, workers)
    for problem in loaded.bad:
        print(f"gpudiag: skipped {problem}", file=sys.stderr)
    return loaded


def _target_problem(target: str, suffix: str) -> str | None:
    from gpudiag.snapshot import target_problem

    path = Path(target)
    if path.exists() and not path.is_file():
        return "not a regular file"
    if not path.name.endswith(suffix):
        return f"the file name must end in {suffix}"
    return target_problem(path)


def run_fleet(args: argparse.Namespace) -> int:
    """`gpudiag fleet`."""
    if args.parquet and (problem := _target_problem(args.parquet, ".parquet")):
        return _fail(f"--parquet {args.parquet}: {problem}")
    loaded = _load(args.paths, args.workers)
    if not loaded.runs:
        return _fail("no snapshot could be read")
    from gpudiag.fleet.analysis import analyse
    from gpudiag.fleet.report import report_json, report_text

    report = analyse(loaded, args.threshold)
    if args.parquet:
        from gpudiag.fleet.parquet import write_parquet

        try:
            write_parquet(report, args.parquet, loaded)
        except OSError as exc:
            return _fail(f"--parquet {args.parquet}: cannot write: {exc.strerror or exc}")
    if args.format is None and sys.stdout.isatty() and sys.stdin.isatty():
        from gpudiag.fleet.screen import FleetApp

        app = FleetApp(report)
        app.run()
        if app.signalled:
            return int(app.return_code or 0)
    elif args.format == "json":
        print(json.dumps(report_json(report), indent=1))
    else:
        sys.stdout.write(report_text(report, args.format == "markdown"))
    return report.exit_code()


def run_baseline(args: argparse.Namespace) -> int:
    """`gpudiag baseline`."""
    if not 0 <= args.quantile < 0.5:
        return _fail("--quantile must be at least 0 and below 0.5")
    if not 0 <= args.margin < 1:
        return _fail("--margin must be at least 0 and below 1")
    if problem := _target_problem(args.output, ".toml"):
        return _fail(f"-o {args.output}: {problem}")
    loaded = _load(args.paths, None)
    if not loaded.runs:
        return _fail("no snapshot could be read")
    from gpudiag.fleet.baseline import baseline_rules, write_rules

    text, count = baseline_rules(loaded, args.quantile, args.margin)
    try:
        write_rules(text, Path(args.output))
    except OSError as exc:
        return _fail(f"-o {args.output}: cannot write: {exc.strerror or exc}")
    print(f"wrote {args.output}: {count} rules from {len({r.host for r in loaded.runs})} nodes")
    return 0


FLEET_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "fleet": run_fleet,
    "baseline": run_baseline,
}
