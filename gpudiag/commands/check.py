"""`gpudiag check SNAPSHOT`: the findings of a saved snapshot."""

from __future__ import annotations

import argparse
import sys

from gpudiag.cli import _path
from gpudiag.commands.common import PausedGC, load_snapshot, write_prometheus
from gpudiag.output import add_format_options

TYPE_CHECKING = False  # typing's, without importing typing
if TYPE_CHECKING:
    from typing import Any


def add_parser(subparsers: Any) -> None:
    """`gpudiag check`."""
    check = subparsers.add_parser("check")
    check.add_argument(
        "snapshot",
        metavar="SNAPSHOT",
        help="a snapshot gpudiag wrote (--export, import -o), TOML or JSON; '-' reads stdin",
    )
    check.add_argument(
        "--rules",
        metavar="DIR",
        action="append",
        type=_path,  # pathlib is imported where a path is given
        default=argparse.SUPPRESS,
        help="also load the rule files in DIR",
    )
    check.add_argument(
        "--profile",
        metavar="NAME",
        default=argparse.SUPPRESS,
        help="judge against this GPU-model profile",
    )
    add_format_options(check, argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    """Judge the snapshot again with the rules; print its findings (or --format). All
    of it with the garbage collector paused (PausedGC): the modules it imports and the
    snapshot it reads live to the end, and hold no cycles to collect."""
    with PausedGC():
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from gpudiag.model import Severity
    from gpudiag.output import render
    from gpudiag.rulefile import load_rules
    from gpudiag.session import (
        FINDING_INDENT,
        exit_code,
        format_finding,
        format_not_applicable,
        summary_lines,
        with_findings,
    )
    from gpudiag.termtext import output_width, wrap

    rules = load_rules(args.rules, site=True)
    snapshot = with_findings(load_snapshot(args.snapshot), rules, args.profile)
    if args.prometheus:
        write_prometheus(snapshot, args.prometheus)
    if args.format is not None:
        sys.stdout.write(render(snapshot, args.format, rules))
        return exit_code(snapshot.findings)
    # the summary's first line, the findings and the rules that did not apply, each
    # wrapped at the terminal's width under its indent (whole in a pipe)
    lines = [summary_lines(snapshot, rules)[0]]
    lines += [
        (format_finding(finding), FINDING_INDENT)
        for finding in snapshot.findings
        if finding.severity is not Severity.NOT_APPLICABLE
    ]
    lines += [(line, 2) for line in format_not_applicable(snapshot.findings)]
    width = output_width()
    for line, indent in lines:
        print("\n".join(wrap(line, width, indent)))
    return exit_code(snapshot.findings)
